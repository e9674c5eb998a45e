package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lifeboat-dev/lifeboat/internal/logfield"
)

// LockPrefix is where the leader locks live in etcd: one per cluster name,
// at LockPrefix+cluster (the holders' keys are below it).
const LockPrefix = "/lifeboat/lock/"

// LockConfig configures the leader lock through which several agents of
// one cluster (say one per etcd member) agree on which of them runs the
// scheduled jobs.
type LockConfig struct {
	// Etcd is the client configuration of the cluster that is backed up
	// (snapshot.Config.ClientConfig()): the lock lives in etcd itself.
	Etcd clientv3.Config
	// TTL is the lease's time to live: how long after an agent dies (or
	// loses etcd) its lock expires and another agent takes over. Whole
	// seconds, at least 5s (default 30s).
	TTL time.Duration
	// Identity names this agent in the lock (hostname, pid, address); every
	// agent's /status shows the holder's identity.
	Identity string
}

// MinLockTTL is the shortest LockConfig.TTL (the configuration checks
// agent.lock_ttl against it): etcd leases are whole seconds, and a shorter
// lease expires on an ordinary pause of the holder.
const MinLockTTL = 5 * time.Second

// leader holds the lock continuously: it campaigns, and while it holds the
// lock it exposes a context that ends when the lock is lost. Jobs run only
// under that context, so a job never outlives the lock it ran under.
//
// Why hold it rather than TryLock per run: with TryLock, two agents whose
// schedules fire on the same tick run one after the other (the second
// takes the lock the first has just released) and a tick yields two
// backups. Holding it gives one runner per cluster, a standby that takes
// over within TTL of the holder's death, and no lock traffic per run.
type leader struct {
	cfg LockConfig
	key string
	cli *clientv3.Client
	m   *metrics
	lg  *slog.Logger

	mu      sync.Mutex
	ctx     context.Context // non-nil while this agent holds the lock
	token   int64           // the fencing token of the term ctx belongs to
	changed chan struct{}   // closed and replaced when ctx changes
}

func newLeader(cfg LockConfig, cluster string, m *metrics, lg *slog.Logger) (*leader, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.TTL < MinLockTTL {
		return nil, fmt.Errorf("lock TTL %s: must be at least %s", cfg.TTL, MinLockTTL)
	}
	cli, err := clientv3.New(cfg.Etcd)
	if err != nil {
		return nil, fmt.Errorf("etcd client for the leader lock: %w", err)
	}
	return &leader{cfg: cfg, key: LockPrefix + cluster, cli: cli, m: m, lg: lg, changed: make(chan struct{})}, nil
}

// current returns the leadership context, or nil when this agent does not
// hold the lock.
func (l *leader) current() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx
}

// wait returns the leadership context as soon as this agent holds the
// lock, or nil when ctx ends first.
func (l *leader) wait(ctx context.Context) context.Context {
	lctx, _ := l.waitTerm(ctx)
	return lctx
}

// waitTerm is wait that also returns the term's fencing token: the
// create revision of this agent's election key. A later holder's key is
// created after this one's (while this agent held the lock, or after
// it), so tokens increase from holder to holder, and every term of one
// agent has a token of its own.
func (l *leader) waitTerm(ctx context.Context) (context.Context, int64) {
	for {
		l.mu.Lock()
		lctx, tok, ch := l.ctx, l.token, l.changed
		l.mu.Unlock()
		if lctx != nil && lctx.Err() == nil {
			return lctx, tok
		}
		select {
		case <-ctx.Done():
			return nil, 0
		case <-ch:
		}
	}
}

func (l *leader) set(ctx context.Context, token int64) {
	l.mu.Lock()
	l.ctx, l.token = ctx, token
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	if ctx != nil {
		l.m.leader.Set(1)
	} else {
		l.m.leader.Set(0)
	}
}

// run campaigns for the lock until ctx ends, holding it whenever it can.
// When ctx ends it resigns and revokes its lease, so that another agent
// takes over at once instead of after TTL.
func (l *leader) run(ctx context.Context, clock Clock) {
	delay := time.Second
	for ctx.Err() == nil {
		held, err := l.term(ctx)
		if ctx.Err() != nil {
			return
		}
		if held {
			delay = time.Second
		}
		l.lg.Warn("leader lock: lost or not reachable; trying again", "lock", l.key, "retry_in_seconds", logfield.Seconds(delay), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-clock.After(delay):
		}
		delay = min(delay*2, l.cfg.TTL)
	}
}

// term is one session: grant a lease, campaign, hold the lock until the
// session or ctx ends. held reports whether the lock was acquired.
func (l *leader) term(ctx context.Context) (held bool, err error) {
	ttl := int((l.cfg.TTL + time.Second - 1) / time.Second)
	gctx, cancel := context.WithTimeout(ctx, l.cfg.TTL)
	lease, err := l.cli.Grant(gctx, int64(ttl))
	cancel()
	if err != nil {
		return false, fmt.Errorf("grant lease: %w", err)
	}
	sess, err := concurrency.NewSession(l.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(ttl))
	if err != nil {
		l.revoke(lease.ID)
		return false, fmt.Errorf("keep lease alive: %w", err)
	}
	defer func() {
		sess.Orphan()
		l.revoke(lease.ID)
	}()
	el := concurrency.NewElection(sess, l.key)
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	stop := context.AfterFunc(sess.Ctx(), lcancel) // the session ended: the lock is gone
	defer stop()

	if err := el.Campaign(lctx, l.cfg.Identity); err != nil {
		return false, fmt.Errorf("campaign: %w", err)
	}
	// Campaign waits only for older holders; if our own lease expired
	// meanwhile, our key is gone and the lock is not ours.
	resp, err := l.cli.Get(lctx, el.Key())
	if err != nil {
		return false, fmt.Errorf("check lock: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(lease.ID) {
		return false, errors.New("lease expired while waiting for the lock")
	}
	l.set(lctx, resp.Kvs[0].CreateRevision)
	l.lg.Info("leader lock acquired: this agent runs the jobs", "lock", l.key, "identity", l.cfg.Identity, "token", resp.Kvs[0].CreateRevision)
	<-lctx.Done()
	l.set(nil, 0)
	if ctx.Err() == nil {
		return true, errors.New("session lost: the lease expired or etcd is unreachable")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if err := el.Resign(rctx); err != nil {
		l.lg.Warn("leader lock: resign failed; it expires with the lease", "lock", l.key, "err", err)
	} else {
		l.lg.Info("leader lock released", "lock", l.key)
	}
	return true, nil
}

func (l *leader) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.cli.Revoke(ctx, id) // if it fails, the lease expires after TTL
}

// holder returns the identity of the agent holding the lock ("" when none).
func (l *leader) holder(ctx context.Context) (string, error) {
	resp, err := l.cli.Get(ctx, l.key+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

func (l *leader) close() error { return l.cli.Close() }
