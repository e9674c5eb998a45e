package deploy

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
)

// strictly is the query of a create that fails on an unknown or
// duplicate field instead of dropping it (kubectl --validate=strict).
var strictly = url.Values{"fieldValidation": {"Strict"}}

// resourceOf is the API resource of a rendered object: every kind the
// chart renders takes its plural with an s; the CRDs and the ClusterRole
// (and binding) are cluster-scoped.
func resourceOf(o map[string]any) kubetest.Resource {
	return kubetest.Resource{APIVersion: fmt.Sprint(o["apiVersion"]), Plural: strings.ToLower(objKind(o)) + "s", Namespaced: wantNamespace(o) != nil}
}

// createRendered creates a rendered object in ns (or in the namespace it
// names: the events Role's is "default").
func createRendered(ctx context.Context, c *kubetest.Client, ns string, o map[string]any) error {
	if on, _ := dig(o, "metadata", "namespace").(string); on == "default" {
		ns = on
	}
	return c.Do(ctx, http.MethodPost, resourceOf(o).Path(ns, ""), strictly, o, nil)
}

var pods = kubetest.Resource{APIVersion: "v1", Plural: "pods", Namespaced: true}

// str, arr and obj build the structural schemas of the CRDs below.
func str() kubetest.Object { return kubetest.Object{"type": "string"} }
func arr(items kubetest.Object) kubetest.Object {
	return kubetest.Object{"type": "array", "items": items}
}
func obj(props kubetest.Object) kubetest.Object {
	return kubetest.Object{"type": "object", "properties": props}
}
func strMap() kubetest.Object {
	return kubetest.Object{"type": "object", "additionalProperties": str()}
}

// monitoringCRD is a CRD of the Prometheus Operator's kind with a schema
// of the fields lifeboat's objects use (the operator's CRDs are not here):
// the API server prunes, and with strict validation refuses, any other.
func monitoringCRD(kind, plural string, spec kubetest.Object) kubetest.Object {
	crd := kubetest.NewCRD("monitoring.coreos.com", kind, plural)
	versions := crd["spec"].(kubetest.Object)["versions"].([]kubetest.Object)
	versions[0]["schema"] = kubetest.Object{"openAPIV3Schema": obj(kubetest.Object{"spec": spec})}
	return crd
}

// TestChartOnKubeAPIServer creates every object the chart renders, for
// each case of the matrix, on a real kube-apiserver with strict field
// validation, in a namespace that enforces the Pod Security level the case
// needs (restricted; privileged for kubeadm's hostPath), and a Pod of each
// pod template, which Pod Security admits or refuses. Then helm installs
// the chart and upgrades it with changed values.
func TestChartOnKubeAPIServer(t *testing.T) {
	kubeBin := kubetest.NeedBinary(t)
	helmBinary(t)
	src := etcdtest.Start(t, etcdtest.Options{Members: 1})
	api := kubetest.Start(t, kubetest.Options{Binary: kubeBin, EtcdServers: src.Endpoints()})
	c := api.Client()
	ctx := t.Context()

	for _, crd := range []kubetest.Object{
		monitoringCRD("ServiceMonitor", "servicemonitors", obj(kubetest.Object{
			"jobLabel": str(),
			"selector": obj(kubetest.Object{"matchLabels": strMap()}),
			"endpoints": arr(obj(kubetest.Object{
				"port": str(), "path": str(), "interval": str(), "scrapeTimeout": str(),
				"relabelings": arr(obj(kubetest.Object{"action": str(), "targetLabel": str(), "replacement": str()})),
			})),
		})),
		monitoringCRD("PrometheusRule", "prometheusrules", obj(kubetest.Object{
			"groups": arr(obj(kubetest.Object{
				"name": str(), "interval": str(),
				"rules": arr(obj(kubetest.Object{
					"alert": str(), "record": str(), "expr": str(), "for": str(),
					"labels": strMap(), "annotations": strMap(),
				})),
			})),
		})),
	} {
		if _, err := c.Create(ctx, kubetest.CRDs, "", crd); err != nil {
			t.Fatal(err)
		}
		plural, _, _ := strings.Cut(kubetest.Name(crd), ".")
		if err := c.WaitCRD(ctx, kubetest.Name(crd), kubetest.CRDResource("monitoring.coreos.com", plural)); err != nil {
			t.Fatal(err)
		}
	}

	for _, cc := range chartCases {
		t.Run(cc.name, func(t *testing.T) {
			ns := "lb-" + cc.name
			makeNamespace(t, c, ns, cc.podSec)
			objs := renderChart(t, cc, ns)
			for _, o := range objs {
				if err := createRendered(ctx, c, ns, o); err != nil {
					t.Errorf("create %s %s: %v", objKind(o), objName(o), err)
				}
			}
			strict := ns + "-restricted"
			if cc.podSec != "restricted" {
				makeNamespace(t, c, strict, "restricted", "lb-lifeboat")
			}
			for name, ps := range podSpecs(objs) {
				pod := kubetest.Object{"apiVersion": "v1", "kind": "Pod",
					"metadata": kubetest.Object{"name": name + "-pod", "namespace": ns}, "spec": ps}
				if err := c.Do(ctx, http.MethodPost, pods.Path(ns, ""), strictly, pod, nil); err != nil {
					t.Errorf("a pod of %s in a namespace enforcing %s Pod Security: %v", name, cc.podSec, err)
				}
				if cc.podSec == "restricted" {
					continue
				}
				// Proof that Pod Security is enforced: the same pod is refused
				// where restricted is.
				pod["metadata"] = kubetest.Object{"name": name + "-pod", "namespace": strict}
				err := c.Do(ctx, http.MethodPost, pods.Path(strict, ""), strictly, pod, nil)
				if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
					t.Errorf("a pod of %s in a restricted namespace: %v, want refused by Pod Security", name, err)
				}
			}
		})
	}

	t.Run("strict validation refuses an unknown field", func(t *testing.T) {
		makeNamespace(t, c, "lb-strict", "restricted")
		objs := renderChart(t, chartCases[0], "lb-strict")
		for _, o := range objs {
			if objKind(o) != "PrometheusRule" {
				continue
			}
			o["spec"].(map[string]any)["groups"].([]any)[0].(map[string]any)["rules"].([]any)[0].(map[string]any)["severity"] = "critical"
			err := c.Do(ctx, http.MethodPost, resourceOf(o).Path("lb-strict", ""), strictly, o, nil)
			if err == nil || !strings.Contains(err.Error(), "unknown field") {
				t.Errorf("a PrometheusRule with an unknown field: %v, want refused", err)
			}
		}
	})

	t.Run("helm install and upgrade", func(t *testing.T) {
		kubeconfig := writeKubeconfig(t, api)
		ns := "lb-release"
		makeNamespace(t, c, ns, "restricted")
		values := filepath.Join(chartDir, "ci/deployment-values.yaml")
		common := []string{"--kubeconfig", kubeconfig, "--namespace", ns}
		if out, err := helm(t, append([]string{"install", "lb", chartDir, "-f", values}, common...)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if _, err := c.Get(ctx, kubetest.CRDs, "", "etcdbackups.lifeboat.dev"); err != nil {
			t.Errorf("the release installed no EtcdBackup CRD (crds/): %v", err)
		}
		// A second release shares the CRDs: helm skips those present.
		if out, err := helm(t, append([]string{"install", "lb2", chartDir, "-f", values, "--set", "capture.enabled=false"}, common...)...); err != nil {
			t.Errorf("a second release beside the first: %v\n%s", err, out)
		}
		deployments, cms := kubetest.Deployments, kubetest.ConfigMaps
		before, err := c.Get(ctx, cms, ns, "lb-lifeboat")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := helm(t, append([]string{"upgrade", "lb", chartDir, "-f", values,
			"--set", "config.retention.keep_last=9", "--set", "service.port=9470", "--set", "capture.enabled=false"}, common...)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		after, err := c.Get(ctx, cms, ns, "lb-lifeboat")
		if err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprint(dig(after, "data", "config.yaml"))
		for _, want := range []string{"keep_last: 9", "listen: 0.0.0.0:9470", "enabled: false"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("config.yaml after the upgrade has no %q:\n%s", want, cfg)
			}
		}
		if cfg == fmt.Sprint(dig(before, "data", "config.yaml")) {
			t.Error("the upgrade did not change config.yaml")
		}
		d, err := c.Get(ctx, deployments, ns, "lb-lifeboat")
		if err != nil {
			t.Fatal(err)
		}
		ctr := dig(d, "spec", "template", "spec", "containers").([]any)[0]
		if p := dig(ctr.(map[string]any)["ports"].([]any)[0], "containerPort"); fmt.Sprint(p) != "9470" {
			t.Errorf("containerPort %v after the upgrade, want 9470", p)
		}
		out, err := helm(t, append([]string{"history", "lb", "-o", "json"}, common...)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, `"revision":2`) {
			t.Errorf("helm history: %s, want revision 2", out)
		}
	})
}

// makeNamespace creates ns enforcing the Pod Security level, with the
// default ServiceAccount (no controller manager runs to make it) and the
// others named.
func makeNamespace(t *testing.T, c *kubetest.Client, ns, level string, serviceAccounts ...string) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	obj := kubetest.NewNamespace(ns)
	obj["metadata"].(kubetest.Object)["labels"] = map[string]string{
		"pod-security.kubernetes.io/enforce":         level,
		"pod-security.kubernetes.io/enforce-version": "latest",
	}
	if _, err := c.Create(ctx, kubetest.Namespaces, "", obj); err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{"default"}, serviceAccounts...) {
		sa := kubetest.Object{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": kubetest.Object{"name": name, "namespace": ns}}
		if _, err := c.Create(ctx, kubetest.Resource{APIVersion: "v1", Plural: "serviceaccounts", Namespaced: true}, ns, sa); err != nil {
			t.Fatal(err)
		}
	}
}

// writeKubeconfig writes a kubeconfig for helm: the server, its CA and
// the token.
func writeKubeconfig(t *testing.T, api *kubetest.Server) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: {server: %q, certificate-authority: %q}
users:
  - name: test
    user: {token: %q}
contexts:
  - name: test
    context: {cluster: test, user: test}
current-context: test
`, api.URL, api.CAFile, api.Token)
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
