package replica_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestCopyTakesOnlyTrusted: a copy never takes what the primary cannot
// prove: a backup planted in the primary without the signing key stays
// there; the signed ones are copied and stay trusted in the copy.
func TestCopyTakesOnlyTrusted(t *testing.T) {
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	trust := &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
	primary, to := dirRepo(t), dirRepo(t)
	primary.Signer, primary.Trust = key, trust
	to.Signer, to.Trust = key, trust
	good := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	attacker := &repository.Repo{Store: primary.Store, Cluster: primary.Cluster}
	planted := jobtest.PutBackup(t, attacker, t0.Add(time.Hour), uploader.PutOptions{}, false)

	lg, _ := jobtest.Logger(t)
	if _, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to}, lg); err != nil {
		t.Fatalf("copy: %v", err)
	}
	l, err := to.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Backups {
		if e.State != repository.StateOK {
			t.Errorf("copied %s is %s: %s", e.Manifest.ID, e.State, e.Problem)
		}
		got = append(got, e.Manifest.ID)
	}
	if !slices.Equal(got, []string{good.ID}) {
		t.Errorf("the copy holds %v, want only %s (not the planted %s)", got, good.ID, planted.ID)
	}
}

// TestCopyRefusesAnotherLineage: a copy store that already holds another
// etcd cluster's backups under the cluster name (a copy-pasted copies:
// entry) is refused, nothing copied into it.
func TestCopyRefusesAnotherLineage(t *testing.T) {
	primary, to := dirRepo(t), dirRepo(t)
	jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	m := jobtest.PutObject(t, to, t0.Add(-time.Hour), uploader.PutOptions{})
	m.EtcdClusterID = "0123456789abcdef"
	if err := to.PutManifest(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	before := jobtest.AllKeys(t, to.Store)
	lg, _ := jobtest.Logger(t)
	_, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to}, lg)
	if !errors.Is(err, repository.ErrOtherLineage) || !strings.Contains(err.Error(), "0123456789abcdef") || !strings.Contains(err.Error(), "copy store") {
		t.Fatalf("copy into another lineage's store: %v, want ErrOtherLineage naming the copy's lineage", err)
	}
	if after := jobtest.AllKeys(t, to.Store); !slices.Equal(after, before) {
		t.Errorf("the refused copy changed the copy store: %v -> %v", before, after)
	}
}
