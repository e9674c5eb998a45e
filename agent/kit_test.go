package agent

import (
	"context"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestKitCertExpiryMetric: the agent's drill of a backup with a recovery
// kit exports the kit's earliest certificate expiry as
// lifeboat_kit_cert_expiry_timestamp_seconds.
func TestKitCertExpiryMetric(t *testing.T) {
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, st, 100)
	lg, _ := testLogger(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	now := time.Now()
	tr := kittest.Kubeadm(t, root, now, now.Add(25*24*time.Hour))
	enc := repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}
	if _, err := backup.Run(t.Context(), backup.Job{Etcd: f.etcdConfig(), SpoolDir: f.spool, Backups: f.backups, Encoding: enc, Version: "test",
		Kit: &backup.KitSource{Root: root, Paths: []string{"kubeadm"}, Encryption: kit.Encryption{Recipients: enc.Recipients, RecipientKeys: enc.RecipientKeys}},
	}, lg); err != nil {
		t.Fatalf("backup: %v", err)
	}
	cfg := f.config(t, lg)
	cfg.Snapshot, cfg.Prune = nil, nil
	cfg.Schedules = Schedules{Drill: "@every 1s"}
	dj := drill.Job{Backups: f.backups, Target: "latest"}
	dj.Options.ScratchDir, dj.Options.Timeout, dj.Options.Identities = f.scratch, 2*time.Minute, []age.Identity{id}
	cfg.Drill = func(ctx context.Context) (*drill.Outcome, error) { return drill.RunJob(ctx, dj, lg) }
	a := start(t, cfg, lg)
	want := float64(tr.EarliestExpiry.Unix())
	waitFor(t, "the kit's certificate expiry", 2*time.Minute, func() bool {
		mfs, _ := scrape(t, a.url)
		v, ok := value(mfs, "lifeboat_kit_cert_expiry_timestamp_seconds")
		return ok && v == want
	})
	if err, _ := a.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
}
