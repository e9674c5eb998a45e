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
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// liveState is the source at one revision: what a Get at it returns and
// its HashKV (with the compact revision it was computed over).
type liveState struct {
	kvs     []*mvccpb.KeyValue
	hash    uint32
	compact int64
}

// pitrSource is a real etcd with a captured generation.
type pitrSource struct {
	c        *etcdtest.Cluster
	cli      *clientv3.Client
	storeDir string
	repo     *repository.Repo
	ids      []age.Identity
	anchor   *repository.Manifest
	later    *repository.Manifest // a scheduled snapshot taken during the generation
	capture  *changetest.Capture
	recorded map[int64]liveState // states before the compaction (no longer readable live)
	compact  int64               // the compaction during the generation
	through  int64
	syncs    []syncPoint
}

type syncPoint struct {
	at      time.Time // after the Sync returned
	through int64
}

// workload drives random Kubernetes-like changes: puts, deletes, multi-op
// transactions, delete-range, leases granted, attached, moved, revoked and
// expired.
type workload struct {
	t      testing.TB
	cli    *clientv3.Client
	rnd    *rand.Rand
	keys   map[string]bool
	leases []clientv3.LeaseID
	// valueMin and valueMax bound a value's size (0: 16 to 415 bytes).
	valueMin, valueMax int
	// expiring: some steps grant a lease of etcd's minimum TTL with keys
	// on it, never renewed: etcd revokes it (its keys deleted) on its
	// own a few seconds later.
	expiring bool
}

func (w *workload) key() string {
	return fmt.Sprintf("/registry/%s/ns%d/obj%02d", []string{"pods", "configmaps", "leases"}[w.rnd.IntN(3)], w.rnd.IntN(3), w.rnd.IntN(20))
}

func (w *workload) value() string {
	lo, hi := 16, 416
	if w.valueMax > 0 {
		lo, hi = w.valueMin, w.valueMax+1
	}
	b := make([]byte, lo+w.rnd.IntN(hi-lo))
	for i := range b {
		b[i] = byte('a' + w.rnd.IntN(26))
	}
	return string(b)
}

func (w *workload) existing() (string, bool) {
	var ks []string
	for k := range w.keys {
		ks = append(ks, k)
	}
	if len(ks) == 0 {
		return "", false
	}
	sort.Strings(ks)
	return ks[w.rnd.IntN(len(ks))], true
}

func (w *workload) step(ctx context.Context) {
	t := w.t
	switch n := w.rnd.IntN(10); {
	case n < 3:
		k := w.key()
		if _, err := w.cli.Put(ctx, k, w.value()); err != nil {
			t.Fatal(err)
		}
		w.keys[k] = true
	case n < 4:
		if k, ok := w.existing(); ok {
			if _, err := w.cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			delete(w.keys, k)
		}
	case n < 6:
		var ops []clientv3.Op
		used := map[string]bool{}
		for range 2 + w.rnd.IntN(3) {
			k := w.key()
			if used[k] {
				continue
			}
			used[k] = true
			if w.keys[k] && w.rnd.IntN(3) == 0 {
				ops = append(ops, clientv3.OpDelete(k))
				delete(w.keys, k)
			} else {
				ops = append(ops, clientv3.OpPut(k, w.value()))
				w.keys[k] = true
			}
		}
		if _, err := w.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	case n < 7:
		if k, ok := w.existing(); ok {
			prefix := k[:strings.LastIndex(k, "/")+1]
			if _, err := w.cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			for o := range w.keys {
				if strings.HasPrefix(o, prefix) {
					delete(w.keys, o)
				}
			}
		}
	case n < 9 && w.expiring && w.rnd.IntN(4) == 0:
		// A lease left to expire, with one or two keys on it.
		l, err := w.cli.Grant(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		for range 1 + w.rnd.IntN(2) {
			k := fmt.Sprintf("/registry/events/ns%d/expiring%02d", w.rnd.IntN(3), w.rnd.IntN(20))
			if _, err := w.cli.Put(ctx, k, w.value(), clientv3.WithLease(l.ID)); err != nil {
				t.Fatal(err)
			}
		}
	case n < 9:
		// A lease granted now or an earlier one; a key attached to it (a
		// new key, or an existing key moved to it).
		if len(w.leases) == 0 || w.rnd.IntN(3) == 0 {
			l, err := w.cli.Grant(ctx, int64(30+w.rnd.IntN(300)))
			if err != nil {
				t.Fatal(err)
			}
			w.leases = append(w.leases, l.ID)
		}
		k := w.key()
		if _, err := w.cli.Put(ctx, k, w.value(), clientv3.WithLease(w.leases[w.rnd.IntN(len(w.leases))])); err != nil {
			t.Fatal(err)
		}
		w.keys[k] = true
	default:
		if len(w.leases) > 1 {
			i := w.rnd.IntN(len(w.leases))
			id := w.leases[i]
			w.leases = append(w.leases[:i], w.leases[i+1:]...)
			if _, err := w.cli.Revoke(ctx, id); err != nil {
				t.Fatal(err)
			}
			w.forget(ctx)
		}
	}
}

// forget drops keys the cluster no longer has (revoked or expired leases).
func (w *workload) forget(ctx context.Context) {
	for k := range w.keys {
		r, err := w.cli.Get(ctx, k)
		if err != nil {
			w.t.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			delete(w.keys, k)
		}
	}
}

func (s *pitrSource) record(t testing.TB, rev int64) {
	t.Helper()
	ctx := t.Context()
	g, err := s.cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.cli.HashKV(ctx, s.c.Endpoints()[0], rev)
	if err != nil {
		t.Fatal(err)
	}
	s.recorded[rev] = liveState{kvs: g.Kvs, hash: h.Hash, compact: h.CompactRevision}
}

func (s *pitrSource) live(t testing.TB, rev int64) liveState {
	t.Helper()
	if st, ok := s.recorded[rev]; ok && rev < s.compact {
		return st
	}
	if rev < s.compact {
		t.Fatalf("revision %d was compacted and not recorded", rev)
	}
	ctx := t.Context()
	g, err := s.cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.cli.HashKV(ctx, s.c.Endpoints()[0], rev)
	if err != nil {
		t.Fatal(err)
	}
	return liveState{kvs: g.Kvs, hash: h.Hash, compact: h.CompactRevision}
}

// startPITRSource starts etcd, takes the anchor, captures a random
// workload with a compaction and a scheduled snapshot in the middle.
// repo nil is a directory store (storeDir).
func startPITRSource(t *testing.T, steps int, repo *repository.Repo) *pitrSource {
	t.Helper()
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	id := newIdentity(t)
	var storeDir string
	if repo == nil {
		storeDir = t.TempDir()
		repo = dirBackups(t, storeDir)
	}
	s := &pitrSource{c: c, cli: cli, storeDir: storeDir, repo: repo, ids: []age.Identity{id}, recorded: map[int64]liveState{}}
	enc := ageEncoding(id)
	w := &workload{t: t, cli: cli, rnd: rand.New(rand.NewPCG(13, 7)), keys: map[string]bool{}}
	// Before the snapshot: keys, a lease with a key on it, a compaction.
	for range 30 {
		w.step(ctx)
	}
	r, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, r.Header.Revision-5); err != nil {
		t.Fatal(err)
	}
	s.anchor = (&source{c: c}).backup(t, s.repo, enc)
	s.capture = changetest.Start(t, changetest.Options{Client: cli, Repo: s.repo, Anchor: s.anchor, Encoding: enc, SegmentRevisions: 7})
	s.record(t, s.anchor.Revision)

	rec := func() {
		s.record(t, g0(t, cli))
	}
	// A lease that expires with keys on it: etcd revokes it, the keys go.
	short, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/events/short%d", i), "e", clientv3.WithLease(short.ID)); err != nil {
			t.Fatal(err)
		}
		rec()
	}
	for i := range steps {
		w.step(ctx)
		if i < steps/2 {
			rec()
		}
		if w.rnd.IntN(10) == 0 {
			s.through = s.capture.Sync(t)
			s.syncs = append(s.syncs, syncPoint{at: time.Now(), through: s.through})
		}
		if i == steps/3 {
			s.later = (&source{c: c}).backup(t, s.repo, enc)
			s.record(t, s.later.Revision)
		}
		if i == steps/2 {
			// The short lease has expired by now, or does so soon: wait
			// until etcd revoked it (its keys deleted).
			deadline := time.Now().Add(20 * time.Second)
			for {
				g, err := cli.Get(ctx, "/registry/events/short", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					t.Fatal(err)
				}
				if g.Count == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the 1s lease did not expire in 20s")
				}
				time.Sleep(50 * time.Millisecond) // polling etcd's lessor against a deadline
			}
			rec()
			s.compact = g0(t, cli)
			if _, err := cli.Compact(ctx, s.compact); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.through = s.capture.Sync(t)
	s.syncs = append(s.syncs, syncPoint{at: time.Now(), through: s.through})
	return s
}

// g0 is the cluster's current revision.
func g0(t testing.TB, cli *clientv3.Client) int64 {
	r, err := cli.Get(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// replayTo plans and replays a restore to target into a file.
func (s *pitrSource) replayTo(t testing.TB, target restore.Target) (*restore.PointInTimePlan, string) {
	t.Helper()
	ctx := t.Context()
	l, err := s.repo.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := restore.PlanPointInTime(ctx, s.repo, l, target, s.ids)
	if err != nil {
		t.Fatalf("plan %s: %v", target, err)
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	if _, err := repository.Fetch(ctx, s.repo, p.Snapshot, path, repository.FetchOptions{Identities: s.ids}); err != nil {
		t.Fatal(err)
	}
	if _, err := repository.CheckFile(ctx, path, p.Snapshot); err != nil {
		t.Fatal(err)
	}
	st, err := restore.Replay(ctx, path, p, s.repo, s.ids, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("replay to %s: %v", target, err)
	}
	keys := p.Keys(s.repo)
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
func (s *pitrSource) checkOffline(t testing.TB, path string, rev int64) {
	t.Helper()
	want := s.live(t, rev)
	kv, done := offline(t, path)
	defer done()
	if got := kv.Rev(); got != rev {
		t.Fatalf("replayed store at revision %d, want %d", got, rev)
	}
	res, err := kv.Range(t.Context(), []byte{0}, []byte{}, mvcc.RangeOptions{Rev: rev})
	if err != nil {
		t.Fatal(err)
	}
	compareKVs(t, rev, res.KVs, want.kvs)
	h, _, err := kv.HashStorage().HashByRev(rev)
	if err != nil {
		t.Fatal(err)
	}
	if h.CompactRevision > want.compact && h.CompactRevision == rev {
		// The replay started from a snapshot taken right at a
		// compaction: etcd answers HashKV at a compaction's revision
		// with the hash it stored when compacting, over the history
		// since the compaction before, which the snapshot no longer
		// holds. The keys above are compared; the hash cannot be.
		t.Logf("revision %d: HashKV not comparable: the source's is over compact %d, the snapshot's compact is %d", rev, want.compact, h.CompactRevision)
		return
	}
	if h.CompactRevision < want.compact {
		done, err := kv.Compact(traceutil.TODO(), want.compact)
		if err != nil {
			t.Fatal(err)
		}
		<-done
		if h, _, err = kv.HashStorage().HashByRev(rev); err != nil {
			t.Fatal(err)
		}
	}
	if h.CompactRevision != want.compact || h.Hash != want.hash {
		t.Errorf("revision %d: HashKV %08x (compact %d), the source's %08x (compact %d)", rev, h.Hash, h.CompactRevision, want.hash, want.compact)
	}
}

// checkBooted restores the replayed file at path with etcdutl, boots a
// member on it and compares it with the source at rev: its revision,
// every key, HashKV over the same compaction, and every lease a key holds.
func (s *pitrSource) checkBooted(t testing.TB, path string, r int64) {
	t.Helper()
	ctx := t.Context()
	peer, err := restore.FreeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "member")
	if _, err := restore.Restore(ctx, restore.RestoreOptions{
		SnapshotPath: path, DataDir: dataDir, Name: "restored", InitialCluster: "restored=" + peer, SkipHashCheck: true,
	}); err != nil {
		t.Fatalf("restore the replayed file: %v", err)
	}
	srv, err := restore.StartEtcd(ctx, restore.EtcdOptions{DataDir: dataDir, Name: "restored", PeerURL: peer, SocketDir: filepath.Join(t.TempDir(), "s")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rc, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want := s.live(t, r)
	g, err := rc.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if g.Header.Revision != r {
		t.Errorf("restored member at revision %d, want %d", g.Header.Revision, r)
	}
	compareKVs(t, r, g.Kvs, want.kvs)
	if _, err := rc.Compact(ctx, want.compact); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("compact the restored member to %d: %v", want.compact, err)
	}
	h, err := rc.HashKV(ctx, srv.ClientURL, r)
	if err != nil {
		t.Fatal(err)
	}
	if h.Hash != want.hash || h.CompactRevision != want.compact {
		t.Errorf("HashKV at %d: restored %08x (compact %d), source %08x (compact %d)", r, h.Hash, h.CompactRevision, want.hash, want.compact)
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
	s := startPITRSource(t, 240, nil)
	if s.later == nil || s.later.Revision <= s.anchor.Revision {
		t.Fatalf("no scheduled snapshot during the generation")
	}
	ctx := t.Context()

	t.Run("random revisions", func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(5, 9))
		var targets []int64
		for r := range s.recorded {
			targets = append(targets, r)
		}
		sort.Slice(targets, func(i, j int) bool { return targets[i] < targets[j] })
		if len(targets) > 8 {
			rnd.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
			targets = targets[:8]
		}
		for range 8 {
			targets = append(targets, s.compact+rnd.Int64N(s.through-s.compact+1))
		}
		for _, r := range []int64{s.anchor.Revision, s.anchor.Revision + 1, s.later.Revision, s.later.Revision + 1, s.compact, s.through} {
			if _, ok := s.recorded[r]; ok || r >= s.compact {
				targets = append(targets, r)
			}
		}
		fromLater := 0
		for _, r := range targets {
			p, path := s.replayTo(t, restore.Target{Revision: r})
			if p.Revision != r || p.Window.Generation != s.anchor.ID {
				t.Fatalf("plan to %d: revision %d in generation %s", r, p.Revision, p.Window.Generation)
			}
			wantSnap := s.anchor.ID
			if r >= s.later.Revision {
				wantSnap = s.later.ID
				fromLater++
			}
			if p.Snapshot.ID != wantSnap {
				t.Errorf("plan to %d starts from %s, want %s", r, p.Snapshot.ID, wantSnap)
			}
			if p.Revisions != r-p.Snapshot.Revision {
				t.Errorf("plan to %d: %d revisions from %d", r, p.Revisions, p.Snapshot.Revision)
			}
			s.checkOffline(t, path, r)
		}
		if fromLater == 0 {
			t.Error("no target started from the later snapshot")
		}
	})

	t.Run("boot the restored member", func(t *testing.T) {
		r := s.through
		_, path := s.replayTo(t, restore.Target{Revision: r})
		s.checkBooted(t, path, r)
	})

	t.Run("to time", func(t *testing.T) {
		l, err := s.repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := s.repo.Windows(ctx, l)
		if err != nil || len(ws) != 1 {
			t.Fatalf("windows: %v, %d", err, len(ws))
		}
		// The last marker vouches for the captured-through revision until
		// its time, not after.
		vouched := ws[0].ThroughTime
		if _, err := restore.PlanPointInTime(ctx, s.repo, l, restore.Target{Time: vouched.Add(time.Nanosecond)}, s.ids); !errors.As(err, new(*restore.OutsideWindowsError)) {
			t.Errorf("a time after the last marker: %v, want an OutsideWindowsError", err)
		}
		for _, sp := range []syncPoint{s.syncs[0], s.syncs[len(s.syncs)/2], {at: vouched, through: s.through}} {
			p, err := restore.PlanPointInTime(ctx, s.repo, l, restore.Target{Time: sp.at}, s.ids)
			if err != nil {
				t.Fatal(err)
			}
			if p.Revision != sp.through {
				t.Errorf("time %s resolves to revision %d, want %d", sp.at.Format(time.RFC3339Nano), p.Revision, sp.through)
			}
		}
		// Between the snapshot and the first received revision: the
		// snapshot's state.
		p, err := restore.PlanPointInTime(ctx, s.repo, l, restore.Target{Time: s.anchor.RevisionTime()}, s.ids)
		if err != nil {
			t.Fatal(err)
		}
		if p.Revision != s.anchor.Revision || p.Revisions != 0 || len(p.Segments) != 0 {
			t.Errorf("time of the snapshot: revision %d, %d revisions, %d segments", p.Revision, p.Revisions, len(p.Segments))
		}
	})

	t.Run("refused", func(t *testing.T) {
		// Later generations: the first sealed, writes it never saw (a
		// gap), a second from a fresh snapshot, writes after it not
		// captured yet, and a third whose snapshot was never committed.
		s.capture.Seal(t, "compacted")
		sealedAt := time.Now()
		for i := range 5 {
			if _, err := s.cli.Put(ctx, fmt.Sprintf("/gap/%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		enc := ageEncoding(s.ids[0].(*age.X25519Identity))
		gen2 := (&source{c: s.c}).backup(t, s.repo, enc)
		c2 := changetest.Start(t, changetest.Options{Client: s.cli, Repo: s.repo, Anchor: gen2, Encoding: enc})
		for i := range 5 {
			if _, err := s.cli.Put(ctx, fmt.Sprintf("/gen2/%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		through2 := c2.Sync(t)
		c2.Seal(t, "lock lost")
		// A generation whose snapshot is not committed.
		cur := g0(t, s.cli)
		ghost := *gen2
		ghost.ID = repository.NewID(time.Now().Add(time.Minute), cur)
		ghost.Revision = cur
		c3 := changetest.Start(t, changetest.Options{Client: s.cli, Repo: s.repo, Anchor: &ghost, Encoding: enc})
		for i := range 3 {
			if _, err := s.cli.Put(ctx, fmt.Sprintf("/ghost/%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		c3.Sync(t)
		if _, err := s.cli.Put(ctx, "/late", "v"); err != nil {
			t.Fatal(err)
		}
		late := g0(t, s.cli)

		gapAt := sealedAt.Add(gen2.CreatedAt.Sub(sealedAt) / 2)
		for _, tc := range []struct {
			name   string
			target restore.Target
			why    string
		}{
			{"before the first snapshot", restore.Target{Revision: s.anchor.Revision - 1}, "before the first snapshot"},
			{"time before the first snapshot", restore.Target{Time: s.anchor.CreatedAt.Add(-time.Hour)}, "before the first snapshot"},
			{"in a gap", restore.Target{Revision: s.through + 2}, "in a gap between generations"},
			{"time in a gap", restore.Target{Time: gapAt}, "in a gap between generations"},
			{"uncommitted anchor", restore.Target{Revision: cur + 1}, "in generation " + ghost.ID + ", which is not recoverable"},
			{"after captured-through", restore.Target{Revision: late}, "after the captured-through point"},
			{"time after captured-through", restore.Target{Time: time.Now().Add(time.Hour)}, "after the captured-through point"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l, err := s.repo.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				p, err := restore.PlanPointInTime(ctx, s.repo, l, tc.target, s.ids)
				var oe *restore.OutsideWindowsError
				if !errors.As(err, &oe) {
					t.Fatalf("plan %s: %v (plan %+v), want an OutsideWindowsError", tc.target, err, p)
				}
				msg := err.Error()
				for _, want := range []string{tc.why, fmt.Sprintf("revisions %d-%d", s.anchor.Revision, s.through), "generation " + s.anchor.ID,
					fmt.Sprintf("revisions %d-%d", gen2.Revision, through2), "generation " + gen2.ID, ghost.ID} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not say %q", msg, want)
					}
				}
			})
		}
		for _, tc := range []restore.Target{{}, {Revision: 5, Time: time.Now()}, {Revision: -1}} {
			l, _ := s.repo.List(ctx)
			if _, err := restore.PlanPointInTime(ctx, s.repo, l, tc, s.ids); !errors.Is(err, restore.ErrTarget) {
				t.Errorf("target %+v: %v, want ErrTarget", tc, err)
			}
		}
		// The newest generation restores too.
		_, path := s.replayTo(t, restore.Target{Revision: through2})
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
		cs := &countingStore{Store: s.repo.Store, gets: map[string]int{}}
		repo := &repository.Repo{Store: cs, Cluster: s.repo.Cluster}
		l, err := repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, err := restore.PlanPointInTime(ctx, repo, l, restore.Target{Revision: s.through}, s.ids)
		if err != nil {
			t.Fatal(err)
		}
		if p.Snapshot.ID != s.later.ID {
			t.Fatalf("plan to %d starts from %s, want the later snapshot %s", s.through, p.Snapshot.ID, s.later.ID)
		}
		if n := cs.segmentGets(); n != 0 || p.Checked != 0 {
			t.Errorf("planning a revision target read %d segments (Checked %d), want 0", n, p.Checked)
		}
		path := filepath.Join(t.TempDir(), "snap.db")
		if _, err := repository.Fetch(ctx, repo, p.Snapshot, path, repository.FetchOptions{Identities: s.ids}); err != nil {
			t.Fatal(err)
		}
		if _, err := restore.Replay(ctx, path, p, repo, s.ids, nil); err != nil {
			t.Fatal(err)
		}
		s.checkOffline(t, path, s.through)
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
		sp := s.syncs[len(s.syncs)/2]
		before := 0
		for _, si := range p.Window.Segments {
			if si.First <= sp.through {
				before++
			}
		}
		if before <= 2 {
			t.Fatalf("the fixture has %d segments before revision %d: too few to tell", before, sp.through)
		}
		cs.gets = map[string]int{}
		pt, err := restore.PlanPointInTime(ctx, repo, l, restore.Target{Time: sp.at}, s.ids)
		if err != nil {
			t.Fatal(err)
		}
		if pt.Revision != sp.through {
			t.Errorf("time %s resolves to revision %d, want %d", sp.at.Format(time.RFC3339Nano), pt.Revision, sp.through)
		}
		if n := cs.segmentGets(); n > 2 || n != pt.Checked {
			t.Errorf("planning a time target read %d segments (Checked %d) of the %d before it, want at most 2", n, pt.Checked, before)
		}
	})

	t.Run("tampered", func(t *testing.T) {
		// Runs last: it changes the store.
		l, err := s.repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := s.repo.Windows(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		w := ws[0]
		if w.Generation != s.anchor.ID || len(w.Segments) < 4 {
			t.Fatalf("first window %s with %d segments", w.Generation, len(w.Segments))
		}
		si := w.Segments[len(w.Segments)/2]
		p, err := restore.PlanPointInTime(ctx, s.repo, l, restore.Target{Revision: w.Through}, s.ids)
		if err != nil {
			t.Fatal(err)
		}
		// The segment is replaced by a valid one that names another
		// predecessor (a writer that forked the chain, or tampering).
		seg, _, err := s.repo.ReadSegment(ctx, si, s.ids)
		if err != nil {
			t.Fatal(err)
		}
		seg.PrevHash = strings.Repeat("0", 64)
		data, err := repository.EncodeStoredSegment(seg, ageEncoding(s.ids[0].(*age.X25519Identity)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.storeDir, filepath.FromSlash(si.Object.Key)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		// A replay planned before refuses the changed segment: the
		// replay checks the chain of what it applies as it reads it.
		fetch := func(p *restore.PointInTimePlan) string {
			path := filepath.Join(t.TempDir(), "snap.db")
			if _, err := repository.Fetch(ctx, s.repo, p.Snapshot, path, repository.FetchOptions{Identities: s.ids}); err != nil {
				t.Fatal(err)
			}
			return path
		}
		_, err = restore.Replay(ctx, fetch(p), p, s.repo, s.ids, nil)
		var ce *repository.ChainError
		if !errors.As(err, &ce) || ce.Problem != repository.ChainBadHash || ce.Key != si.Object.Key {
			t.Errorf("replay over a changed segment: %v, want a ChainError (bad hash) at %s", err, si.Object.Key)
		}
		// So does a drill's, which checks the chain in this process and
		// applies the changes in a child.
		_, childErr := restore.ReplayInChild(ctx, fetch(p), p, s.repo, s.ids, nil)
		if !errors.As(childErr, &ce) || childErr.Error() != err.Error() {
			t.Errorf("replay in a child over a changed segment: %v, want %v", childErr, err)
		}
		// A new plan past it replays to the break and stops there; one
		// before it still works.
		p2, err := restore.PlanPointInTime(ctx, s.repo, l, restore.Target{Revision: si.Last}, s.ids)
		if err != nil {
			t.Fatal(err)
		}
		if p2.Snapshot.Revision < si.First {
			_, err = restore.Replay(ctx, fetch(p2), p2, s.repo, s.ids, nil)
			if !errors.As(err, &ce) || ce.Problem != repository.ChainBadHash {
				t.Errorf("replay across a bad hash: %v, want a ChainError (bad hash)", err)
			}
		}
		if _, err := restore.PlanPointInTime(ctx, s.repo, l, restore.Target{Revision: si.First - 1}, s.ids); err != nil {
			t.Errorf("plan before the bad segment: %v", err)
		}
		// A time target reads only the segments between two markers to
		// resolve the time; the replay checks the chain of what it
		// applies, as for a revision target: the break is found there.
		pt, err := restore.PlanPointInTime(ctx, s.repo, l, restore.Target{Time: w.ThroughTime}, s.ids)
		if err != nil {
			t.Fatal(err)
		}
		if pt.Snapshot.Revision < si.First {
			_, err = restore.Replay(ctx, fetch(pt), pt, s.repo, s.ids, nil)
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
	s := startPITRSource(t, 60, s3Backups(t, srv))
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, r := range []int64{s.compact + rnd.Int64N(s.through-s.compact+1), s.through} {
		p, path := s.replayTo(t, restore.Target{Revision: r})
		if len(p.Segments) == 0 && p.Revisions > 0 {
			t.Fatalf("plan to %d: no segments", r)
		}
		s.checkOffline(t, path, r)
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
