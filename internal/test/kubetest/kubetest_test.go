package kubetest_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
)

// TestServer starts kube-apiserver on an in-process etcd with Secrets
// encrypted at rest (aescbc) and checks what the tests of the other
// packages rely on: every kind the client makes round-trips through the
// API, the values in etcd are what kube-apiserver writes (protobuf in the
// k8s\0 envelope for built-in kinds, JSON for custom objects, the aescbc
// prefix for Secrets), and DeleteNamespace removes the namespace and all in
// it.
func TestServer(t *testing.T) {
	if testing.Short() {
		t.Skip("real kube-apiserver")
	}
	bin := kubetest.NeedBinary(t)
	etcd := etcdtest.Start(t, etcdtest.Options{Members: 1})
	key := bytes.Repeat([]byte{7}, 32)
	api := kubetest.Start(t, kubetest.Options{
		Binary:           bin,
		EtcdServers:      etcd.Endpoints(),
		EncryptionConfig: kubetest.AESCBCConfig("key1", key),
	})
	ctx := t.Context()
	c := api.Client()

	// An unknown token is refused: the server does not let anyone in.
	bad := api.Client()
	bad.Token = "wrong"
	if _, err := bad.List(ctx, kubetest.Namespaces, "", false); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("list with a wrong token: %v, want 401", err)
	}

	const ns, group = "shop", "stable.example.com"
	widgets := kubetest.CRDResource(group, "widgets")
	mustCreate(t, c, kubetest.Namespaces, "", kubetest.NewNamespace(ns))
	mustCreate(t, c, kubetest.ConfigMaps, ns, kubetest.NewConfigMap(ns, "config", map[string]string{"color": "blue"}))
	mustCreate(t, c, kubetest.Secrets, ns, kubetest.NewSecret(ns, "creds", map[string][]byte{"password": []byte("hunter2")}))
	mustCreate(t, c, kubetest.Deployments, ns, kubetest.NewDeployment(ns, "web", "registry.k8s.io/pause:3.10", 2))
	mustCreate(t, c, kubetest.CRDs, "", kubetest.NewCRD(group, "Widget", "widgets"))
	if err := c.WaitCRD(ctx, "widgets."+group, widgets); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, widgets, ns, kubetest.NewCustom(group, "Widget", ns, "w1", kubetest.Object{"size": "large"}))

	if _, err := c.Create(ctx, kubetest.ConfigMaps, ns, kubetest.NewConfigMap(ns, "config", nil)); !kubetest.IsConflict(err) {
		t.Errorf("second create of a ConfigMap: %v, want a conflict", err)
	}
	cm, err := c.Get(ctx, kubetest.ConfigMaps, ns, "config")
	if err != nil || cm["data"].(map[string]any)["color"] != "blue" {
		t.Errorf("get ConfigMap: %v %v", cm, err)
	}
	sec, err := c.Get(ctx, kubetest.Secrets, ns, "creds")
	if err != nil || sec["data"].(map[string]any)["password"] != "aHVudGVyMg==" {
		t.Errorf("get Secret: %v %v", sec, err)
	}
	w, err := c.Get(ctx, widgets, ns, "w1")
	if err != nil || w["spec"].(map[string]any)["size"] != "large" {
		t.Errorf("get Widget: %v %v", w, err)
	}
	if items, err := c.List(ctx, kubetest.Deployments, ns, true); err != nil || len(items) != 1 || kubetest.Name(items[0]) != "web" {
		t.Errorf("cached list of Deployments: %v %v", items, err)
	}

	raw := func(key string) []byte {
		t.Helper()
		resp, err := etcd.Client(t).Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("etcd get %s: %v %v", key, resp, err)
		}
		return resp.Kvs[0].Value
	}
	for key, prefix := range map[string]string{
		"/registry/configmaps/shop/config":             "k8s\x00",
		"/registry/deployments/shop/web":               "k8s\x00",
		"/registry/secrets/shop/creds":                 "k8s:enc:aescbc:v1:key1:",
		"/registry/stable.example.com/widgets/shop/w1": "{",
	} {
		if v := raw(key); !bytes.HasPrefix(v, []byte(prefix)) {
			t.Errorf("etcd value of %s starts %q, want %q", key, v[:min(len(v), 24)], prefix)
		}
	}
	if v := raw("/registry/secrets/shop/creds"); bytes.Contains(v, []byte("hunter2")) {
		t.Error("the Secret is in etcd in clear")
	}

	if err := c.Delete(ctx, kubetest.ConfigMaps, ns, "config"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, kubetest.ConfigMaps, ns, "config"); !kubetest.IsNotFound(err) {
		t.Errorf("get of a deleted ConfigMap: %v, want not found", err)
	}
	if err := c.DeleteNamespace(ctx, ns, kubetest.ConfigMaps, kubetest.Secrets, kubetest.Deployments, widgets); err != nil {
		t.Fatal(err)
	}
	resp, err := etcd.Client(t).Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); strings.Contains(k, "/shop/") || strings.HasSuffix(k, "/shop") {
			t.Errorf("after DeleteNamespace etcd still holds %s", k)
		}
	}

	api.Stop()
	api.Stop() // idempotent
	if _, err := c.List(context.Background(), kubetest.Namespaces, "", false); err == nil {
		t.Error("the server answers after Stop")
	}
}

func mustCreate(t *testing.T, c *kubetest.Client, r kubetest.Resource, ns string, obj kubetest.Object) kubetest.Object {
	t.Helper()
	got, err := c.Create(t.Context(), r, ns, obj)
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", r.Plural, ns, kubetest.Name(obj), err)
	}
	return got
}
