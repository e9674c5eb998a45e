package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFleetDashboard: grafana/lifeboat-fleet.json parses, its panel ids
// are unique, it has the problem table and RPO and RTO per cluster over
// time, and every query (panels and variables) selects only metrics a
// real hub exports.
func TestFleetDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/lifeboat-fleet.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/lifeboat-fleet.json: %v", err)
	}
	exported := hubMetrics(t)
	ids := map[int]bool{}
	var titles []string
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: selects no metric: %q", where, expr)
		}
		for _, n := range names {
			if !slices.Contains(exported, n) {
				t.Errorf("%s selects %s, which the hub does not export (%v)", where, n, exported)
			}
		}
	}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		titles = append(titles, p.Title)
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title+" "+tg.RefID, tg.Expr)
			if tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q %s: datasource %v, want ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
		}
	}
	for _, want := range []string{"Problems", "RPO per cluster", "RTO per cluster"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q (panels: %s)", want, strings.Join(titles, ", "))
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(v.Definition))
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, m[1])
	}
}
