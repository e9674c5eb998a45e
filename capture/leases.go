package capture

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// leaseLookups bounds the lease TTL lookups a flush runs at once.
const leaseLookups = 16

// lookupLeases sets the TTL of every lease of ls not known yet (0),
// asking etcd for up to leaseLookups at once. The TTLs found stay set
// when another lookup fails (a retried flush asks only for the rest).
func (c *capt) lookupLeases(ctx context.Context, ls []repository.Lease) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, leaseLookups)
	for i := range ls {
		if ls[i].TTL != 0 {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			ttl, err := c.leaseTTL(ctx, ls[i].ID)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
				return
			}
			ls[i].TTL = ttl
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// leaseTTL asks for lease id's granted TTL: -1 when the lease is gone
// (expired or revoked before the capture looked).
func (c *capt) leaseTTL(ctx context.Context, id int64) (int64, error) {
	c.job.Stats.LeaseLookups.Add(1)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ttl int64
	err := c.job.Session.Conn(ctx, func(ctx context.Context, _ string, conn *grpc.ClientConn) error {
		resp, err := pb.NewLeaseClient(conn).LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id})
		if err != nil {
			return err
		}
		ttl = resp.GrantedTTL
		if resp.TTL == -1 || ttl <= 0 {
			ttl = -1
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("capture: lease %x time to live: %w", id, err)
	}
	return ttl, nil
}
