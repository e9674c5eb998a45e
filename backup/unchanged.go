package backup

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// unchanged returns an *UnchangedError when the live cluster holds what
// its newest backup holds, or nil when a backup is to be taken. Nothing
// is lost by skipping: the backup compared with is the newest intact and
// trusted one of this very etcd cluster (its lineage, its cluster ID),
// every reachable member is at its revision, and every reachable voting
// member's HashKV at that revision equals the HashKV computed from the
// backup's own snapshot. Anything else, an error included, takes a
// backup.
func unchanged(ctx context.Context, sess *snapshot.Session, job Job, lg *slog.Logger) *UnchangedError {
	newest := newestOwn(job)
	if newest == nil {
		return nil
	}
	members, err := sess.Members(ctx)
	if err != nil {
		lg.Debug("unchanged check: member status failed; taking a backup", "err", err)
		return nil
	}
	matched := 0
	for _, st := range members {
		switch {
		case st.Err != nil || st.Learner:
			continue
		case st.Revision != newest.Revision:
			lg.Debug("cluster changed since the newest backup", "backup_id", newest.ID,
				"backup_revision", newest.Revision, "endpoint", st.Endpoint, "revision", st.Revision)
			return nil
		}
		h, _, err := sess.HashKV(ctx, st.Endpoint, newest.Revision)
		if err != nil || h != newest.HashKV {
			lg.Debug("unchanged check: HashKV differs or failed; taking a backup", "backup_id", newest.ID,
				"endpoint", st.Endpoint, "hash_kv", fmt.Sprintf("%08x", h), "backup_hash_kv", fmt.Sprintf("%08x", newest.HashKV), "err", err)
			return nil
		}
		matched++
	}
	if matched == 0 {
		return nil
	}
	return &UnchangedError{Backup: newest, Members: matched}
}

// newestOwn is the newest intact, trusted backup of the claimed etcd
// cluster in its lineage, or nil when the newest such backup has no
// comparable HashKV.
func newestOwn(job Job) *repository.Manifest {
	if job.listing == nil {
		return nil
	}
	cid := fmt.Sprintf("%x", job.claimedID)
	for _, e := range job.listing.Backups { // newest first
		m := e.Manifest
		if e.State != repository.StateOK || m.EtcdClusterID != cid || m.LineageID() != job.claim.Lineage {
			continue
		}
		if m.State() == "" {
			return nil
		}
		return m
	}
	return nil
}
