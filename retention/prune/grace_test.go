package prune

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestRunRefusesNegativeOrphanGrace checks that prune, run as a library,
// refuses the orphan grace the configuration refuses
// (retention.orphan_grace negative), which would make a backup still being
// uploaded an orphan old enough to remove, and removes nothing.
func TestRunRefusesNegativeOrphanGrace(t *testing.T) {
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: d, Cluster: jobtest.Cluster}
	now := time.Now().UTC()
	jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, false)
	uploading := jobtest.PutObject(t, b, now, uploader.PutOptions{})
	_, err = Run(t.Context(), Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: -time.Minute, Now: fixedClock(now.Add(time.Second))}, nil)
	if want := "prune: orphan grace -1m0s: must not be negative"; err == nil || err.Error() != want {
		t.Fatalf("Run: got error %v, want %q", err, want)
	}
	_, orphans := jobtest.Listed(t, b)
	if diff := cmp.Diff([]string{uploading.Object}, orphans); diff != "" {
		t.Errorf("orphans after the refused run (-want +got):\n%s", diff)
	}
}
