package capture

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// errUnusableAnchor is wrapped by anchorOn when a committed backup
// cannot anchor a new generation: its revision is compacted in etcd, it
// is of another cluster, or the cluster is below it or holds another
// history at it (restored).
var errUnusableAnchor = errors.New("the backup cannot anchor a generation")

// anchorOn starts a generation at the committed backup m without taking a
// snapshot, when etcd can still send every revision after m's: the watch
// then starts at m.Revision (its events dropped, see openStream). One
// HashKV at m's revision probes it: ErrCompacted says the history after
// m is gone, ErrFutureRev that the cluster is below m (restored), the
// header's cluster ID that it is another cluster, and, when etcd's
// compact revision is still m's, a hash other than m's that the cluster
// holds another history at that revision (restored in place and written
// past it). Those errors wrap errUnusableAnchor; other errors (etcd not
// reachable) do not. The caller makes sure m is no generation's anchor
// yet: a generation's id is its anchor's backup id, and a sealed
// generation is never continued.
func (r *runner) anchorOn(ctx context.Context, m *repository.Manifest) (*generation, error) {
	g, err := fromSnapshot(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnusableAnchor, err)
	}
	var resp *pb.HashKVResponse
	var rpcErr error // the RPC's own error: Conn's wraps it with the endpoint
	err = r.job.Session.Conn(ctx, func(ctx context.Context, _ string, conn *grpc.ClientConn) error {
		resp, rpcErr = pb.NewMaintenanceClient(conn).HashKV(ctx, &pb.HashKVRequest{Revision: m.Revision})
		return rpcErr
	})
	switch {
	case err == nil:
	case rpcErr != nil && rpctypes.Error(rpcErr) == rpctypes.ErrCompacted:
		return nil, fmt.Errorf("backup %s: %w: etcd compacted its revision %d", m.ID, errUnusableAnchor, m.Revision)
	case rpcErr != nil && rpctypes.Error(rpcErr) == rpctypes.ErrFutureRev:
		return nil, fmt.Errorf("backup %s: %w: the cluster is below its revision %d (restored)", m.ID, errUnusableAnchor, m.Revision)
	default:
		return nil, fmt.Errorf("backup %s: hash at revision %d: %w", m.ID, m.Revision, err)
	}
	switch {
	case resp.Header != nil && resp.Header.ClusterId != g.clusterID:
		return nil, fmt.Errorf("backup %s: %w: it is of cluster %x, the cluster answering is %x", m.ID, errUnusableAnchor, g.clusterID, resp.Header.ClusterId)
	case resp.CompactRevision == m.CompactRevision && resp.Hash != m.HashKV:
		return nil, fmt.Errorf("backup %s: %w: the cluster's hash at revision %d is %d, the backup's %d: another history (restored)", m.ID, errUnusableAnchor, m.Revision, resp.Hash, m.HashKV)
	}
	return g, nil
}

// adoptable returns the newest intact committed backup of the store when
// it is no generation's anchor yet (nil otherwise): the candidate anchor
// of a new generation that needs no snapshot of its own. Only the newest:
// a generation anchored on an older backup than the newest generation's
// would sort before it (Windows orders by anchor time) and resume would
// never find it.
func (r *runner) adoptable(ctx context.Context) (*repository.Manifest, error) {
	l, err := r.job.Repo.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	var m *repository.Manifest
	for _, e := range l.Backups {
		if e.State == repository.StateOK {
			m = e.Manifest
			break
		}
	}
	if m == nil {
		return nil, nil
	}
	ws, err := r.job.Repo.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("list generations: %w", err)
	}
	for _, w := range ws {
		if w.Generation == m.ID {
			return nil, nil
		}
	}
	return m, nil
}

// adopt starts a generation on the newest committed backup when
// anchorOn can (nil when not, the reason logged).
func (r *runner) adopt(ctx context.Context) *generation {
	m, err := r.adoptable(ctx)
	if err != nil {
		r.lg.Warn("capture: cannot look for a committed backup to anchor on; taking a snapshot", "err", err)
		return nil
	}
	if m == nil {
		return nil
	}
	g, err := r.anchorOn(ctx, m)
	if err != nil {
		r.lg.Info("capture: not anchoring on the newest backup; taking a snapshot", "backup_id", m.ID, "err", err)
		return nil
	}
	return g
}

// notAnchor fails when backup m already anchors a generation: the
// snapshot Job.Snapshot returned is an adopted one (a backup of the same
// revision and second), and a sealed generation's id is never reused.
// The next attempt, a second later, gets a backup of its own.
func (r *runner) notAnchor(ctx context.Context, m *repository.Manifest) error {
	byGen, _, err := r.job.Repo.ListProgress(ctx)
	if err != nil {
		return fmt.Errorf("list generations: %w", err)
	}
	segs, _, err := r.job.Repo.ListSegments(ctx, m.ID)
	if err != nil {
		return err
	}
	if len(byGen[m.ID]) > 0 || len(segs) > 0 {
		return fmt.Errorf("backup %s already anchors a generation", m.ID)
	}
	return nil
}
