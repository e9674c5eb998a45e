package restore_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
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
)

// kubeReplay is BenchmarkReplayKube's data, built once per process (the
// benchmark runs again for every -count).
type kubeReplay struct {
	dir, base string
	repo      *repository.Repo
	plan      *restore.PointInTimePlan
}

var (
	kubeReplayOnce sync.Once
	kubeReplayData *kubeReplay
	kubeReplayErr  error
)

// BenchmarkReplayKube replays Kubernetes-like changes as benchtool kube
// writes them (one put or delete per revision, 1-4 KiB values 25-60 %
// random base64, 5 % deletes, mostly updates) onto a snapshot of 20 000
// such objects, from zstd segments of 2 700 revisions (capture's 8 MiB
// bound) in a directory store, through restore.Replay (what lifeboat
// restore --to-revision runs, at ReplayGCPercent), and side by side the
// baseline: etcd's own mvcc store over a default backend applying the
// same revisions from memory, one write transaction per revision, no
// segments and no checks (the revisions are decoded before its clock
// starts). The two run one after the other in each run of the
// benchmark (-count runs lifeboat n times, then mvcc n times: run the
// binary several times instead to alternate them, as the machine is
// shared). LIFEBOAT_REPLAY_OBJECTS sets the snapshot's objects (default
// 20 000), LIFEBOAT_REPLAY_REVISIONS the revisions (default 60 000).
//
//	go test ./restore -run '^$' -bench BenchmarkReplayKube -benchtime 3x
func BenchmarkReplayKube(b *testing.B) {
	kubeReplayOnce.Do(func() { _, kubeReplayErr = newKubeReplay() })
	if kubeReplayErr != nil {
		b.Fatal(kubeReplayErr)
	}
	d := kubeReplayData
	b.Run("lifeboat", func(b *testing.B) {
		defer restoreGC(restore.ReplayGCPercent)()
		benchReplay(b, d.base, filepath.Join(d.dir, "replay.db"), d.plan, d.repo)
	})
	b.Run("mvcc", func(b *testing.B) {
		var total, cpu float64
		revisions := 0
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			db := filepath.Join(d.dir, "mvcc.db")
			restoretest.CopyFile(b, d.base, db)
			// The revisions in memory, read while the clock is
			// stopped (and dropped after each run: the live heap
			// is the store's, as in lifeboat's run).
			var all []repository.Revision
			for _, si := range d.plan.Segments {
				seg, _, err := d.repo.ReadSegment(b.Context(), si, nil)
				if err != nil {
					b.Fatal(err)
				}
				all = append(all, seg.Revisions...)
			}
			revisions = len(all)
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
		}
		b.ReportMetric(float64(revisions)*float64(b.N)/total, "revisions/s")
		b.ReportMetric(float64(revisions)*float64(b.N)/cpu, "revisions/cpu-s")
	})
}

func closeKubeReplay() {
	if kubeReplayData != nil {
		os.RemoveAll(kubeReplayData.dir)
	}
}

func newKubeReplay() (*kubeReplay, error) {
	const perSegment = 2700
	objects, revisions := 20000, 60000
	for _, v := range []struct {
		env string
		n   *int
	}{{"LIFEBOAT_REPLAY_OBJECTS", &objects}, {"LIFEBOAT_REPLAY_REVISIONS", &revisions}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("%s=%q: not a positive number", v.env, s)
			}
			*v.n = n
		}
	}
	dir, err := os.MkdirTemp("", "lifeboat-replay-kube-")
	if err != nil {
		return nil, err
	}
	// Removed at the end of the test binary (closeKubeReplay, TestMain).
	d := &kubeReplay{dir: dir, base: filepath.Join(dir, "base.db")}
	kubeReplayData = d
	rnd := rand.New(rand.NewPCG(5, 6))
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
	type state struct{ create, version int64 }
	live := map[string]state{}
	keys := make([]string, objects)
	be := backend.NewDefaultBackend(zap.NewNop(), d.base)
	kv := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
	for i := range keys {
		keys[i] = "/registry/pods/ns" + strconv.Itoa(i%40) + "/pod-" + strconv.Itoa(i)
		txn := kv.Write(traceutil.TODO())
		rev := txn.Put([]byte(keys[i]), value(), 0)
		txn.End()
		live[keys[i]] = state{rev, 1}
	}
	snapRev := kv.Rev()
	kv.Close()
	be.Close()

	st, err := uploaderDir(dir)
	if err != nil {
		return nil, err
	}
	d.repo = &repository.Repo{Store: st, Cluster: "bench"}
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
		o, hash, err := d.repo.PutSegment(context.Background(), seg, enc)
		if err != nil {
			return nil, err
		}
		_, _, c, e, _ := repository.ParseSegmentName(filepath.Base(o.Key))
		p.Segments = append(p.Segments, repository.SegmentInfo{Generation: seg.Generation, First: seg.First, Last: seg.Last, Compression: c, Encryption: e, Object: o})
		p.Links = append(p.Links, repository.ChainLink{Key: o.Key, Header: seg.SegmentHeader, Hash: hash})
		prev = hash
	}
	p.Revision, p.Revisions = rev, rev-snapRev
	p.Window = repository.Window{Generation: p.Snapshot.ID, Anchor: p.Snapshot, From: snapRev, Through: rev, Segments: p.Segments}
	d.plan = p
	return d, nil
}

// restoreGC sets the GC target as lifeboat restore --to-revision does
// for its replay, and returns the undo.
func restoreGC(percent int) func() {
	old := debug.SetGCPercent(percent)
	return func() { debug.SetGCPercent(old) }
}
