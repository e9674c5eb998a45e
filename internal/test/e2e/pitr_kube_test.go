package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
)

var replayedRE = regexp.MustCompile(`(?m)^replayed (\d+) revisions .* the database is at revision (\d+)$`)

// TestKubePointInTimeRestoreNamespace is the 3 a.m. point-in-time restore
// with a real Kubernetes writer (docs/pitr.md, "Restoring to just before a
// mistake"): `lifeboat snapshot` stores a backup, `lifeboat agent`
// captures continuously, and only then does kube-apiserver write a
// namespace with a ConfigMap, a Secret, a Deployment and a custom object:
// none of them is in any snapshot. Capture makes them durable, the
// namespace is deleted through the API and capture makes that durable too.
// `lifeboat log /registry/namespaces/shop` finds the revision of the first
// step of the delete; `lifeboat restore --to-revision` that revision − 1
// with --bump-revision and --mark-compacted writes a new data dir, the
// etcd binary boots on it, and a new kube-apiserver on that etcd serves
// the namespace and every object in it again, with the same uids, contents
// and resourceVersions, from quorum reads and from its watch cache, and
// takes new writes at revisions past R + the bump.
//
// R is the revision before the namespace's first change after its
// creation, the PUT that set its deletionTimestamp (what `kubectl delete
// namespace` does first), not the revision before the namespace key's
// DELETE: at that one the namespace is Terminating and already empty.
// The test checks it: that PUT is the namespace's version 2, every DELETE
// of an object in the namespace comes after it, and every object was
// created at or before R.
func TestKubePointInTimeRestoreNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("real kube-apiserver and etcd binary")
	}
	lb := newLifeboat(t)
	etcdBin := etcdtest.Current.Need(t)
	kubeBin := kubetest.NeedBinary(t)
	ctx := t.Context()

	src := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := src.Client(t)
	api := kubetest.Start(t, kubetest.Options{Binary: kubeBin, EtcdServers: src.Endpoints()})
	c := api.Client()

	_, snapRev := lb.snapshot(t, src.Endpoints()[0])
	// A write outside Kubernetes' keys: capture's own anchor snapshot is
	// then at another revision (another backup id) than this one.
	if _, err := cli.Put(ctx, "/e2e/after-snapshot", "x"); err != nil {
		t.Fatal(err)
	}
	capt := lb.capture(t, src.Endpoints())
	anchor := capt.waitCaptured(t, currentRevision(t, cli))
	t.Logf("capture generation %s from revision %d (the snapshot of `lifeboat snapshot` is at %d)", anchor.Generation, anchor.FromRevision, snapRev)

	shop := writeShop(t, c, "shop")
	for _, o := range shop {
		if rv, _ := strconv.ParseInt(o.createdRV, 10, 64); rv <= anchor.FromRevision {
			t.Fatalf("%s created at revision %d, not after the anchor snapshot at %d", o, rv, anchor.FromRevision)
		}
	}
	capt.waitCaptured(t, currentRevision(t, cli))

	contents := []kubetest.Resource{kubetest.ConfigMaps, kubetest.Secrets, kubetest.Deployments, widgets}
	if err := c.DeleteNamespace(ctx, "shop", contents...); err != nil {
		t.Fatal(err)
	}
	for _, o := range shop {
		if _, err := c.Get(ctx, o.r, o.ns, o.name); !kubetest.IsNotFound(err) {
			t.Fatalf("%s after the namespace was deleted: %v, want not found", o, err)
		}
	}
	captured := capt.waitCaptured(t, currentRevision(t, cli))
	// The old cluster is gone, as in a real loss: its API server and the
	// capture of it too.
	capt.stop(t)
	api.Stop()

	r := revisionBeforeDelete(t, lb, shop)
	if r <= anchor.FromRevision || r > captured.Through {
		t.Fatalf("R = %d is outside the captured window %d-%d", r, anchor.FromRevision, captured.Through)
	}

	flags, out := lb.restoreOut(t, "--to-revision", strconv.FormatInt(r, 10), "--bump-revision", strconv.Itoa(bump), "--mark-compacted")
	m := replayedRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the restore to revision %d printed no replay:\n%s", r, out)
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n != r-anchor.FromRevision || m[2] != strconv.FormatInt(r, 10) {
		t.Errorf("the restore replayed %s revisions to revision %s, want %d to %d (from the anchor at %d):\n%s", m[1], m[2], r-anchor.FromRevision, r, anchor.FromRevision, out)
	}
	restored := etcdtest.StartRestored(t, etcdBin, flags)
	api2 := kubetest.Start(t, kubetest.Options{Binary: kubeBin, EtcdServers: []string{restored.ClientURL}})
	c2 := api2.Client()
	if err := c2.WaitCRD(ctx, "widgets."+shopGroup, widgets); err != nil {
		t.Fatal(err)
	}
	checkBack(t, c2, shop)
	checkWrites(t, c2, r+bump, fmt.Sprintf("R = %d + the bump", r))
}

// revisionBeforeDelete finds, with `lifeboat log`, the revision just
// before the delete of namespace shop began (the PUT that set its
// deletionTimestamp), checks it against the log of every key (see
// TestKubePointInTimeRestoreNamespace) and returns it.
func revisionBeforeDelete(t *testing.T, lb *lifeboat, shop []kubeObject) int64 {
	t.Helper()
	ns := lb.log(t, "/registry/namespaces/shop")
	created, err := strconv.ParseInt(shop[0].createdRV, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var marked, deleted *change
	for i := range ns {
		switch ch := &ns[i]; {
		case ch.Key != "/registry/namespaces/shop":
			t.Fatalf("lifeboat log /registry/namespaces/shop printed %s", ch.Key)
		case ch.Revision > created && marked == nil:
			marked = ch
		case ch.Op == "delete":
			deleted = ch
		}
	}
	if marked == nil || deleted == nil || marked.Op != "put" || marked.Version != 2 || marked.CreateRevision != created {
		t.Fatalf("lifeboat log of the namespace: %+v\nwant its creation at %d, a PUT of version 2 (Terminating), then a DELETE", ns, created)
	}
	r := marked.Revision - 1
	t.Logf("namespace shop: created at %d, marked for deletion at %d, deleted at %d: R = %d", created, marked.Revision, deleted.Revision, r)

	objects := 0
	for _, ch := range lb.log(t, "/registry/") {
		if !strings.Contains(ch.Key, "/shop/") {
			continue
		}
		if ch.Op == "delete" {
			objects++
			if ch.Revision <= marked.Revision || ch.Revision >= deleted.Revision {
				t.Errorf("%s deleted at %d, want between the namespace's mark %d and its delete %d", ch.Key, ch.Revision, marked.Revision, deleted.Revision)
			}
		}
	}
	if objects != len(shop)-1 {
		t.Errorf("lifeboat log shows %d deletes of objects in shop, want %d", objects, len(shop)-1)
	}
	for _, o := range shop {
		if rv, _ := strconv.ParseInt(o.createdRV, 10, 64); rv > r {
			t.Errorf("%s created at %d, after R = %d", o, rv, r)
		}
	}
	return r
}
