package replica_test

import (
	"io"
	"log/slog"
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
