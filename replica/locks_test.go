package replica_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// rawObject reads key from st whole.
func rawObject(t *testing.T, st uploader.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// TestCopyManifestVerbatimUnlockedCopy is issue 28's defect 4: a copy
// without Object Lock of a primary with it. The copy's manifests are the
// primary's bytes, unchanged (they will be signed), so their lock fields
// say what the primary's writer asked for; prune on the copy must ask the
// copy's store, not trust them, and delete what no rule keeps there.
func TestCopyManifestVerbatimUnlockedCopy(t *testing.T) {
	srv := s3test.Start(t)
	st, _ := jobtest.NewS3Store(t, srv, true)
	primary := repository.New(st, jobtest.Cluster)
	now := time.Now().UTC()
	lock := uploader.PutOptions{LockMode: uploader.LockGovernance, RetainUntil: now.Add(time.Hour).Truncate(time.Second)}
	old := jobtest.PutBackup(t, primary, now.Add(-2*time.Hour), lock, true)
	newest := jobtest.PutBackup(t, primary, now.Add(-time.Hour), lock, true)

	cp := dirRepo(t)
	if _, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: cp, Now: func() time.Time { return now }}, quiet(t)); err != nil {
		t.Fatalf("copy: %v", err)
	}
	for _, m := range []*repository.Manifest{old, newest} {
		key := primary.ManifestKey(m.ID)
		if diff := cmp.Diff(string(rawObject(t, st, key)), string(rawObject(t, cp.Store, key))); diff != "" {
			t.Errorf("the copy's manifest %s is not the primary's bytes (-primary +copy):\n%s", key, diff)
		}
	}

	res, err := prune.Run(t.Context(), prune.Job{Backups: cp, Policy: retention.Policy{Last: 1}, OrphanGrace: time.Hour, Now: func() time.Time { return now }}, nil)
	if err != nil {
		t.Fatalf("prune the copy: %v", err)
	}
	if diff := cmp.Diff([]string{old.ID}, res.Deleted); diff != "" {
		t.Errorf("prune of the unlocked copy: deleted (-want +got):\n%s", diff)
	}
	if len(res.Locked) != 0 {
		t.Errorf("prune of the unlocked copy: locked %v, want none (the manifest's lock is the primary's)", res.Locked)
	}
}

func quiet(t *testing.T) *slog.Logger {
	lg, _ := jobtest.Logger(t)
	return lg
}

// TestCopyLocksEverything: a copy with COMPLIANCE Object Lock of an
// unlocked primary locks every object it writes by its own policy: the
// data object, kit object and kit manifest and the manifest for the
// retain period, the segments and the marker for what compaction needs;
// a later backup that names the same kit extends the kit's lock in the
// copy; verify-style, every object the copy holds is locked.
func TestCopyLocksEverything(t *testing.T) {
	primary := dirRepo(t)
	kitID := putKit(t, primary)
	now := time.Now().UTC()
	m := jobtest.PutObject(t, primary, now.Add(-time.Hour), uploader.PutOptions{})
	m.Kit = kitID
	if err := primary.PutManifest(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	next, prev := m.Revision+1, ""
	chain(t, primary, m, 3, &next, &prev)

	srv := s3test.Start(t)
	st, _ := jobtest.NewS3Store(t, srv, true)
	cp := repository.New(st, jobtest.Cluster)
	long := time.Hour
	cp.Lock = repository.LockPolicy{Retention: uploader.Retention{Mode: uploader.LockCompliance, For: long},
		Compaction: repository.CompactPolicy{Levels: []time.Duration{time.Minute}}}
	short := cp.Lock.SegmentFor(0)
	copyOnce := func(later time.Duration) time.Time {
		t.Helper()
		start := time.Now()
		clock := func() time.Time { return time.Now().Add(later) }
		if _, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: cp, Now: clock}, quiet(t)); err != nil {
			t.Fatalf("copy: %v", err)
		}
		return start
	}
	start := copyOnce(0)
	locks := func() map[string]uploader.ObjectInfo {
		t.Helper()
		out := map[string]uploader.ObjectInfo{}
		for _, k := range jobtest.AllKeys(t, st) {
			info, err := st.Stat(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			out[k] = info
		}
		return out
	}
	segs, kits := 0, 0
	for k, info := range locks() {
		d := long
		switch {
		case strings.Contains(k, "/changes/") || strings.Contains(k, "/progress/"):
			d = short
			segs++
		case strings.Contains(k, "/kits/"):
			kits++
		}
		if info.LockMode != uploader.LockCompliance {
			t.Errorf("%s in the copy: lock mode %q, want COMPLIANCE", k, info.LockMode)
		}
		if lo, hi := start.Add(d-2*time.Second), time.Now().Add(d+time.Second); info.RetainUntil.Before(lo) || info.RetainUntil.After(hi) {
			t.Errorf("%s in the copy: retain until %s, want %s from the copy", k, info.RetainUntil, d)
		}
	}
	if segs != 4 || kits != 2 {
		t.Errorf("the copy holds %d change objects and %d kit objects, want 4 and 2", segs, kits)
	}

	// A newer backup names the same kit: its lock in the copy is
	// extended as far as the new backup's.
	before := locks()
	m2 := jobtest.PutObject(t, primary, now, uploader.PutOptions{})
	m2.Kit = kitID
	if err := primary.PutManifest(t.Context(), m2); err != nil {
		t.Fatal(err)
	}
	copyOnce(time.Minute) // a copy run a minute later

	for k, info := range locks() {
		if strings.Contains(k, "/kits/") && !info.RetainUntil.After(before[k].RetainUntil) {
			t.Errorf("kit %s in the copy: retain until %s after a newer backup named it, was %s: want it extended", k, info.RetainUntil, before[k].RetainUntil)
		}
	}
}
