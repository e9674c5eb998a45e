package restore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// offlinePlan writes a bbolt file at revision 3 (a created at 2, b at 3)
// and one segment of revs after it, and returns the plan replaying it.
func offlinePlan(t *testing.T, revs []repository.Revision, leases []repository.Lease) (*restore.PointInTimePlan, *repository.Repo, string) {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "snap.db")
	be := backend.NewDefaultBackend(zap.NewNop(), db)
	kv := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
	for _, k := range []string{"a", "b"} {
		txn := kv.Write(traceutil.TODO())
		txn.Put([]byte(k), []byte("v"), 0)
		txn.End()
	}
	if kv.Rev() != 3 {
		t.Fatalf("base at %d", kv.Rev())
	}
	kv.Close()
	be.Close()
	repo := restoretest.DirRepo(t, filepath.Join(dir, "store"))
	id := repository.NewID(time.Now(), 3)
	last := revs[len(revs)-1].Revision
	seg := &repository.Segment{SegmentHeader: repository.SegmentHeader{
		Format: repository.SegmentFormat, ClusterID: 1, Generation: id, SnapshotID: id, SnapshotRevision: 3,
		First: 4, Last: last, CapturedThrough: last, CapturedAt: time.Now(), Token: 1,
	}, Revisions: revs, Leases: leases}
	o, hash, err := repo.PutSegment(t.Context(), seg, repository.Encoding{Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	snap := &repository.Manifest{ID: id, Revision: 3}
	segs := []repository.SegmentInfo{{Generation: id, First: 4, Last: last, Compression: "zstd", Encryption: "none", Object: o}}
	return &restore.PointInTimePlan{
		Revision: last, Revisions: last - 3, Snapshot: snap, Segments: segs,
		Window: repository.Window{Generation: id, Anchor: snap, From: 3, Through: last, Segments: segs},
		Links:  []repository.ChainLink{{Key: o.Key, Header: seg.SegmentHeader, Hash: hash}},
	}, repo, db
}

func put(key string, create, version, lease int64) repository.Op {
	return repository.Op{Key: []byte(key), Value: []byte("x"), CreateRevision: create, Version: version, Lease: lease}
}

// manyKeys is n revisions from 4 on, each creating a key of its own, the
// one at index wrong (if any) with a wrong create revision and version.
func manyKeys(n, wrong int) []repository.Revision {
	revs := make([]repository.Revision, n)
	for i := range revs {
		r := int64(4 + i)
		create, version := r, int64(1)
		if i == wrong {
			create, version = r-1, 2 // a history the store does not have
		}
		revs[i] = rev(r, put(fmt.Sprintf("k%05d", i), create, version, 0))
	}
	return revs
}

func rev(r int64, ops ...repository.Op) repository.Revision {
	return repository.Revision{Revision: r, Received: time.Now(), Ops: ops}
}

func TestReplayLeaseTTLUnknown(t *testing.T) {
	// Capture records TTL -1 for a lease gone before it asked: the key
	// keeps its lease ID, the lease gets ExpiredLeaseTTL.
	p, repo, db := offlinePlan(t, []repository.Revision{rev(4, put("c", 4, 1, 0x10), put("a", 2, 2, 0x10))},
		[]repository.Lease{{ID: 0x10, TTL: -1, Revision: 4}})
	st, err := restore.Replay(t.Context(), db, p, repo, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leases != 1 || st.Revisions != 1 || st.Ops != 2 {
		t.Errorf("stats %+v", st)
	}
	be := backend.NewDefaultBackend(zap.NewNop(), db)
	le := lease.NewLessor(zap.NewNop(), be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	kv := mvcc.NewStore(zap.NewNop(), be, le, mvcc.StoreConfig{})
	defer func() { le.Stop(); kv.Close(); be.Close() }()
	res, err := kv.Range(t.Context(), []byte("a"), []byte("d"), mvcc.RangeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range res.KVs {
		if string(k.Key) != "b" && k.Lease != 0x10 {
			t.Errorf("%s: lease %x, want 10", k.Key, k.Lease)
		}
	}
	if l := le.Lookup(0x10); l == nil || l.TTL() != restore.ExpiredLeaseTTL {
		t.Errorf("lease 10: %+v, want TTL %d", l, restore.ExpiredLeaseTTL)
	}
}

// TestReplayRefusesDivergence: changes that do not land as recorded fail
// with ErrReplay, in this process (Replay, as lifeboat restore
// --to-revision replays) and in a drill's replay child process
// (ReplayInChild, this test binary as child.ReplayCommand) alike: the
// child's error comes back with the in-process text and still wraps
// ErrReplay, and consistent changes give the same stats both ways.
func TestReplayRefusesDivergence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		revs   []repository.Revision
		leases []repository.Lease
		edit   func(*restore.PointInTimePlan)
		ok     bool // a control: consistent changes replay
	}{
		{name: "unrecorded lease", revs: []repository.Revision{rev(4, put("c", 4, 1, 0x11))}},
		{name: "delete of an absent key", revs: []repository.Revision{rev(4, repository.Op{Delete: true, Key: []byte("zz")})}},
		{name: "wrong version", revs: []repository.Revision{rev(4, put("a", 2, 5, 0))}},
		{name: "wrong create revision", revs: []repository.Revision{rev(4, put("c", 2, 2, 0))}},
		// Enough keys for the end check to read them back in parts on
		// several goroutines: a wrong version anywhere is found.
		{name: "wrong create revision among 3 000 keys", revs: manyKeys(3000, 2100)},
		{name: "3 000 consistent keys", revs: manyKeys(3000, -1), ok: true},
		{name: "consistent changes", revs: []repository.Revision{rev(4, put("a", 2, 2, 0)), rev(5, put("a", 2, 3, 0), repository.Op{Delete: true, Key: []byte("b")})}, ok: true},
		{name: "consistent changes with a lease", revs: []repository.Revision{rev(4, put("c", 4, 1, 0x12)), rev(5, put("c", 4, 2, 0x12))},
			leases: []repository.Lease{{ID: 0x12, TTL: 60, Revision: 4}}, ok: true},
		{name: "snapshot at another revision", revs: []repository.Revision{rev(4, put("c", 4, 1, 0))},
			edit: func(p *restore.PointInTimePlan) { p.Snapshot.Revision = 2; p.Revisions = 2 }},
		{name: "target past the segments", revs: []repository.Revision{rev(4, put("c", 4, 1, 0))},
			edit: func(p *restore.PointInTimePlan) { p.Revision = 9 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, repo, db := offlinePlan(t, tc.revs, tc.leases)
			if tc.edit != nil {
				tc.edit(p)
			}
			orig, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			st, err := restore.Replay(t.Context(), db, p, repo, nil, nil)
			// The same file, as it was, for the child.
			if werr := os.WriteFile(db, orig, 0o600); werr != nil {
				t.Fatal(werr)
			}
			childSt, childErr := restore.ReplayInChild(t.Context(), db, p, repo, nil, nil)
			if tc.ok {
				if err != nil || childErr != nil {
					t.Fatalf("replay: %v; in a child: %v", err, childErr)
				}
				st.Seconds, childSt.Seconds = 0, 0
				if diff := cmp.Diff(childSt, st); diff != "" {
					t.Errorf("stats of the child's replay (-got +want in-process):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, restore.ErrReplay) {
				t.Fatalf("replay: %v, want ErrReplay", err)
			}
			if !errors.Is(childErr, restore.ErrReplay) || childErr.Error() != err.Error() {
				t.Errorf("the child's error:\n%v\nwant ErrReplay with the in-process text:\n%v", childErr, err)
			}
			if childSt.Revisions != st.Revisions || childSt.Segments != st.Segments {
				t.Errorf("the child's stats %+v, in-process %+v", childSt, st)
			}
		})
	}
}

// TestReplayDamagedRecords: a segment whose header is intact but whose
// records are damaged is ErrBadSegment with the same text whether it is
// parsed in this process (Replay) or, decoded only here, in the replay
// child (ReplayInChild).
func TestReplayDamagedRecords(t *testing.T) {
	p, repo, db := offlinePlan(t, []repository.Revision{rev(4, put("c", 4, 1, 0))}, nil)
	seg := &repository.Segment{SegmentHeader: p.Links[0].Header, Revisions: []repository.Revision{rev(4, put("c", 4, 1, 0))}}
	var raw bytes.Buffer
	if err := repository.EncodeSegment(&raw, seg); err != nil {
		t.Fatal(err)
	}
	b := raw.Bytes()
	b[len(b)-40] ^= 1 // in the records, before the sha256
	var stored bytes.Buffer
	w, err := repository.NewEncoder(&stored, repository.Encoding{Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	key := p.Segments[0].Object.Key
	if err := repo.Store.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Store.Put(t.Context(), key, bytes.NewReader(stored.Bytes()), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Links = nil // planned after the damage
	if _, _, _, err := repo.ReadSegmentRaw(t.Context(), p.Segments[0], nil); err != nil {
		t.Fatalf("the damage reached the header: %v", err)
	}
	orig, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	_, want := restore.Replay(t.Context(), db, p, repo, nil, nil)
	if !errors.Is(want, repository.ErrBadSegment) {
		t.Fatalf("replay: %v, want ErrBadSegment", want)
	}
	if err := os.WriteFile(db, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	_, got := restore.ReplayInChild(t.Context(), db, p, repo, nil, nil)
	if !errors.Is(got, repository.ErrBadSegment) || got.Error() != want.Error() {
		t.Errorf("in a child: %v\nwant ErrBadSegment with the in-process text:\n%v", got, want)
	}
}

// TestReplayChildCrash: etcd's storage code panics on a file that is no
// bbolt database; in the replay child that takes only the child down
// (this test goes on), and the error names the crash and the panic. A
// cancelled replay is ctx's error.
func TestReplayChildCrash(t *testing.T) {
	p, repo, db := offlinePlan(t, []repository.Revision{rev(4, put("c", 4, 1, 0))}, nil)
	if err := os.WriteFile(db, []byte(strings.Repeat("not a bbolt database\n", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := restore.ReplayInChild(t.Context(), db, p, repo, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "replay process crashed") || !strings.Contains(err.Error(), "panic") || errors.Is(err, restore.ErrReplay) {
		t.Fatalf("replay onto garbage in a child: %v, want the child's crash with its panic", err)
	}
	t.Logf("crash: %v", err)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := restore.ReplayInChild(ctx, db, p, repo, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled replay: %v, want context.Canceled", err)
	}
}

func TestPlanWithoutCapture(t *testing.T) {
	repo := restoretest.DirRepo(t, t.TempDir())
	_, err := restore.PlanPointInTime(t.Context(), repo, nil, restore.Target{Revision: 5}, nil)
	var oe *restore.OutsideWindowsError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "needs capture") || !strings.Contains(err.Error(), "no recoverable window") {
		t.Fatalf("plan without capture: %v", err)
	}
}
