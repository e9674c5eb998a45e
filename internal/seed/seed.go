package seed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// maxTxnOps is etcd's default --max-txn-ops.
	maxTxnOps = 128
	// maxTxnValueBytes keeps a transaction's values well under etcd's default
	// 1.5 MiB request limit, leaving room for keys and framing.
	maxTxnValueBytes = 1 << 20
	// maxValue is the largest value size Options accept.
	maxValue = maxTxnValueBytes
	// extraKeys is how many keys are written after the compaction so that the
	// revision is above the compact revision.
	extraKeys = 3
	// retries bounds retries of a transaction that failed with an error etcd
	// reports under load or during a leader change.
	retries = 8
)

// Options describe the data Kubernetes writes. Zero fields take the defaults
// of WithDefaults.
type Options struct {
	// Objects is the number of keys created, namespace keys included
	// (default 2000).
	Objects int
	// Namespaces is the number of namespaces; each is a key
	// /registry/namespaces/<ns> that is never deleted (default 20, at most
	// Objects).
	Namespaces int
	// MinValue and MaxValue bound value sizes in bytes (default 1024..4096;
	// MaxValue at most 1 MiB).
	MinValue, MaxValue int
	// Overwrites is the number of updates of existing keys (default
	// Objects/10; negative for none). Beyond Objects, keys are updated again
	// in further rounds.
	Overwrites int
	// Deletes is the number of keys deleted, never namespaces (default
	// Objects/50; negative for none).
	Deletes int
	// Compact compacts at the revision reached after overwrites and deletes,
	// then writes a few more keys so that the final revision is above the
	// compact revision.
	Compact bool
	// Seed seeds the generator: the same seed gives the same keys and values.
	Seed int64
	// BatchSize is the number of puts or deletes per transaction (default
	// 64). It is lowered to etcd's default limit of 128 operations and so
	// that BatchSize*MaxValue stays under 1 MiB.
	BatchSize int
	// Concurrency is the number of transactions in flight (default 4).
	Concurrency int
}

// Result describes what Kubernetes left in etcd.
type Result struct {
	// Keys is the number of live keys written by Kubernetes.
	Keys int
	// Revision is the cluster's revision after the last write.
	Revision int64
	// CompactRevision is the revision compacted at, 0 without Options.Compact.
	CompactRevision int64
	// ValueBytes is the total size of the values of the live keys.
	ValueBytes int64
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Objects == 0 {
		o.Objects = 2000
	}
	if o.Namespaces == 0 {
		o.Namespaces = min(20, max(o.Objects, 1))
	}
	if o.MinValue == 0 && o.MaxValue == 0 {
		o.MinValue, o.MaxValue = 1024, 4096
	} else if o.MaxValue == 0 {
		o.MaxValue = max(o.MinValue, 4096)
	}
	if o.Overwrites == 0 {
		o.Overwrites = o.Objects / 10
	}
	if o.Deletes == 0 {
		o.Deletes = o.Objects / 50
	}
	if o.BatchSize == 0 {
		o.BatchSize = 64
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	return o
}

// Validate reports the first option that is out of range.
func (o Options) Validate() error {
	switch {
	case o.Objects < 1:
		return fmt.Errorf("objects %d: must be positive", o.Objects)
	case o.Namespaces < 1 || o.Namespaces > o.Objects:
		return fmt.Errorf("namespaces %d: must be between 1 and objects (%d)", o.Namespaces, o.Objects)
	case o.MinValue < 0 || o.MinValue > o.MaxValue:
		return fmt.Errorf("min value %d: must be between 0 and max value (%d)", o.MinValue, o.MaxValue)
	case o.MaxValue > maxValue:
		return fmt.Errorf("max value %d: must be at most %d", o.MaxValue, maxValue)
	case o.Deletes > o.Objects-o.Namespaces:
		return fmt.Errorf("deletes %d: must be at most objects minus namespaces (%d)", o.Deletes, o.Objects-o.Namespaces)
	case o.BatchSize < 1:
		return fmt.Errorf("batch size %d: must be positive", o.BatchSize)
	case o.Concurrency < 1:
		return fmt.Errorf("concurrency %d: must be positive", o.Concurrency)
	}
	return nil
}

// batchSize is o.BatchSize lowered to what etcd accepts in one transaction.
func (o Options) batchSize() int {
	return max(1, min(o.BatchSize, maxTxnOps, maxTxnValueBytes/max(o.MaxValue, 1)))
}

// write is one put of version of objs[idx], or its delete.
type write struct {
	idx     int
	version int
	del     bool
}

// Kubernetes writes Kubernetes-like keys through cli as opts describe: it
// creates Objects keys, overwrites, deletes, optionally compacts and writes a
// few keys after that. Keys that exist already are overwritten; other keys
// are left alone.
func Kubernetes(ctx context.Context, cli *clientv3.Client, opts Options) (Result, error) {
	o := opts.WithDefaults()
	if err := o.Validate(); err != nil {
		return Result{}, fmt.Errorf("seed options: %w", err)
	}
	nExtra := 0
	if o.Compact {
		nExtra = extraKeys
	}
	objs := objects(o.Seed, o.Objects+nExtra, o.Namespaces)
	w := &writer{cli: cli, opts: o, objs: objs, sizes: make([]int, len(objs)), live: make([]bool, len(objs))}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed))

	if err := w.create(ctx, 0, o.Objects); err != nil {
		return Result{}, fmt.Errorf("create keys: %w", err)
	}
	if err := w.overwrite(ctx, rng.Perm(o.Objects)); err != nil {
		return Result{}, err
	}
	if o.Deletes > 0 {
		// Namespaces occupy the first indexes and are never deleted.
		if err := w.delete(ctx, rng.Perm(o.Objects - o.Namespaces)[:o.Deletes]); err != nil {
			return Result{}, fmt.Errorf("delete keys: %w", err)
		}
	}
	var res Result
	if o.Compact {
		rev, err := w.compact(ctx)
		if err != nil {
			return Result{}, err
		}
		res.CompactRevision = rev
		if err := w.create(ctx, o.Objects, nExtra); err != nil {
			return Result{}, fmt.Errorf("write keys after compaction: %w", err)
		}
	}
	return w.result(ctx, res)
}

// create writes the n keys from index first.
func (w *writer) create(ctx context.Context, first, n int) error {
	ws := make([]write, n)
	for j := range ws {
		ws[j] = write{idx: first + j}
	}
	return w.run(ctx, ws)
}

// overwrite makes opts.Overwrites updates of the keys in the order perm
// gives. It overwrites distinct keys per round so that concurrent writers
// never race on one key and the final values are deterministic.
func (w *writer) overwrite(ctx context.Context, perm []int) error {
	o := w.opts
	for done, round := 0, 1; done < o.Overwrites; round++ {
		n := min(o.Overwrites-done, o.Objects)
		ws := make([]write, n)
		for j := range ws {
			ws[j] = write{idx: perm[j], version: round}
		}
		if err := w.run(ctx, ws); err != nil {
			return fmt.Errorf("overwrite keys (round %d): %w", round, err)
		}
		done += n
	}
	return nil
}

// delete deletes the keys past the namespaces at the offsets victims.
func (w *writer) delete(ctx context.Context, victims []int) error {
	ws := make([]write, len(victims))
	for j, v := range victims {
		ws[j] = write{idx: w.opts.Namespaces + v, del: true}
	}
	return w.run(ctx, ws)
}

// compact compacts at the current revision and returns it.
func (w *writer) compact(ctx context.Context) (int64, error) {
	resp, err := w.cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("get revision before compaction: %w", err)
	}
	rev := resp.Header.Revision
	if _, err := w.cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("compact at revision %d: %w", rev, err)
	}
	return rev, nil
}

// result is res with the final revision and the live keys and their
// value bytes.
func (w *writer) result(ctx context.Context, res Result) (Result, error) {
	resp, err := w.cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return Result{}, fmt.Errorf("get final revision: %w", err)
	}
	res.Revision = resp.Header.Revision
	for i, ok := range w.live {
		if ok {
			res.Keys++
			res.ValueBytes += int64(w.sizes[i])
		}
	}
	return res, nil
}

// writer applies writes in batched transactions with concurrent workers.
type writer struct {
	cli  *clientv3.Client
	opts Options
	objs []object

	mu    sync.Mutex
	sizes []int  // value size of each key's latest put
	live  []bool // whether the key exists
}

// run applies ws with opts.Concurrency workers. The writes in ws must touch
// distinct keys.
func (w *writer) run(ctx context.Context, ws []write) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	batches := make(chan []write)
	var wg sync.WaitGroup
	for range w.opts.Concurrency {
		wg.Go(func() {
			g := newGenerator()
			for b := range batches {
				if err := w.apply(ctx, g, b); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	bs := w.opts.batchSize()
feed:
	for start := 0; start < len(ws); start += bs {
		select {
		case batches <- ws[start:min(start+bs, len(ws))]:
		case <-ctx.Done():
			break feed
		}
	}
	close(batches)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// apply writes one batch as a transaction, retrying errors etcd returns
// under load or while electing a leader. Retrying is safe: a repeated put
// writes the same value and a repeated delete deletes nothing.
func (w *writer) apply(ctx context.Context, g *generator, b []write) error {
	ops := make([]clientv3.Op, len(b))
	sizes := make([]int, len(b))
	for j, wr := range b {
		obj := &w.objs[wr.idx]
		if wr.del {
			ops[j] = clientv3.OpDelete(obj.key)
			continue
		}
		v := g.value(w.opts, obj, wr.idx, wr.version)
		sizes[j] = len(v)
		ops[j] = clientv3.OpPut(obj.key, string(v))
	}
	var err error
	for attempt := range retries {
		_, err = w.cli.Txn(ctx).Then(ops...).Commit()
		if err == nil || !retryable(err) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("txn of %d ops from %s: %w", len(ops), w.objs[b[0].idx].key, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for j, wr := range b {
		w.live[wr.idx] = !wr.del
		if !wr.del {
			w.sizes[wr.idx] = sizes[j]
		}
	}
	return nil
}

func retryable(err error) bool {
	switch rpctypes.Error(err) {
	case rpctypes.ErrTooManyRequests, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader:
		return true
	}
	return false
}
