package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestChartKubernetesObjects: the chart's crds/ holds the two CRDs (helm
// template --include-crds renders them as they are); with
// kubernetesObjects (on by default) it grants the ServiceAccount exactly
// what the agent's sync needs (EtcdBackups and events in the release's
// namespace, the EtcdRecoverability, events in "default") and nothing
// more, and sets config.kubernetes; a release in "default" needs no second
// events Role. (kubernetesObjects.enabled=false renders none of it:
// TestChartRender's cronjob-without-objects.)
func TestChartKubernetesObjects(t *testing.T) {
	helmBinary(t)
	base := chartCases[0]
	raw, err := os.ReadFile(filepath.Join(chartDir, "crds", "lifeboat.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wantCRDs := decodeObjects(t, string(raw))
	wantRules := map[string][]any{
		"Role/lb-lifeboat-objects": {
			map[string]any{"apiGroups": []any{"lifeboat.dev"}, "resources": []any{"etcdbackups"}, "verbs": []any{"get", "list", "create", "update", "delete"}},
			map[string]any{"apiGroups": []any{""}, "resources": []any{"events"}, "verbs": []any{"create"}},
		},
		"ClusterRole/lb-lifeboat-lifeboat-recoverability": {
			map[string]any{"apiGroups": []any{"lifeboat.dev"}, "resources": []any{"etcdrecoverabilities"}, "verbs": []any{"get", "create", "update"}},
		},
		"Role/lb-lifeboat-lifeboat-events": {
			map[string]any{"apiGroups": []any{""}, "resources": []any{"events"}, "verbs": []any{"create"}},
		},
	}

	t.Run("default", func(t *testing.T) {
		out, err := helm(t, base.args("template", "lb", chartDir, "--namespace", "lifeboat", "--include-crds")...)
		if err != nil {
			t.Fatal(err)
		}
		objs := decodeObjects(t, out)
		var crds []map[string]any
		rules := map[string][]any{}
		for _, o := range objs {
			switch objKind(o) {
			case "CustomResourceDefinition":
				crds = append(crds, o)
			case "Role", "ClusterRole":
				rules[objKind(o)+"/"+objName(o)], _ = o["rules"].([]any)
			case "ConfigMap":
				if objName(o) == "lb-lifeboat" {
					cfg := dig(o, "data", "config.yaml").(string)
					if !strings.Contains(cfg, "kubernetes:\n  namespace: lifeboat\n  objects:\n    enabled: true\n") {
						t.Errorf("config.yaml does not set kubernetes.objects.enabled and kubernetes.namespace:\n%s", cfg)
					}
				}
			}
		}
		if diff := cmp.Diff(wantCRDs, crds); diff != "" {
			t.Errorf("rendered CRDs differ from crds/lifeboat.dev.yaml (-file +rendered):\n%s", diff)
		}
		if diff := cmp.Diff(wantRules, rules); diff != "" {
			t.Errorf("RBAC rules (-want +got):\n%s", diff)
		}
	})

	t.Run("release in default", func(t *testing.T) {
		n := 0
		for _, o := range renderChart(t, base, "default") {
			if objKind(o) == "Role" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d Roles in a release in namespace default, want 1 (its events are the release namespace's)", n)
		}
	})
}
