package restore_test

import (
	"context"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
)

// BenchmarkReplayBigBase replays Kubernetes-like changes (one put or
// delete per revision, 1-4 KiB values 25-60 % random base64, 5 %
// deletes, as benchtool kube writes) onto a copy of a large etcd
// database: LIFEBOAT_REPLAY_BASE names a bare bbolt file (an etcd
// member's db, e.g. a copy of the bench's 180 000-object one), which is
// never written; the copies go next to it. LIFEBOAT_REPLAY_REVISIONS
// (default 40 000) revisions in segments of 2 700. Skipped without the
// variable (it needs a large file). It reports the replay's
// revisions/s (Replay's own figure: opening the store, the key index
// restore included) and, apart, open-s: the seconds of opening an mvcc
// store on the base alone (the one-time cost of the key index restore).
//
//	LIFEBOAT_REPLAY_BASE=/var/tmp/rfast/base.db go test ./restore -run '^$' -bench BenchmarkReplayBigBase -benchtime 1x
func BenchmarkReplayBigBase(b *testing.B) {
	base := os.Getenv("LIFEBOAT_REPLAY_BASE")
	if base == "" {
		b.Skip("LIFEBOAT_REPLAY_BASE is not set: no large base to replay onto")
	}
	revisions := 40000
	if s := os.Getenv("LIFEBOAT_REPLAY_REVISIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		revisions = n
	}
	const perSegment = 2700
	dir := filepath.Join(filepath.Dir(base), "bench-"+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })

	// The live keys of the base, with their create revision and version.
	type state struct{ create, version int64 }
	live := map[string]state{}
	var keys []string
	db := filepath.Join(dir, "replay.db")
	restoretest.CopyFile(b, base, db)
	t0 := time.Now()
	be := backend.NewDefaultBackend(zap.NewNop(), db)
	kv := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
	openSeconds := time.Since(t0).Seconds()
	snapRev := kv.Rev()
	from := []byte{0}
	for {
		res, err := kv.Range(context.Background(), from, []byte{0xff}, mvcc.RangeOptions{Limit: 2000})
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range res.KVs {
			live[string(e.Key)] = state{e.CreateRevision, e.Version}
			keys = append(keys, string(e.Key))
		}
		if len(res.KVs) < 2000 {
			break
		}
		from = append(append([]byte{}, res.KVs[len(res.KVs)-1].Key...), 0)
	}
	kv.Close()
	be.Close()

	rnd := rand.New(rand.NewPCG(3, 4))
	value := func() []byte {
		n := 1024 + rnd.IntN(3*1024)
		v := make([]byte, n)
		raw := make([]byte, n*(25+rnd.IntN(36))/100*3/4)
		for i := range raw {
			raw[i] = byte(rnd.IntN(256))
		}
		base64.StdEncoding.Encode(v, raw)
		for i := base64.StdEncoding.EncodedLen(len(raw)); i < n; i++ {
			v[i] = 'a' + byte(i%16)
		}
		return v
	}
	st, err := uploaderDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	repo := &repository.Repo{Store: st, Cluster: "bench"}
	enc := repository.Encoding{Compression: "zstd"}
	p := &restore.PointInTimePlan{Snapshot: &repository.Manifest{ID: repository.NewID(time.Now(), snapRev), Revision: snapRev}}
	rev, prev := snapRev, ""
	for rev-snapRev < int64(revisions) {
		n := min(perSegment, int64(revisions)-(rev-snapRev))
		seg := &repository.Segment{SegmentHeader: repository.SegmentHeader{
			Format: repository.SegmentFormat, ClusterID: 1, Generation: p.Snapshot.ID, First: rev + 1, Last: rev + n,
			CapturedThrough: rev + n, CapturedAt: time.Now(), PrevHash: prev, Token: 1,
		}}
		if prev == "" {
			seg.SnapshotID, seg.SnapshotRevision = p.Snapshot.ID, snapRev
		}
		for range n {
			rev++
			r := repository.Revision{Revision: rev, Received: time.Now()}
			for {
				k := keys[rnd.IntN(len(keys))]
				s, ok := live[k]
				if ok && rnd.IntN(20) == 0 {
					r.Ops = append(r.Ops, repository.Op{Delete: true, Key: []byte(k)})
					delete(live, k)
					break
				}
				if !ok && rnd.IntN(2) == 0 {
					continue // mostly updates
				}
				if ok {
					s.version++
				} else {
					s = state{rev, 1}
				}
				live[k] = s
				r.Ops = append(r.Ops, repository.Op{Key: []byte(k), Value: value(), CreateRevision: s.create, Version: s.version})
				break
			}
			seg.Revisions = append(seg.Revisions, r)
		}
		o, hash, err := repo.PutSegment(b.Context(), seg, enc)
		if err != nil {
			b.Fatal(err)
		}
		_, _, c, e, _ := repository.ParseSegmentName(filepath.Base(o.Key))
		p.Segments = append(p.Segments, repository.SegmentInfo{Generation: seg.Generation, First: seg.First, Last: seg.Last, Compression: c, Encryption: e, Object: o})
		p.Links = append(p.Links, repository.ChainLink{Key: o.Key, Header: seg.SegmentHeader, Hash: hash})
		prev = hash
	}
	p.Revision, p.Revisions = rev, rev-snapRev
	p.Window = repository.Window{Generation: p.Snapshot.ID, Anchor: p.Snapshot, From: snapRev, Through: rev, Segments: p.Segments}

	b.ResetTimer()
	benchReplay(b, base, db, p, repo)
	b.ReportMetric(openSeconds, "open-s")
	b.ReportMetric(float64(len(keys)), "base-keys")
}
