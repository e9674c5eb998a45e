package restore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// replayTo plans and replays a restore to target into a file.
func replayTo(t testing.TB, s *restoretest.PITRSource, target restore.Target) (*restore.PointInTimePlan, string) {
	t.Helper()
	ctx := t.Context()
	l, err := s.Repo.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := restore.PlanPointInTime(ctx, s.Repo, l, target, s.IDs)
	if err != nil {
		t.Fatalf("plan %s: %v", target, err)
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	if _, err := repository.Fetch(ctx, s.Repo, p.Snapshot, path, repository.FetchOptions{Identities: s.IDs}); err != nil {
		t.Fatal(err)
	}
	if _, err := repository.CheckFile(ctx, path, p.Snapshot); err != nil {
		t.Fatal(err)
	}
	st, err := restore.Replay(ctx, path, p, s.Repo, s.IDs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("replay to %s: %v", target, err)
	}
	keys := p.Keys(s.Repo)
	if len(keys) != 2+len(p.Segments) || keys[1] != p.Snapshot.Object {
		t.Errorf("plan keys %v", keys)
	}
	for _, k := range keys {
		if repository.Held(k) {
			t.Errorf("%s still held after the replay", k)
		}
	}
	if st.To != p.Revision || st.Revisions != p.Revisions || st.From != p.Snapshot.Revision {
		t.Fatalf("replay to %s: stats %+v, plan: revision %d from %d (%d revisions)", target, st, p.Revision, p.Snapshot.Revision, p.Revisions)
	}
	return p, path
}

// offline opens a bbolt file with etcd's mvcc store, as the replay does.
func offline(t testing.TB, path string) (mvcc.KV, func()) {
	t.Helper()
	lg := zap.NewNop()
	be := backend.NewDefaultBackend(lg, path)
	le := lease.NewLessor(lg, be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	kv := mvcc.NewStore(lg, be, le, mvcc.StoreConfig{})
	return kv, func() { le.Stop(); kv.Close(); be.Close() }
}

func compareKVs(t testing.TB, rev int64, got, want []*mvccpb.KeyValue) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("revision %d: %d keys restored, the source had %d", rev, len(got), len(want))
	}
	for i := 0; i < len(got) && i < len(want); i++ {
		g, w := got[i], want[i]
		if !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || g.CreateRevision != w.CreateRevision ||
			g.ModRevision != w.ModRevision || g.Version != w.Version || g.Lease != w.Lease {
			t.Errorf("revision %d key %d: restored %q create %d mod %d version %d lease %x (%d bytes), source %q create %d mod %d version %d lease %x (%d bytes)",
				rev, i, g.Key, g.CreateRevision, g.ModRevision, g.Version, g.Lease, len(g.Value), w.Key, w.CreateRevision, w.ModRevision, w.Version, w.Lease, len(w.Value))
			return
		}
	}
}

// checkOffline compares the replayed file with the source at rev: the
// store's revision, every key, and HashKV over the same compaction.
func checkOffline(t testing.TB, s *restoretest.PITRSource, path string, rev int64) {
	t.Helper()
	want := s.Live(t, rev)
	kv, done := offline(t, path)
	defer done()
	if got := kv.Rev(); got != rev {
		t.Fatalf("replayed store at revision %d, want %d", got, rev)
	}
	res, err := kv.Range(t.Context(), []byte{0}, []byte{}, mvcc.RangeOptions{Rev: rev})
	if err != nil {
		t.Fatal(err)
	}
	compareKVs(t, rev, res.KVs, want.KVs)
	h, _, err := kv.HashStorage().HashByRev(rev)
	if err != nil {
		t.Fatal(err)
	}
	if h.CompactRevision > want.Compact && h.CompactRevision == rev {
		// The replay started from a snapshot taken right at a
		// compaction: etcd answers HashKV at a compaction's revision
		// with the hash it stored when compacting, over the history
		// since the compaction before, which the snapshot no longer
		// holds. The keys above are compared; the hash cannot be.
		t.Logf("revision %d: HashKV not comparable: the source's is over compact %d, the snapshot's compact is %d", rev, want.Compact, h.CompactRevision)
		return
	}
	if h.CompactRevision < want.Compact {
		done, err := kv.Compact(traceutil.TODO(), want.Compact)
		if err != nil {
			t.Fatal(err)
		}
		<-done
		if h, _, err = kv.HashStorage().HashByRev(rev); err != nil {
			t.Fatal(err)
		}
	}
	if h.CompactRevision != want.Compact || h.Hash != want.Hash {
		t.Errorf("revision %d: HashKV %08x (compact %d), the source's %08x (compact %d)", rev, h.Hash, h.CompactRevision, want.Hash, want.Compact)
	}
}

// checkBooted restores the replayed file at path with etcdutl, boots a
// member on it and compares it with the source at rev: its revision,
// every key, HashKV over the same compaction, and every lease a key holds.
func checkBooted(t testing.TB, s *restoretest.PITRSource, path string, r int64) {
	t.Helper()
	ctx := t.Context()
	peer, err := child.FreeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "member")
	if _, err := restore.Restore(ctx, restore.RestoreOptions{
		SnapshotPath: path, DataDir: dataDir, Name: "restored", InitialCluster: "restored=" + peer, SkipHashCheck: true,
	}); err != nil {
		t.Fatalf("restore the replayed file: %v", err)
	}
	srv, err := child.StartEtcd(ctx, child.EtcdOptions{DataDir: dataDir, Name: "restored", PeerURL: peer, SocketDir: filepath.Join(t.TempDir(), "s")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rc, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want := s.Live(t, r)
	g, err := rc.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if g.Header.Revision != r {
		t.Errorf("restored member at revision %d, want %d", g.Header.Revision, r)
	}
	compareKVs(t, r, g.Kvs, want.KVs)
	if _, err := rc.Compact(ctx, want.Compact); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("compact the restored member to %d: %v", want.Compact, err)
	}
	h, err := rc.HashKV(ctx, srv.ClientURL, r)
	if err != nil {
		t.Fatal(err)
	}
	if h.Hash != want.Hash || h.CompactRevision != want.Compact {
		t.Errorf("HashKV at %d: restored %08x (compact %d), source %08x (compact %d)", r, h.Hash, h.CompactRevision, want.Hash, want.Compact)
	}
	// Every lease a key holds exists on the restored member.
	for _, kv := range g.Kvs {
		if kv.Lease == 0 {
			continue
		}
		ttl, err := rc.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			t.Errorf("lease %x of %s on the restored member: %v", kv.Lease, kv.Key, err)
		} else if ttl.TTL < 0 {
			t.Errorf("lease %x of %s is not on the restored member", kv.Lease, kv.Key)
		}
	}
}

func TestPointInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	s := restoretest.StartPITRSource(t, 240, nil)
	if s.Later == nil || s.Later.Revision <= s.Anchor.Revision {
		t.Fatalf("no scheduled snapshot during the generation")
	}
	ctx := t.Context()

	t.Run("random revisions", func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(5, 9))
		var targets []int64
		for r := range s.Recorded {
			targets = append(targets, r)
		}
		sort.Slice(targets, func(i, j int) bool { return targets[i] < targets[j] })
		if len(targets) > 8 {
			rnd.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
			targets = targets[:8]
		}
		for range 8 {
			targets = append(targets, s.Compact+rnd.Int64N(s.Through-s.Compact+1))
		}
		for _, r := range []int64{s.Anchor.Revision, s.Anchor.Revision + 1, s.Later.Revision, s.Later.Revision + 1, s.Compact, s.Through} {
			if _, ok := s.Recorded[r]; ok || r >= s.Compact {
				targets = append(targets, r)
			}
		}
		fromLater := 0
		for _, r := range targets {
			p, path := replayTo(t, s, restore.Target{Revision: r})
			if p.Revision != r || p.Window.Generation != s.Anchor.ID {
				t.Fatalf("plan to %d: revision %d in generation %s", r, p.Revision, p.Window.Generation)
			}
			wantSnap := s.Anchor.ID
			if r >= s.Later.Revision {
				wantSnap = s.Later.ID
				fromLater++
			}
			if p.Snapshot.ID != wantSnap {
				t.Errorf("plan to %d starts from %s, want %s", r, p.Snapshot.ID, wantSnap)
			}
			if p.Revisions != r-p.Snapshot.Revision {
				t.Errorf("plan to %d: %d revisions from %d", r, p.Revisions, p.Snapshot.Revision)
			}
			checkOffline(t, s, path, r)
		}
		if fromLater == 0 {
			t.Error("no target started from the later snapshot")
		}
	})

	t.Run("boot the restored member", func(t *testing.T) {
		r := s.Through
		_, path := replayTo(t, s, restore.Target{Revision: r})
		checkBooted(t, s, path, r)
	})

	t.Run("to time", func(t *testing.T) {
		l, err := s.Repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := s.Repo.Windows(ctx, l)
		if err != nil || len(ws) != 1 {
			t.Fatalf("windows: %v, %d", err, len(ws))
		}
		// The last marker vouches for the captured-through revision until
		// its time, not after.
		vouched := ws[0].ThroughTime
		if _, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Time: vouched.Add(time.Nanosecond)}, s.IDs); !errors.As(err, new(*restore.OutsideWindowsError)) {
			t.Errorf("a time after the last marker: %v, want an OutsideWindowsError", err)
		}
		for _, sp := range []restoretest.SyncPoint{s.Syncs[0], s.Syncs[len(s.Syncs)/2], {At: vouched, Through: s.Through}} {
			p, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Time: sp.At}, s.IDs)
			if err != nil {
				t.Fatal(err)
			}
			if p.Revision != sp.Through {
				t.Errorf("time %s resolves to revision %d, want %d", sp.At.Format(time.RFC3339Nano), p.Revision, sp.Through)
			}
		}
		// Between the snapshot and the first received revision: the
		// snapshot's state.
		p, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Time: s.Anchor.RevisionTime()}, s.IDs)
		if err != nil {
			t.Fatal(err)
		}
		if p.Revision != s.Anchor.Revision || p.Revisions != 0 || len(p.Segments) != 0 {
			t.Errorf("time of the snapshot: revision %d, %d revisions, %d segments", p.Revision, p.Revisions, len(p.Segments))
		}
	})

	t.Run("refused", func(t *testing.T) {
		// Later generations: the first sealed, writes it never saw (a
		// gap), a second from a fresh snapshot, writes after it not
		// captured yet, and a third whose snapshot was never committed.
		s.Capture.Seal(t, "compacted")
		sealedAt := time.Now()
		for i := range 5 {
			if _, err := s.Cli.Put(ctx, fmt.Sprintf("/gap/%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		enc := restoretest.AgeEncoding(s.IDs[0].(*age.X25519Identity))
		gen2 := (&restoretest.Source{C: s.C}).Backup(t, s.Repo, enc)
		c2 := changetest.Start(t, changetest.Options{Client: s.Cli, Repo: s.Repo, Anchor: gen2, Encoding: enc})
		for i := range 5 {
			if _, err := s.Cli.Put(ctx, fmt.Sprintf("/gen2/%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		through2 := c2.Sync(t)
		c2.Seal(t, "lock lost")
		// A generation whose snapshot is not committed.
		cur := restoretest.Revision(t, s.Cli)
		ghost := *gen2
		ghost.ID = repository.NewID(time.Now().Add(time.Minute), cur)
		ghost.Revision = cur
		c3 := changetest.Start(t, changetest.Options{Client: s.Cli, Repo: s.Repo, Anchor: &ghost, Encoding: enc})
		for i := range 3 {
			if _, err := s.Cli.Put(ctx, fmt.Sprintf("/ghost/%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		c3.Sync(t)
		if _, err := s.Cli.Put(ctx, "/late", "v"); err != nil {
			t.Fatal(err)
		}
		late := restoretest.Revision(t, s.Cli)

		gapAt := sealedAt.Add(gen2.CreatedAt.Sub(sealedAt) / 2)
		for _, tc := range []struct {
			name   string
			target restore.Target
			why    string
		}{
			{"before the first snapshot", restore.Target{Revision: s.Anchor.Revision - 1}, "before the first snapshot"},
			{"time before the first snapshot", restore.Target{Time: s.Anchor.CreatedAt.Add(-time.Hour)}, "before the first snapshot"},
			{"in a gap", restore.Target{Revision: s.Through + 2}, "in a gap between generations"},
			{"time in a gap", restore.Target{Time: gapAt}, "in a gap between generations"},
			{"uncommitted anchor", restore.Target{Revision: cur + 1}, "in generation " + ghost.ID + ", which is not recoverable"},
			{"after captured-through", restore.Target{Revision: late}, "after the captured-through point"},
			{"time after captured-through", restore.Target{Time: time.Now().Add(time.Hour)}, "after the captured-through point"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l, err := s.Repo.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				p, err := restore.PlanPointInTime(ctx, s.Repo, l, tc.target, s.IDs)
				var oe *restore.OutsideWindowsError
				if !errors.As(err, &oe) {
					t.Fatalf("plan %s: %v (plan %+v), want an OutsideWindowsError", tc.target, err, p)
				}
				msg := err.Error()
				for _, want := range []string{tc.why, fmt.Sprintf("revisions %d-%d", s.Anchor.Revision, s.Through), "generation " + s.Anchor.ID,
					fmt.Sprintf("revisions %d-%d", gen2.Revision, through2), "generation " + gen2.ID, ghost.ID} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not say %q", msg, want)
					}
				}
			})
		}
		for _, tc := range []restore.Target{{}, {Revision: 5, Time: time.Now()}, {Revision: -1}} {
			l, _ := s.Repo.List(ctx)
			if _, err := restore.PlanPointInTime(ctx, s.Repo, l, tc, s.IDs); !errors.Is(err, restore.ErrTarget) {
				t.Errorf("target %+v: %v, want ErrTarget", tc, err)
			}
		}
		// The newest generation restores too.
		_, path := replayTo(t, s, restore.Target{Revision: through2})
		kv, done := offline(t, path)
		g, err := kv.Range(ctx, []byte("/gen2/"), []byte("/gen20"), mvcc.RangeOptions{})
		done()
		if err != nil || len(g.KVs) != 5 {
			t.Errorf("generation 2 at %d: %v, %d keys under /gen2/", through2, err, len(g.KVs))
		}
	})
	t.Run("segment reads", func(t *testing.T) {
		// A revision target after the later snapshot reads only the
		// segments it applies, each once: planning reads none, the
		// replay checks their chain as it reads them. (Before, planning
		// read every segment from the generation's first one and the
		// replay read the applied ones again.)
		cs := &countingStore{Store: s.Repo.Store, gets: map[string]int{}}
		repo := &repository.Repo{Store: cs, Cluster: s.Repo.Cluster}
		l, err := repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, err := restore.PlanPointInTime(ctx, repo, l, restore.Target{Revision: s.Through}, s.IDs)
		if err != nil {
			t.Fatal(err)
		}
		if p.Snapshot.ID != s.Later.ID {
			t.Fatalf("plan to %d starts from %s, want the later snapshot %s", s.Through, p.Snapshot.ID, s.Later.ID)
		}
		if n := cs.segmentGets(); n != 0 || p.Checked != 0 {
			t.Errorf("planning a revision target read %d segments (Checked %d), want 0", n, p.Checked)
		}
		path := filepath.Join(t.TempDir(), "snap.db")
		if _, err := repository.Fetch(ctx, repo, p.Snapshot, path, repository.FetchOptions{Identities: s.IDs}); err != nil {
			t.Fatal(err)
		}
		if _, err := restore.Replay(ctx, path, p, repo, s.IDs, nil); err != nil {
			t.Fatal(err)
		}
		checkOffline(t, s, path, s.Through)
		got := cs.segmentGets()
		if got != len(p.Segments) || len(p.Segments) >= len(p.Window.Segments) {
			t.Errorf("plan and replay read %d segments; the plan applies %d of the generation's %d: want each applied one read once", got, len(p.Segments), len(p.Window.Segments))
		}
		for k, n := range cs.gets {
			if n > 1 {
				t.Errorf("%s read %d times", k, n)
			}
		}

		// A time target reads only the segments between the two progress
		// markers around it, not the chain from the generation's start
		// (before: every segment up to the one resolving the time).
		sp := s.Syncs[len(s.Syncs)/2]
		before := 0
		for _, si := range p.Window.Segments {
			if si.First <= sp.Through {
				before++
			}
		}
		if before <= 2 {
			t.Fatalf("the fixture has %d segments before revision %d: too few to tell", before, sp.Through)
		}
		cs.gets = map[string]int{}
		pt, err := restore.PlanPointInTime(ctx, repo, l, restore.Target{Time: sp.At}, s.IDs)
		if err != nil {
			t.Fatal(err)
		}
		if pt.Revision != sp.Through {
			t.Errorf("time %s resolves to revision %d, want %d", sp.At.Format(time.RFC3339Nano), pt.Revision, sp.Through)
		}
		if n := cs.segmentGets(); n > 2 || n != pt.Checked {
			t.Errorf("planning a time target read %d segments (Checked %d) of the %d before it, want at most 2", n, pt.Checked, before)
		}
	})

	t.Run("tampered", func(t *testing.T) {
		// Runs last: it changes the store.
		l, err := s.Repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := s.Repo.Windows(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		w := ws[0]
		if w.Generation != s.Anchor.ID || len(w.Segments) < 4 {
			t.Fatalf("first window %s with %d segments", w.Generation, len(w.Segments))
		}
		si := w.Segments[len(w.Segments)/2]
		p, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Revision: w.Through}, s.IDs)
		if err != nil {
			t.Fatal(err)
		}
		// The segment is replaced by a valid one that names another
		// predecessor (a writer that forked the chain, or tampering).
		seg, _, err := s.Repo.ReadSegment(ctx, si, s.IDs)
		if err != nil {
			t.Fatal(err)
		}
		seg.PrevHash = strings.Repeat("0", 64)
		data, err := repository.EncodeStoredSegment(seg, restoretest.AgeEncoding(s.IDs[0].(*age.X25519Identity)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.StoreDir, filepath.FromSlash(si.Object.Key)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		// A replay planned before refuses the changed segment: the
		// replay checks the chain of what it applies as it reads it.
		fetch := func(p *restore.PointInTimePlan) string {
			path := filepath.Join(t.TempDir(), "snap.db")
			if _, err := repository.Fetch(ctx, s.Repo, p.Snapshot, path, repository.FetchOptions{Identities: s.IDs}); err != nil {
				t.Fatal(err)
			}
			return path
		}
		_, err = restore.Replay(ctx, fetch(p), p, s.Repo, s.IDs, nil)
		var ce *repository.ChainError
		if !errors.As(err, &ce) || ce.Problem != repository.ChainBadHash || ce.Key != si.Object.Key {
			t.Errorf("replay over a changed segment: %v, want a ChainError (bad hash) at %s", err, si.Object.Key)
		}
		// So does a drill's, which checks the chain in this process and
		// applies the changes in a child.
		_, childErr := restore.ReplayInChild(ctx, fetch(p), p, s.Repo, s.IDs, nil)
		if !errors.As(childErr, &ce) || childErr.Error() != err.Error() {
			t.Errorf("replay in a child over a changed segment: %v, want %v", childErr, err)
		}
		// A new plan past it replays to the break and stops there; one
		// before it still works.
		p2, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Revision: si.Last}, s.IDs)
		if err != nil {
			t.Fatal(err)
		}
		if p2.Snapshot.Revision < si.First {
			_, err = restore.Replay(ctx, fetch(p2), p2, s.Repo, s.IDs, nil)
			if !errors.As(err, &ce) || ce.Problem != repository.ChainBadHash {
				t.Errorf("replay across a bad hash: %v, want a ChainError (bad hash)", err)
			}
		}
		if _, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Revision: si.First - 1}, s.IDs); err != nil {
			t.Errorf("plan before the bad segment: %v", err)
		}
		// A time target reads only the segments between two markers to
		// resolve the time; the replay checks the chain of what it
		// applies, as for a revision target: the break is found there.
		pt, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Time: w.ThroughTime}, s.IDs)
		if err != nil {
			t.Fatal(err)
		}
		if pt.Snapshot.Revision < si.First {
			_, err = restore.Replay(ctx, fetch(pt), pt, s.Repo, s.IDs, nil)
			if !errors.As(err, &ce) || ce.Problem != repository.ChainBadHash {
				t.Errorf("replay to a time across a bad hash: %v, want a ChainError (bad hash)", err)
			}
		}
	})
}

// TestPointInTimeS3 restores points in time from segments and snapshots in
// a real S3 (versitygw), encrypted.
func TestPointInTimeS3(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd and versitygw")
	}
	srv := s3test.Start(t)
	s := restoretest.StartPITRSource(t, 60, restoretest.S3Repo(t, srv))
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, r := range []int64{s.Compact + rnd.Int64N(s.Through-s.Compact+1), s.Through} {
		p, path := replayTo(t, s, restore.Target{Revision: r})
		if len(p.Segments) == 0 && p.Revisions > 0 {
			t.Fatalf("plan to %d: no segments", r)
		}
		checkOffline(t, s, path, r)
	}
}

// countingStore counts the Gets of each key.
type countingStore struct {
	uploader.Store
	mu   sync.Mutex
	gets map[string]int
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.mu.Lock()
	c.gets[key]++
	c.mu.Unlock()
	return c.Store.Get(ctx, key)
}

// segmentGets is how many Gets read change segments.
func (c *countingStore) segmentGets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.gets {
		if strings.Contains(k, "/changes/") {
			n += v
		}
	}
	return n
}
