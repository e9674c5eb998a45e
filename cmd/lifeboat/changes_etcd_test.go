package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestLogRealEtcd writes change segments from a real etcd's watch after
// a real backup (what capture does, without the capture job): a
// namespace shop with a deployment and a pod (one two-put transaction,
// one key on a lease), then the namespace marked terminating and
// everything deleted. lifeboat log finds the revision before the
// delete, verify --changes passes, and list shows the window.
func TestLogRealEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	b := e.backups(t)
	l, err := b.List(t.Context())
	if err != nil || len(l.Backups) != 1 {
		t.Fatalf("backups: %v %v", l, err)
	}
	m := l.Backups[0].Manifest
	cli := e.c.Client(t)
	ctx := t.Context()
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cli.Put(ctx, "/registry/namespaces/shop", `{"phase":"Active"}`))
	must(cli.Txn(ctx).Then(clientv3.OpPut("/registry/deployments/shop/web", strings.Repeat("d", 1500)),
		clientv3.OpPut("/registry/pods/shop/web-1", strings.Repeat("p", 3000), clientv3.WithLease(lease.ID))).Commit())
	must(cli.Put(ctx, "/registry/namespaces/shop", `{"phase":"Terminating"}`))
	must(cli.Delete(ctx, "/registry/pods/shop/web-1"))
	must(cli.Delete(ctx, "/registry/deployments/shop/web"))
	last, err := cli.Delete(ctx, "/registry/namespaces/shop")
	must(last, err)
	end := last.Header.Revision

	// The whole keyspace from the snapshot's revision + 1, grouped by
	// revision, in two segments.
	var revs []repository.Revision
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for resp := range cli.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(m.Revision+1)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			kv := ev.Kv
			if len(revs) == 0 || revs[len(revs)-1].Revision != kv.ModRevision {
				revs = append(revs, repository.Revision{Revision: kv.ModRevision, Received: time.Now().UTC()})
			}
			op := repository.Op{Key: kv.Key}
			if ev.Type == clientv3.EventTypeDelete {
				op.Delete = true
			} else {
				op.Value, op.Lease, op.CreateRevision, op.Version = kv.Value, kv.Lease, kv.CreateRevision, kv.Version
			}
			revs[len(revs)-1].Ops = append(revs[len(revs)-1].Ops, op)
		}
		if len(revs) > 0 && revs[len(revs)-1].Revision == end {
			cancel()
		}
	}
	if len(revs) == 0 || revs[len(revs)-1].Revision != end {
		t.Fatalf("watched %d revisions, not through %d", len(revs), end)
	}
	putTestGeneration(t, b, m, revs, []int{3, len(revs) - 3}, repository.Encoding{Compression: "zstd"})

	code, out, errOut := runCLI(t, nil, append([]string{"log", "/registry/namespaces/shop", "-o", "json"}, e.args...)...)
	if code != 0 {
		t.Fatalf("log: exit %d: %s", code, errOut)
	}
	var got []loggedChange
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 3 {
		t.Fatalf("log: %v: %s", err, out)
	}
	if got[2].Op != "delete" || got[2].Revision != end || got[1].Op != "put" || got[1].Version != 2 {
		t.Errorf("namespace changes: %+v", got)
	}
	// The revision to restore to: just before the namespace was marked
	// terminating.
	if before := got[1].Revision - 1; before != got[0].Revision+1 {
		t.Errorf("revision before the delete %d, want the transaction's %d", before, got[0].Revision+1)
	}
	code, out, _ = runCLI(t, nil, append([]string{"log", "/registry/pods/", "-o", "json"}, e.args...)...)
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 2 || got[0].Lease != int64(lease.ID) || got[0].ValueSize != 3000 {
		t.Errorf("pod changes: exit %d: %+v", code, got)
	}

	code, out, errOut = runCLI(t, nil, append([]string{"verify", "--changes"}, e.args...)...)
	if code != 0 || !strings.Contains(out, "is good") {
		t.Errorf("verify --changes: exit %d: %s%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, nil, append([]string{"list"}, e.args...)...)
	if code != 0 || !strings.Contains(out, m.ID) || !strings.Contains(out, " open") {
		t.Errorf("list: exit %d: %s", code, out)
	}
}
