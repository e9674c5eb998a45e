package restore_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// BenchmarkReplay replays Kubernetes-like changes (1-4 KiB values, 1-4
// operations per revision, a delete now and then, over 2 000 objects)
// onto a 2 000-key snapshot, from zstd segments of 1 000 revisions in a
// directory store, and reports revisions per second, next to the
// ceiling: etcd's mvcc applying the same revisions from memory.
//
//	go test ./restore -run '^$' -bench BenchmarkReplay -benchtime 3x
func BenchmarkReplay(b *testing.B) {
	const objects, revisions, perSegment = 2000, 20000, 1000
	dir := b.TempDir()
	rnd := rand.New(rand.NewPCG(1, 2))
	value := func() []byte {
		v := make([]byte, 1024+rnd.IntN(3*1024))
		for i := range v {
			v[i] = byte(rnd.IntN(256))
		}
		return v
	}
	keys := make([][]byte, objects)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "/registry/pods/ns%02d/pod-%05d", i%40, i)
	}
	type state struct{ create, version int64 }
	live := map[string]state{}

	// The snapshot: every object written once through mvcc.
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

	// The changes.
	st, err := uploaderDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	repo := &repository.Repo{Store: st, Cluster: "bench"}
	enc := repository.Encoding{Compression: "zstd"}
	p := &restore.PointInTimePlan{Snapshot: &repository.Manifest{ID: repository.NewID(time.Now(), snapRev), Revision: snapRev}}
	rev, prev := snapRev, ""
	for len(p.Segments)*perSegment < revisions {
		seg := &repository.Segment{SegmentHeader: repository.SegmentHeader{
			Format: repository.SegmentFormat, ClusterID: 1, Generation: p.Snapshot.ID, First: rev + 1, Last: rev + perSegment,
			CapturedThrough: rev + perSegment, CapturedAt: time.Now(), PrevHash: prev, Token: 1,
		}}
		if prev == "" {
			seg.SnapshotID, seg.SnapshotRevision = p.Snapshot.ID, snapRev
		}
		for range perSegment {
			rev++
			r := repository.Revision{Revision: rev, Received: time.Now()}
			used := map[int]bool{}
			for range 1 + rnd.IntN(4) {
				i := rnd.IntN(objects)
				if used[i] {
					continue
				}
				used[i] = true
				k := keys[i]
				s, ok := live[string(k)]
				if ok && rnd.IntN(10) == 0 {
					r.Ops = append(r.Ops, repository.Op{Delete: true, Key: k})
					delete(live, string(k))
					continue
				}
				if ok {
					s.version++
				} else {
					s = state{rev, 1}
				}
				live[string(k)] = s
				r.Ops = append(r.Ops, repository.Op{Key: k, Value: value(), CreateRevision: s.create, Version: s.version})
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

	// All revisions in memory, for the ceiling.
	var all []repository.Revision
	for _, si := range p.Segments {
		seg, _, err := repo.ReadSegment(b.Context(), si, nil)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, seg.Revisions...)
	}

	b.Run("lifeboat", func(b *testing.B) {
		benchReplay(b, base, filepath.Join(dir, "replay.db"), p, repo)
	})
	// The ceiling, side by side: the same revisions, decoded in memory
	// beforehand, applied with etcd's mvcc over a default backend, one
	// write transaction per revision, no checks, no segments to read.
	b.Run("mvcc-ceiling", func(b *testing.B) {
		var total, cpu float64
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			db := filepath.Join(dir, "ceiling.db")
			restoretest.CopyFile(b, base, db)
			b.StartTimer()
			c0, start := cpuSeconds(b), time.Now()
			be := backend.NewDefaultBackend(zap.NewNop(), db)
			le := lease.NewLessor(zap.NewNop(), be, nil, lease.LessorConfig{MinLeaseTTL: 1})
			kv := mvcc.NewStore(zap.NewNop(), be, le, mvcc.StoreConfig{})
			for _, r := range all {
				txn := kv.Write(traceutil.TODO())
				for _, op := range r.Ops {
					if op.Delete {
						txn.DeleteRange(op.Key, nil)
					} else {
						txn.Put(op.Key, op.Value, 0)
					}
				}
				txn.End()
			}
			be.ForceCommit()
			le.Stop()
			kv.Close()
			be.Close()
			total += time.Since(start).Seconds()
			cpu += cpuSeconds(b) - c0
			if got := int64(len(all)); got != p.Revisions {
				b.Fatalf("%d revisions", got)
			}
		}
		b.ReportMetric(float64(p.Revisions)*float64(b.N)/total, "revisions/s")
		b.ReportMetric(float64(p.Revisions)*float64(b.N)/cpu, "revisions/cpu-s")
	})
}

func cpuSeconds(b testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func uploaderDir(dir string) (*uploader.Dir, error) {
	return uploader.NewDir(filepath.Join(dir, "store"))
}

// benchReplay replays p onto a fresh copy (db) of base b.N times and
// reports revisions/s and, since the machine is shared, revisions per CPU
// second (user + system, all of the process's threads): what the replay
// costs regardless of the load around it.
func benchReplay(b *testing.B, base, db string, p *restore.PointInTimePlan, repo *repository.Repo) {
	b.Helper()
	var total, cpu float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		restoretest.CopyFile(b, base, db)
		b.StartTimer()
		c0 := cpuSeconds(b)
		stats, err := restore.Replay(b.Context(), db, p, repo, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuSeconds(b) - c0
		total += stats.Seconds
	}
	b.ReportMetric(float64(p.Revisions)*float64(b.N)/total, "revisions/s")
	b.ReportMetric(float64(p.Revisions)*float64(b.N)/cpu, "revisions/cpu-s")
}
