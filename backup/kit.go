package backup

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// KitSource is what a backup's recovery kit is collected from (Job.Kit):
// every backup taken with one names its kit in its manifest.
type KitSource struct {
	// Root is the directory Paths are read below ("/" on the host).
	Root string
	// Paths are kit.paths: presets (kubeadm, k3s) or absolute paths.
	Paths []string
	// Encryption is whom the kit is encrypted to; a kit is never stored
	// without recipients.
	Encryption kit.Encryption
}

// storeKit collects the job's kit and stores it unless the store holds it
// already; it returns the kit's id ("" without Job.Kit). It runs once per
// job, before the snapshot: a backup whose kit cannot be collected or
// stored is not taken, so a manifest never names a kit that is not there.
func storeKit(ctx context.Context, job Job, now time.Time, lg *slog.Logger) (string, error) {
	if job.Kit == nil {
		return "", nil
	}
	k, err := kit.Collect(job.Kit.Root, job.Kit.Paths)
	if err != nil {
		return "", fmt.Errorf("recovery kit: %w", err)
	}
	// The kit is locked like the backup's data object: a restore of the
	// backup needs it as long (a reused kit's lock is extended).
	lock := uploader.Retention{Mode: job.LockMode, For: job.LockRetain, LegalHold: job.LegalHold}
	r := kit.Repo{Store: job.Backups.Store, Cluster: job.Backups.Cluster, Signer: job.Backups.Signer, Trust: job.Backups.Trust, Lock: lock}
	res, err := r.Put(ctx, k, job.Kit.Encryption, job.Kit.Paths, now, job.Version)
	if err != nil {
		return "", fmt.Errorf("recovery kit: %w", err)
	}
	if res.Stored {
		lg.Info("recovery kit stored", "kit_id", res.Manifest.ID, "files", len(res.Manifest.Files), "object", res.Manifest.Object)
	} else {
		lg.Debug("recovery kit unchanged", "kit_id", res.Manifest.ID)
	}
	return res.Manifest.ID, nil
}
