package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
)

// TestInspectKubeAPIServer: data written by a real kube-apiserver (a
// ConfigMap, a Deployment, a CRD instance, a Secret encrypted at rest with
// aescbc) is decoded by get; the Secret is decrypted with the
// EncryptionConfiguration and shown as encrypted without it; get
// --for-apply of a ConfigMap deleted since the backup, created again
// through the API server, recreates it as it was.
func TestInspectKubeAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd and kube-apiserver")
	}
	bin := kubetest.NeedBinary(t)
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	key := bytes.Repeat([]byte{0x42}, 32)
	encCfg := kubetest.AESCBCConfig("key1", key)
	kube := kubetest.Start(t, kubetest.Options{Binary: bin, EtcdServers: c.Endpoints(), EncryptionConfig: encCfg})
	k := kube.Client()
	must := func(_ kubetest.Object, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k.Create(ctx, kubetest.Namespaces, "", kubetest.NewNamespace("shop")))
	must(k.Create(ctx, kubetest.ConfigMaps, "shop", kubetest.NewConfigMap("shop", "web-config", map[string]string{"color": "blue", "size": "L"})))
	must(k.Create(ctx, kubetest.Deployments, "shop", kubetest.NewDeployment("shop", "web", "nginx:1.27", 2)))
	must(k.Create(ctx, kubetest.CRDs, "", kubetest.NewCRD("example.com", "Widget", "widgets")))
	widgets := kubetest.CRDResource("example.com", "widgets")
	if err := k.WaitCRD(ctx, "widgets.example.com", widgets); err != nil {
		t.Fatal(err)
	}
	must(k.Create(ctx, widgets, "shop", kubetest.NewCustom("example.com", "Widget", "shop", "w1", kubetest.Object{"size": 3})))
	must(k.Create(ctx, kubetest.Secrets, "shop", kubetest.NewSecret("shop", "db", map[string][]byte{"password": []byte("hunter2")})))

	dir := t.TempDir()
	encFile := filepath.Join(dir, "enc.yaml")
	if err := os.WriteFile(encFile, []byte(encCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--store", "file://" + filepath.Join(dir, "store"), "--cluster", "kube", "--log-level", "error",
		"--spool-dir", filepath.Join(dir, "spool")}
	if code, out, errOut := runCLI(t, nil, append([]string{"snapshot", "--endpoints", c.Endpoints()[0]}, base...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s%s", code, out, errOut)
	}
	cli := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, nil, append(append(args, base...), "--cache-dir", filepath.Join(dir, "cache"))...)
	}

	t.Run("ls", func(t *testing.T) {
		code, out, errOut := cli(t, "ls", "latest", "/registry/")
		if code != 0 {
			t.Fatalf("ls exit %d\n%s%s", code, out, errOut)
		}
		for _, want := range []string{"web-config", "deployments", "example.com/widgets", "encrypted:aescbc:key1"} {
			if !strings.Contains(out, want) {
				t.Errorf("ls lacks %q:\n%s", want, out)
			}
		}
	})

	for _, tc := range []struct{ key, want string }{
		{"/registry/configmaps/shop/web-config", "kind: ConfigMap"},
		{"/registry/deployments/shop/web", "image: nginx:1.27"},
		{"/registry/example.com/widgets/shop/w1", "kind: Widget"},
	} {
		t.Run("get "+tc.key, func(t *testing.T) {
			code, out, errOut := cli(t, "get", "latest", tc.key)
			if code != 0 || !strings.Contains(out, tc.want) || !strings.Contains(out, "name: ") {
				t.Errorf("get %s: exit %d\n%s%s", tc.key, code, out, errOut)
			}
		})
	}

	t.Run("secret", func(t *testing.T) {
		code, out, errOut := cli(t, "get", "latest", "/registry/secrets/shop/db", "--encryption-config", encFile)
		if code != 0 || !strings.Contains(out, "kind: Secret") || !strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("hunter2"))) {
			t.Errorf("get the Secret with the config: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "get", "latest", "/registry/secrets/shop/db")
		if code != 1 || !strings.Contains(errOut, `aescbc key "key1"`) || strings.Contains(out, "hunter2") {
			t.Errorf("get the Secret without the config: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("deleted ConfigMap applied back", func(t *testing.T) {
		if err := k.Delete(ctx, kubetest.ConfigMaps, "shop", "web-config"); err != nil {
			t.Fatal(err)
		}
		if _, err := k.Get(ctx, kubetest.ConfigMaps, "shop", "web-config"); !kubetest.IsNotFound(err) {
			t.Fatalf("after delete: %v", err)
		}
		code, out, errOut := cli(t, "get", "latest", "/registry/configmaps/shop/web-config", "--for-apply", "-o", "json")
		if code != 0 {
			t.Fatalf("get --for-apply exit %d\n%s%s", code, out, errOut)
		}
		var obj kubetest.Object
		if err := json.Unmarshal([]byte(out), &obj); err != nil {
			t.Fatalf("--for-apply output: %v\n%s", err, out)
		}
		got, err := k.Create(ctx, kubetest.ConfigMaps, "shop", obj)
		if err != nil {
			t.Fatalf("create the ConfigMap from get --for-apply: %v\n%s", err, out)
		}
		back, err := k.Get(ctx, kubetest.ConfigMaps, "shop", "web-config")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := back["data"].(map[string]any)
		if data["color"] != "blue" || data["size"] != "L" || kubetest.Name(got) != "web-config" {
			t.Errorf("recreated ConfigMap %v", back)
		}
	})
}
