package restore_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/signing"
)

// BenchmarkReplaySigned measures what signed change segments cost a
// replay (issue 28: at most 5 % on 100 000 revisions): the same
// Kubernetes-like changes (one put per revision, 1-4 KiB values, mostly
// updates of 2 000 objects, segments of 2 700 revisions as capture
// writes them at ~1 000 revisions/s) stored twice in directory stores,
// once by a Repo without a signing key and read without trust, once
// signed and read by a Repo that trusts the key (ReadSegmentRaw checks
// every segment's signature). Each iteration replays both, alternately,
// onto fresh copies of one snapshot; it reports each one's revisions per
// CPU second (the machine is shared; the order alternates between
// iterations, so use an even -benchtime: CPU, not wall time, is what the
// replay costs) and revisions/s, and the signed replay's CPU overhead in
// percent. LIFEBOAT_REPLAY_REVISIONS sets the revisions (default
// 100 000).
//
//	go test ./restore -run '^$' -bench BenchmarkReplaySigned -benchtime 3x
func BenchmarkReplaySigned(b *testing.B) {
	revisions := int64(100000)
	if v := os.Getenv("LIFEBOAT_REPLAY_REVISIONS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			b.Fatalf("LIFEBOAT_REPLAY_REVISIONS=%q", v)
		}
		revisions = n
	}
	const objects, perSegment = 2000, 2700
	dir := b.TempDir()
	rnd := rand.New(rand.NewPCG(3, 4))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	value := func() []byte {
		v := make([]byte, 1024+rnd.IntN(3*1024))
		random := len(v) * (25 + rnd.IntN(36)) / 100 // 25-60 % random, the rest repeats
		for i := range v {
			if i < random {
				v[i] = alphabet[rnd.IntN(len(alphabet))]
			} else {
				v[i] = 'x'
			}
		}
		return v
	}
	keys := make([][]byte, objects)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "/registry/pods/ns%02d/pod-%05d", i%40, i)
	}
	type state struct{ create, version int64 }
	live := map[string]state{}
	base := filepath.Join(dir, "base.db")
	be := backend.NewDefaultBackend(zap.NewNop(), base)
	kv := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
	for _, k := range keys {
		txn := kv.Write(traceutil.TODO())
		rev := txn.Put(k, value(), 0)
		txn.End()
		live[string(k)] = state{rev, 1}
	}
	snapRev := kv.Rev()
	kv.Close()
	be.Close()

	key, err := signing.Generate()
	if err != nil {
		b.Fatal(err)
	}
	type variant struct {
		name   string
		writer *repository.Repo // stores the segments
		reader *repository.Repo // replays them
		plan   *restore.PointInTimePlan
		prev   string
	}
	vs := []*variant{{name: "unsigned"}, {name: "signed"}}
	snap := &repository.Manifest{ID: repository.NewID(time.Now(), snapRev), Revision: snapRev}
	for _, v := range vs {
		v.writer = restoretest.DirRepo(b, filepath.Join(dir, v.name))
		v.reader = restoretest.DirRepo(b, filepath.Join(dir, v.name))
		if v.name == "signed" {
			v.writer.Signer = key
			v.reader.Trust = &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
		}
		v.plan = &restore.PointInTimePlan{Snapshot: snap}
	}
	enc := repository.Encoding{Compression: "zstd"}
	for rev := snapRev; rev < snapRev+revisions; {
		n := min(int64(perSegment), snapRev+revisions-rev)
		var revs []repository.Revision
		for range n {
			rev++
			k := keys[rnd.IntN(objects)]
			s, ok := live[string(k)]
			var op repository.Op
			switch {
			case ok && rnd.IntN(20) == 0:
				op = repository.Op{Delete: true, Key: k}
				delete(live, string(k))
			case ok:
				s.version++
				live[string(k)] = s
				op = repository.Op{Key: k, Value: value(), CreateRevision: s.create, Version: s.version}
			default:
				live[string(k)] = state{rev, 1}
				op = repository.Op{Key: k, Value: value(), CreateRevision: rev, Version: 1}
			}
			revs = append(revs, repository.Revision{Revision: rev, Received: time.Now(), Ops: []repository.Op{op}})
		}
		for _, v := range vs {
			seg := &repository.Segment{SegmentHeader: repository.SegmentHeader{
				Format: repository.SegmentFormat, ClusterID: 1, Generation: snap.ID, First: rev - n + 1, Last: rev,
				CapturedThrough: rev, CapturedAt: time.Now(), PrevHash: v.prev, Token: 1,
			}, Revisions: revs}
			if v.prev == "" {
				seg.SnapshotID, seg.SnapshotRevision = snap.ID, snapRev
			}
			o, hash, err := v.writer.PutSegment(b.Context(), seg, enc)
			if err != nil {
				b.Fatal(err)
			}
			si := repository.SegmentInfo{Generation: seg.Generation, First: seg.First, Last: seg.Last, Compression: "zstd", Encryption: "none", Object: o}
			v.plan.Segments = append(v.plan.Segments, si)
			v.plan.Links = append(v.plan.Links, repository.ChainLink{Key: o.Key, Header: seg.SegmentHeader, Hash: hash})
			v.prev = hash
		}
	}
	for _, v := range vs {
		p := v.plan
		p.Revision, p.Revisions = snapRev+revisions, revisions
		p.Window = repository.Window{Generation: snap.ID, Anchor: snap, From: snapRev, Through: p.Revision, Segments: p.Segments}
	}

	cpu, wall := map[string]float64{}, map[string]float64{}
	db := filepath.Join(dir, "replay.db")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := vs
		if i%2 == 1 {
			order = []*variant{vs[1], vs[0]} // neither always first
		}
		for _, v := range order {
			b.StopTimer()
			restoretest.CopyFile(b, base, db)
			b.StartTimer()
			c0 := cpuSeconds(b)
			st, err := restore.Replay(b.Context(), db, v.plan, v.reader, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			cpu[v.name] += cpuSeconds(b) - c0
			wall[v.name] += st.Seconds
		}
	}
	for _, v := range vs {
		b.ReportMetric(float64(revisions)*float64(b.N)/cpu[v.name], v.name+"-revisions/cpu-s")
		b.ReportMetric(float64(revisions)*float64(b.N)/wall[v.name], v.name+"-revisions/s")
	}
	b.ReportMetric(100*(cpu["signed"]/cpu["unsigned"]-1), "signed-cpu-overhead-%")
}
