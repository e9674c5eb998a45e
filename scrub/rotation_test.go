package scrub_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/scrub"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestRotationCoversEveryCycle runs a daily scrub for four 30-day cycles
// in compressed time over a store that gets a backup a day and loses
// those older than 40 days: every object is read in full within a cycle
// of being stored and of its previous read, and once the first cycle is
// over each run reads about the cycle's share (1/30) of the bytes, not a
// whole cycle's worth at once (read_data 1% is below that share).
func TestRotationCoversEveryCycle(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	repo := restoretest.DirRepo(t, dir)
	const cycle, day, keep = 30 * 24 * time.Hour, 24 * time.Hour, 40 * 24 * time.Hour
	start := time.Now().UTC().Truncate(time.Second)
	now := start
	job := scrub.Job{Repo: repo, ReadData: 1, Cycle: cycle, Now: func() time.Time { return now }}
	lg := slog.New(slog.DiscardHandler)

	stored := map[string]time.Time{} // key: when it was stored
	lastRead := map[string]time.Time{}
	put := func() {
		m := jobtest.PutBackup(t, repo, now, uploader.PutOptions{}, false)
		for _, k := range []string{m.Object, repo.ManifestKey(m.ID)} {
			if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(k)), now, now); err != nil {
				t.Fatal(err)
			}
			stored[k] = now
		}
	}
	prune := func() {
		l, err := repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Backups {
			if now.Sub(e.Manifest.CreatedAt) > keep {
				for _, k := range []string{repo.ManifestKey(e.Manifest.ID), e.Manifest.Object} {
					if err := repo.Store.Delete(ctx, k); err != nil {
						t.Fatal(err)
					}
					delete(stored, k)
					delete(lastRead, k)
				}
			}
		}
	}
	for range 10 { // a store that existed before the scrub was turned on
		put()
		now = now.Add(time.Hour)
	}
	var perRun []float64 // bytes read / bytes stored, per run
	for run := range 4 * 30 {
		now = start.Add(time.Duration(run+1) * day)
		put()
		prune()
		res, err := scrub.Run(ctx, job, lg)
		if err != nil || !res.Sound() {
			t.Fatalf("day %d: %+v, %v", run+1, res, err)
		}
		st, err := repo.LatestScrubState(ctx)
		if err != nil || st == nil {
			t.Fatalf("day %d: state %v, %v", run+1, st, err)
		}
		for k, m := range st.Read {
			if m.ReadAt.Equal(now) {
				lastRead[k] = now
			}
		}
		for k, at := range stored {
			since := at
			if r, ok := lastRead[k]; ok {
				since = r
			}
			if now.Sub(since) > cycle {
				t.Errorf("day %d: %s not read since %s (more than a cycle)", run+1, k, since.Format(time.DateOnly))
			}
		}
		perRun = append(perRun, float64(res.BytesRead)/float64(res.TotalBytes))
	}
	// Level: after the first cycle no run reads more than three times the
	// cycle's share (objects are read whole, so a run overshoots by one).
	for i, share := range perRun[35:] {
		if share > 3.0/30 {
			t.Errorf("day %d read %.1f%% of the bytes, want about %.1f%%", i+36, share*100, 100.0/30)
		}
	}
	t.Logf("share of the bytes read per run after the first cycle: %v", perRun[35:45])
}
