package seed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestKubernetes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts seed.Options
	}{
		{name: "defaults", opts: seed.Options{}},
		{name: "compact", opts: seed.Options{Compact: true, Seed: 7}},
		{name: "no overwrites or deletes", opts: seed.Options{Objects: 300, Overwrites: -1, Deletes: -1}},
		{name: "several overwrite rounds", opts: seed.Options{Objects: 200, Namespaces: 5, Overwrites: 450, Deletes: 195, MinValue: 10, MaxValue: 20, BatchSize: 7, Concurrency: 3, Compact: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := etcdtest.Start(t, etcdtest.Options{})
			cli := c.Client(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()

			res, err := seed.Kubernetes(ctx, cli, tt.opts)
			if err != nil {
				t.Fatalf("Kubernetes: %v", err)
			}
			o := tt.opts.WithDefaults()
			wantKeys := o.Objects - max(o.Deletes, 0)
			if o.Compact {
				wantKeys += 3
			}
			if res.Keys != wantKeys {
				t.Errorf("Result.Keys = %d, want %d", res.Keys, wantKeys)
			}

			resp, err := cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatalf("count keys: %v", err)
			}
			if resp.Count != int64(res.Keys) {
				t.Errorf("keys in etcd = %d, Result.Keys = %d", resp.Count, res.Keys)
			}
			if resp.Header.Revision != res.Revision {
				t.Errorf("revision in etcd = %d, Result.Revision = %d", resp.Header.Revision, res.Revision)
			}

			all, err := cli.Get(ctx, "/", clientv3.WithPrefix())
			if err != nil {
				t.Fatalf("get keys: %v", err)
			}
			var valueBytes int64
			for _, kv := range all.Kvs {
				valueBytes += int64(len(kv.Value))
				if n := len(kv.Value); n < o.MinValue || n > o.MaxValue {
					t.Errorf("value of %s has %d bytes, want %d..%d", kv.Key, n, o.MinValue, o.MaxValue)
				}
			}
			if valueBytes != res.ValueBytes {
				t.Errorf("value bytes in etcd = %d, Result.ValueBytes = %d", valueBytes, res.ValueBytes)
			}
			ns, err := cli.Get(ctx, "/registry/namespaces/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatalf("count namespaces: %v", err)
			}
			if ns.Count != int64(o.Namespaces) {
				t.Errorf("namespaces = %d, want %d", ns.Count, o.Namespaces)
			}

			if !o.Compact {
				if res.CompactRevision != 0 {
					t.Errorf("CompactRevision = %d without Compact, want 0", res.CompactRevision)
				}
				return
			}
			if res.CompactRevision <= 1 || res.Revision <= res.CompactRevision {
				t.Errorf("Revision, CompactRevision = %d, %d; want 1 < compact revision < revision", res.Revision, res.CompactRevision)
			}
			_, err = cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithRev(res.CompactRevision-1))
			if !errors.Is(rpctypes.Error(err), rpctypes.ErrCompacted) {
				t.Errorf("get below the compact revision: err = %v, want %v", err, rpctypes.ErrCompacted)
			}
		})
	}
}

// dump returns all keys and values under / as a map.
func dump(t *testing.T, cli *clientv3.Client) map[string]string {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get keys: %v", err)
	}
	m := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = string(kv.Value)
	}
	return m
}

func TestKubernetesDeterministic(t *testing.T) {
	t.Parallel()
	opts := seed.Options{Objects: 500, Seed: 99, Compact: true}
	var dumps []map[string]string
	for i, conc := range []int{1, 4} {
		c := etcdtest.Start(t, etcdtest.Options{})
		cli := c.Client(t)
		o := opts
		o.Concurrency = conc
		if _, err := seed.Kubernetes(t.Context(), cli, o); err != nil {
			t.Fatalf("cluster %d: Kubernetes: %v", i, err)
		}
		dumps = append(dumps, dump(t, cli))
	}
	if len(dumps[0]) == 0 {
		t.Fatal("no keys written")
	}
	if diff := cmp.Diff(dumps[0], dumps[1]); diff != "" {
		t.Errorf("same seed, different data (-first +second):\n%.2000s", diff)
	}

	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	o := opts
	o.Seed++
	if _, err := seed.Kubernetes(t.Context(), cli, o); err != nil {
		t.Fatalf("Kubernetes: %v", err)
	}
	other := dump(t, cli)
	same := 0
	for k, v := range other {
		if dumps[0][k] == v {
			same++
		}
	}
	if same > len(other)/10 {
		t.Errorf("another seed gave %d of %d identical keys and values", same, len(other))
	}
}

func TestKubernetesRewrite(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	opts := seed.Options{Objects: 300, Seed: 3}
	first, err := seed.Kubernetes(t.Context(), cli, opts)
	if err != nil {
		t.Fatalf("first Kubernetes: %v", err)
	}
	before := dump(t, cli)
	second, err := seed.Kubernetes(t.Context(), cli, opts)
	if err != nil {
		t.Fatalf("second Kubernetes: %v", err)
	}
	if second.Revision <= first.Revision {
		t.Errorf("revision after second run = %d, want above %d", second.Revision, first.Revision)
	}
	// Deleted keys are created and deleted again: same live data.
	if diff := cmp.Diff(before, dump(t, cli)); diff != "" {
		t.Errorf("second run with the same seed changed the data (-before +after):\n%.2000s", diff)
	}
}

func TestKubernetesCanceled(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := seed.Kubernetes(ctx, cli, seed.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Kubernetes with a canceled context: err = %v, want %v", err, context.Canceled)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    seed.Options
		wantErr bool
	}{
		{name: "defaults", opts: seed.Options{}},
		{name: "few objects", opts: seed.Options{Objects: 5}},
		{name: "min only", opts: seed.Options{MinValue: 8000}},
		{name: "negative objects", opts: seed.Options{Objects: -1}, wantErr: true},
		{name: "more namespaces than objects", opts: seed.Options{Objects: 10, Namespaces: 11}, wantErr: true},
		{name: "min above max", opts: seed.Options{MinValue: 10, MaxValue: 5}, wantErr: true},
		{name: "value too large", opts: seed.Options{MaxValue: 2 << 20}, wantErr: true},
		{name: "too many deletes", opts: seed.Options{Objects: 100, Namespaces: 10, Deletes: 91}, wantErr: true},
		{name: "negative batch", opts: seed.Options{BatchSize: -1}, wantErr: true},
		{name: "negative concurrency", opts: seed.Options{Concurrency: -2}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.opts.WithDefaults().Validate()
			if (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := seed.Options{}.WithDefaults()
	want := seed.Options{Objects: 2000, Namespaces: 20, MinValue: 1024, MaxValue: 4096, Overwrites: 200, Deletes: 40, BatchSize: 64, Concurrency: 4}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("WithDefaults() mismatch (-got +want):\n%s", diff)
	}
}

// TestKubernetesLarger writes about 80 MiB, enough to see batching and
// concurrency at work; skipped with -short and under the race detector.
func TestKubernetesLarger(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("writes about 80 MiB; skipped with -short and -race")
	}
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	start := time.Now()
	res, err := seed.Kubernetes(t.Context(), cli, seed.Options{Objects: 20000, MinValue: 3072, MaxValue: 5120, Compact: true})
	if err != nil {
		t.Fatalf("Kubernetes: %v", err)
	}
	elapsed := time.Since(start)
	t.Logf("%d keys, %d MiB of values, revision %d, in %v (%.1f MiB/s)",
		res.Keys, res.ValueBytes>>20, res.Revision, elapsed, float64(res.ValueBytes)/(1<<20)/elapsed.Seconds())
	resp, err := cli.Get(t.Context(), "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count keys: %v", err)
	}
	if resp.Count != int64(res.Keys) {
		t.Errorf("keys in etcd = %d, Result.Keys = %d", resp.Count, res.Keys)
	}
}
