package restore_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestReplayOutlivesCompactionGrace (issue 31): a restore planned before a
// compaction in another process (the agent's) reads segments that the
// compaction replaced and, its grace over, deleted while the restore was
// still running. The replay plans the rest again onto the compacted
// segment and finishes with the same data, instead of failing and rolling
// back. Three cases: the compacted segment replaces segments in the
// middle (nothing of it read yet), the replay's first one, and segments
// partly applied already (its first sources still there, the rest gone:
// it holds revisions the replay has applied, which it skips).
func TestReplayOutlivesCompactionGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	s := restoretest.StartPITRSource(t, 60, nil)
	enc := restoretest.AgeEncoding(s.IDs[0].(*age.X25519Identity))
	for _, tc := range []struct {
		name string
		// sources are the plan's segments [from, to) the compaction
		// merges; gone [from, to) those deleted before the replay.
		from, to, goneFrom int
	}{
		{"middle", 2, 5, 2},
		{"first", 0, 3, 0},
		{"partly applied", 1, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p, err := restore.PlanPointInTime(ctx, s.Repo, nil, restore.Target{Revision: s.Through}, s.IDs)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Segments) < tc.to+1 {
				t.Fatalf("the plan has %d segments, the case needs %d", len(p.Segments), tc.to+1)
			}
			path := filepath.Join(t.TempDir(), "snap.db")
			if _, err := repository.Fetch(ctx, s.Repo, p.Snapshot, path, repository.FetchOptions{Identities: s.IDs}); err != nil {
				t.Fatal(err)
			}
			// The agent's compaction, after planning: a level-1 segment
			// replaces the sources; its grace over, they are deleted.
			step := repository.CompactStep{Generation: p.Window.Generation, Level: 1,
				Bucket: time.Now().UTC().Truncate(time.Hour), Sources: p.Segments[tc.from:tc.to]}
			pol := repository.CompactPolicy{Levels: []time.Duration{time.Hour}}.WithDefaults()
			out, err := s.Repo.Compact(ctx, step, pol, enc, s.IDs)
			if err != nil || len(out) != 1 {
				t.Fatalf("compact: %v, %v", out, err)
			}
			// The next case starts from the store as it was: the
			// compacted segment gone, the sources back (the same bytes).
			saved := map[string][]byte{}
			for _, si := range p.Segments[tc.goneFrom:tc.to] {
				saved[si.Object.Key] = storetest.ReadObject(t, s.Repo.Store, si.Object.Key)
				if err := s.Repo.Store.Delete(ctx, si.Object.Key); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				ctx := context.Background()
				if err := s.Repo.Store.Delete(ctx, out[0].Object.Key); err != nil {
					t.Error(err)
				}
				for k, b := range saved {
					if _, err := s.Repo.Store.Put(ctx, k, bytes.NewReader(b), uploader.PutOptions{}); err != nil {
						t.Error(err)
					}
				}
			})
			st, err := restore.Replay(ctx, path, p, s.Repo, s.IDs, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("replay after the compaction deleted %d planned segments: %v", tc.to-tc.goneFrom, err)
			}
			if st.To != p.Revision || st.Revisions != p.Revisions {
				t.Fatalf("replay: %+v, want revisions %d through %d", st, p.Revisions, p.Revision)
			}
			checkOffline(t, s, path, p.Revision)
		})
	}
}
