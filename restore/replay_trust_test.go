package restore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestReplayRefusesUntrustedSegment: a generation written with a signing
// key (two segments, revisions 4-5 and 6-7, after a snapshot at 3), the
// second replaced by one planted with lifeboat's code but without the
// key (unsigned, or signed by another key). With the key trusted, a
// replay through the planted segment is refused before it is applied, in
// this process and in the replay child, with an error that wraps
// ErrUntrusted (exit 2) and names it; a replay to revision 5 (the real
// window up to the segment before) still restores.
func TestReplayRefusesUntrustedSegment(t *testing.T) {
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		signer *signing.Key
		why    error
	}{{"unsigned", nil, signing.ErrUnsigned}, {"another key", attacker, signing.ErrUnknownKey}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "snap.db")
			be := backend.NewDefaultBackend(zap.NewNop(), base)
			kv := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
			for _, k := range []string{"a", "b"} {
				txn := kv.Write(traceutil.TODO())
				txn.Put([]byte(k), []byte("v"), 0)
				txn.End()
			}
			kv.Close()
			be.Close()

			w := restoretest.DirRepo(t, filepath.Join(dir, "store"))
			w.Signer = key
			id := repository.NewID(time.Now(), 3)
			segment := func(first, last int64, prev, value string) *repository.Segment {
				s := &repository.Segment{SegmentHeader: repository.SegmentHeader{
					Format: repository.SegmentFormat, ClusterID: 1, Generation: id, First: first, Last: last,
					CapturedThrough: last, CapturedAt: time.Now(), Token: 1, PrevHash: prev,
				}}
				if prev == "" {
					s.SnapshotID, s.SnapshotRevision = id, 3
				}
				for r := first; r <= last; r++ {
					op := put("c", 4, r-3, 0)
					op.Value = []byte(value)
					s.Revisions = append(s.Revisions, rev(r, op))
				}
				return s
			}
			enc := repository.Encoding{Compression: "zstd"}
			first := segment(4, 5, "", "real")
			o1, h1, err := w.PutSegment(t.Context(), first, enc)
			if err != nil {
				t.Fatal(err)
			}
			o2, _, err := w.PutSegment(t.Context(), segment(6, 7, h1, "real"), enc)
			if err != nil {
				t.Fatal(err)
			}
			// The plant: deleted and stored again, as the store's
			// credentials allow.
			if err := w.Store.Delete(t.Context(), o2.Key); err != nil {
				t.Fatal(err)
			}
			planter := *w
			planter.Signer = tc.signer
			planted := segment(6, 7, h1, "planted")
			o2, h2, err := planter.PutSegment(t.Context(), planted, enc)
			if err != nil {
				t.Fatal(err)
			}

			r := restoretest.DirRepo(t, filepath.Join(dir, "store"))
			r.Trust = &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
			snap := &repository.Manifest{ID: id, Revision: 3}
			segs := []repository.SegmentInfo{
				{Generation: id, First: 4, Last: 5, Compression: "zstd", Encryption: "none", Object: o1},
				{Generation: id, First: 6, Last: 7, Compression: "zstd", Encryption: "none", Object: o2},
			}
			plan := func(to int64) *restore.PointInTimePlan {
				n := 1
				if to > 5 {
					n = 2
				}
				return &restore.PointInTimePlan{
					Revision: to, Revisions: to - 3, Snapshot: snap, Segments: segs[:n],
					Window: repository.Window{Generation: id, Anchor: snap, From: 3, Through: 7, Segments: segs},
					Links: []repository.ChainLink{{Key: o1.Key, Header: first.SegmentHeader, Hash: h1},
						{Key: o2.Key, Header: planted.SegmentHeader, Hash: h2}}[:n],
				}
			}
			for _, replay := range []struct {
				name string
				run  func(db string, p *restore.PointInTimePlan) (restore.ReplayStats, error)
			}{
				{"in process", func(db string, p *restore.PointInTimePlan) (restore.ReplayStats, error) {
					return restore.Replay(t.Context(), db, p, r, nil, nil)
				}},
				{"in the replay child", func(db string, p *restore.PointInTimePlan) (restore.ReplayStats, error) {
					return restore.ReplayInChild(t.Context(), db, p, r, nil, nil)
				}},
			} {
				db := filepath.Join(t.TempDir(), "replay.db")
				restoretest.CopyFile(t, base, db)
				_, err := replay.run(db, plan(7))
				t.Logf("%s: %v", replay.name, err)
				var ue *repository.UntrustedError
				if !errors.Is(err, repository.ErrUntrusted) || !errors.Is(err, tc.why) || !strings.Contains(err.Error(), o2.Key) {
					t.Errorf("%s: replay through the planted segment: %v, want ErrUntrusted (%v) naming %s", replay.name, err, tc.why, o2.Key)
				} else if errors.As(err, &ue) && ue.Key != o2.Key {
					t.Errorf("%s: untrusted %s, want %s", replay.name, ue.Key, o2.Key)
				}

				db = filepath.Join(t.TempDir(), "replay.db")
				restoretest.CopyFile(t, base, db)
				st, err := replay.run(db, plan(5))
				if err != nil || st.To != 5 || st.Revisions != 2 {
					t.Fatalf("%s: replay to 5, before the planted segment: %+v, %v", replay.name, st, err)
				}
				checkValue(t, db, "c", "real", 5)
			}
		})
	}
}

// checkValue opens the replayed file and checks key's value and the
// store's revision.
func checkValue(t *testing.T, db, key, want string, rev int64) {
	t.Helper()
	if _, err := os.Stat(db); err != nil {
		t.Fatal(err)
	}
	be := backend.NewDefaultBackend(zap.NewNop(), db)
	kv := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
	defer func() { kv.Close(); be.Close() }()
	res, err := kv.Range(t.Context(), []byte(key), nil, mvcc.RangeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.KVs) != 1 || string(res.KVs[0].Value) != want || kv.Rev() != rev {
		t.Errorf("%s after replay: %+v at revision %d, want %q at %d", key, res.KVs, kv.Rev(), want, rev)
	}
}
