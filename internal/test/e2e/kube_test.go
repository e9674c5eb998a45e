package e2e

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
)

// bump is the --bump-revision of the restores: past every revision the
// source had, so that a watcher of the old cluster sees no revision twice.
const bump = 1_000_000

// TestKubeRestoreNamespace is the 3 a.m. restore with a real Kubernetes
// writer: kube-apiserver writes a namespace with a ConfigMap, a Secret, a
// Deployment and a custom object into etcd; `lifeboat snapshot` stores a
// backup; the namespace is deleted through the API; `lifeboat restore
// --bump-revision --mark-compacted` writes a new data dir, the etcd binary
// boots on it with the flags the restore printed, and a new kube-apiserver
// on that etcd serves the namespace and every object in it again, with the
// same uids and contents, from quorum reads and from its watch cache, and
// takes new writes at revisions past the bump.
func TestKubeRestoreNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("real kube-apiserver and etcd binary")
	}
	lb := newLifeboat(t)
	etcdBin := etcdtest.Current.Need(t)
	kubeBin := kubetest.NeedBinary(t)
	ctx := t.Context()

	src := etcdtest.Start(t, etcdtest.Options{Members: 1})
	api := kubetest.Start(t, kubetest.Options{Binary: kubeBin, EtcdServers: src.Endpoints()})
	c := api.Client()
	shop := writeShop(t, c, "shop")

	id, snapRev := lb.snapshot(t, src.Endpoints()[0])

	contents := []kubetest.Resource{kubetest.ConfigMaps, kubetest.Secrets, kubetest.Deployments, widgets}
	if err := c.DeleteNamespace(ctx, "shop", contents...); err != nil {
		t.Fatal(err)
	}
	for _, o := range shop {
		if _, err := c.Get(ctx, o.r, o.ns, o.name); !kubetest.IsNotFound(err) {
			t.Fatalf("%s after the namespace was deleted: %v, want not found", o, err)
		}
	}
	// The old cluster is gone, as in a real loss: its API server too.
	api.Stop()

	flags := lb.restore(t, id, "--bump-revision", strconv.Itoa(bump), "--mark-compacted")
	restored := etcdtest.StartRestored(t, etcdBin, flags)
	api2 := kubetest.Start(t, kubetest.Options{Binary: kubeBin, EtcdServers: []string{restored.ClientURL}})
	c2 := api2.Client()
	// As after any start, the custom resource is served once its CRD is
	// read back and established.
	if err := c2.WaitCRD(ctx, "widgets."+shopGroup, widgets); err != nil {
		t.Fatal(err)
	}

	checkBack(t, c2, shop)

	checkWrites(t, c2, snapRev+bump, fmt.Sprintf("the backup's revision %d + the bump", snapRev))
}

// checkWrites checks that the restored cluster takes writes at revisions
// past floor (what is written after the number, e.g. "R + the bump") and
// that the watch cache follows them: the API server's watch on the
// restored etcd works.
func checkWrites(t *testing.T, c *kubetest.Client, floor int64, what string) {
	t.Helper()
	ctx := t.Context()
	cm, err := c.Create(ctx, kubetest.ConfigMaps, "shop", kubetest.NewConfigMap("shop", "after-restore", map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseInt(kubetest.Meta(cm, "resourceVersion"), 10, 64)
	if err != nil || rv <= floor {
		t.Errorf("resourceVersion of a write after the restore: %d (%v), want > %d (%s)", rv, err, floor, what)
	}
	if err := c.Poll(ctx, func() (bool, error) {
		items, err := c.List(ctx, kubetest.ConfigMaps, "shop", true)
		return slices.ContainsFunc(items, func(o kubetest.Object) bool { return kubetest.Name(o) == "after-restore" }), err
	}); err != nil {
		t.Fatalf("the watch cache of the restored API server did not see a new ConfigMap: %v", err)
	}
}

// checkBack checks that every object of want is served by c with its uid
// and contents, by a quorum get and in a list from the watch cache.
func checkBack(t *testing.T, c *kubetest.Client, want []kubeObject) {
	t.Helper()
	ctx := t.Context()
	for _, o := range want {
		got, err := c.Get(ctx, o.r, o.ns, o.name)
		if err != nil {
			t.Errorf("%s after the restore: %v", o, err)
			continue
		}
		if uid := kubetest.Meta(got, "uid"); uid != o.uid {
			t.Errorf("%s: uid %s after the restore, want %s", o, uid, o.uid)
		}
		if rv := kubetest.Meta(got, "resourceVersion"); rv != o.createdRV {
			t.Errorf("%s: resourceVersion %s after the restore, want %s (its mod revision is kept)", o, rv, o.createdRV)
		}
		if kubetest.Meta(got, "deletionTimestamp") != "" {
			t.Errorf("%s is being deleted after the restore", o)
		}
		if o.field != "" && !reflect.DeepEqual(got[o.field], o.want) {
			t.Errorf("%s: %s after the restore:\n%v\nwant:\n%v", o, o.field, got[o.field], o.want)
		}
		items, err := c.List(ctx, o.r, o.ns, true)
		if err != nil {
			t.Errorf("cached list of %s: %v", o.r.Plural, err)
			continue
		}
		if !slices.ContainsFunc(items, func(it kubetest.Object) bool {
			return kubetest.Name(it) == o.name && kubetest.Meta(it, "uid") == o.uid
		}) {
			t.Errorf("%s is not in the cached list of %s after the restore", o, o.r.Plural)
		}
	}
}
