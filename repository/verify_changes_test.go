package repository_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestVerifyChanges reads every segment of a generation: a sound chain
// passes with its revisions; a damaged segment, a gap, a bad previous
// hash, a first segment that does not follow the anchor and an
// uncommitted anchor each fail, naming the key and revisions, with the
// verified run before the problem.
func TestVerifyChanges(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	type setup func(t *testing.T, dir string, b *repository.Repo, m *repository.Manifest) // stores segments after m
	for _, tc := range []struct {
		name        string
		setup       setup
		problem     string // "" for sound
		chain       repository.ChainProblem
		through     int64 // relative to the anchor's revision
		segments    int
		problemFrom int64 // relative, 0 when not checked
	}{
		{name: "sound", through: 9, segments: 3, setup: func(t *testing.T, _ string, b *repository.Repo, m *repository.Manifest) {
			putChain(t, b, m.ID, m.Revision, [][2]int64{{m.Revision + 1, m.Revision + 3}, {m.Revision + 4, m.Revision + 4}, {m.Revision + 5, m.Revision + 9}})
		}},
		{name: "no segment yet", through: 0, segments: 0, setup: func(*testing.T, string, *repository.Repo, *repository.Manifest) {}},
		{name: "gap", chain: repository.ChainGap, through: 3, segments: 1, problemFrom: 4, setup: func(t *testing.T, _ string, b *repository.Repo, m *repository.Manifest) {
			putChain(t, b, m.ID, m.Revision, [][2]int64{{m.Revision + 1, m.Revision + 3}, {m.Revision + 6, m.Revision + 7}})
		}},
		{name: "damaged segment", problem: "bad change segment", through: 3, segments: 1, problemFrom: 4, setup: func(t *testing.T, dir string, b *repository.Repo, m *repository.Manifest) {
			putChain(t, b, m.ID, m.Revision, [][2]int64{{m.Revision + 1, m.Revision + 3}, {m.Revision + 4, m.Revision + 5}, {m.Revision + 6, m.Revision + 6}})
			segs, _, err := b.ListSegments(t.Context(), m.ID)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "store", filepath.FromSlash(segs[1].Object.Key))
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 0xff
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "bad previous hash", chain: repository.ChainBadHash, through: 2, segments: 1, problemFrom: 3, setup: func(t *testing.T, _ string, b *repository.Repo, m *repository.Manifest) {
			putChain(t, b, m.ID, m.Revision, [][2]int64{{m.Revision + 1, m.Revision + 2}})
			s := &repository.Segment{SegmentHeader: repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID,
				First: m.Revision + 3, Last: m.Revision + 3, CapturedThrough: m.Revision + 3, CapturedAt: t0, Token: 1, PrevHash: strings.Repeat("ab", 32)},
				Revisions: []repository.Revision{{Revision: m.Revision + 3, Received: t0, Ops: []repository.Op{{Delete: true, Key: []byte("/k")}}}}}
			if _, _, err := b.PutSegment(t.Context(), s, repository.Encoding{Compression: "zstd"}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "progress marker with a wrong hash", problem: "progress marker", through: 3, segments: 2, setup: func(t *testing.T, _ string, b *repository.Repo, m *repository.Manifest) {
			key, _ := putChain(t, b, m.ID, m.Revision, [][2]int64{{m.Revision + 1, m.Revision + 2}, {m.Revision + 3, m.Revision + 3}})
			if _, err := b.PutProgress(t.Context(), &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a",
				SnapshotID: m.ID, SnapshotRevision: m.Revision, Through: m.Revision + 3, At: t0.Add(time.Hour), LastSegment: key,
				LastHash: strings.Repeat("cd", 32), Token: 1}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "first segment after another snapshot", chain: repository.ChainNoStart, through: 0, segments: 0, problemFrom: 1, setup: func(t *testing.T, _ string, b *repository.Repo, m *repository.Manifest) {
			putChain(t, b, m.ID, m.Revision+5, [][2]int64{{m.Revision + 6, m.Revision + 7}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := dirBackups(t, dir)
			m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
			tc.setup(t, dir, b, m)
			c := verifyOne(t, b, m.ID)
			if c.Generation != m.ID || c.From != m.Revision || c.Through != m.Revision+tc.through || c.Segments != tc.segments {
				t.Errorf("check %+v: want through %d, %d segments", c, m.Revision+tc.through, tc.segments)
			}
			switch {
			case tc.problem == "" && tc.chain == "":
				if c.Problem != nil {
					t.Fatalf("sound generation: %v", c.Problem)
				}
				return
			case c.Problem == nil:
				t.Fatal("problem not found")
			}
			if tc.chain != "" {
				var ce *repository.ChainError
				if !errors.As(c.Problem, &ce) || ce.Problem != tc.chain {
					t.Errorf("problem %v, want %s", c.Problem, tc.chain)
				}
			}
			if tc.problem != "" && !strings.Contains(c.Problem.Error(), tc.problem) {
				t.Errorf("problem %v, want %q", c.Problem, tc.problem)
			}
			if tc.name == "damaged segment" && !errors.Is(c.Problem, repository.ErrBadSegment) {
				t.Errorf("damage %v does not wrap ErrBadSegment", c.Problem)
			}
			if c.ProblemKey == "" || (tc.problemFrom != 0 && c.ProblemFrom != m.Revision+tc.problemFrom) {
				t.Errorf("problem at %q revisions %d-%d, want from %d", c.ProblemKey, c.ProblemFrom, c.ProblemTo, m.Revision+tc.problemFrom)
			}
		})
	}

	t.Run("uncommitted anchor", func(t *testing.T) {
		b := dirBackups(t, t.TempDir())
		o := jobtest.PutObject(t, b, t0, uploader.PutOptions{})
		putChain(t, b, o.ID, o.Revision, [][2]int64{{o.Revision + 1, o.Revision + 1}})
		c := verifyOne(t, b, o.ID)
		if c.Problem == nil || !strings.Contains(c.Problem.Error(), "not recoverable") {
			t.Errorf("uncommitted anchor: %v", c.Problem)
		}
	})
}

func verifyOne(t *testing.T, b *repository.Repo, gen string) repository.ChangesCheck {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := b.Windows(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Generation == gen {
			c, err := b.VerifyChanges(t.Context(), w, nil)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	// A generation with no object at all has no window: the anchor's.
	for _, e := range l.Backups {
		if e.Manifest.ID == gen {
			c, err := b.VerifyChanges(t.Context(), repository.Window{Generation: gen, Anchor: e.Manifest, From: e.Manifest.Revision, Through: e.Manifest.Revision}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("no window of %s", gen)
	return repository.ChangesCheck{}
}
