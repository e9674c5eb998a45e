package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// updateChart rewrites the chart's generated files: the copies of the
// alert rules and the dashboard, and values.schema.json.
var updateChart = flag.Bool("update", false, "rewrite the Helm chart's generated files (files/alerts.yaml, files/lifeboat.json, values.schema.json)")

const (
	chartDir       = "helm/lifeboat"
	schemaBase     = "helm/schema.base.json"
	configDoc      = "../docs/configuration.md"
	regenerateHint = "go test ./deploy -run TestChartGenerated -update"
)

// chartCopies are the files the chart carries as copies (Helm reads no
// file outside the chart's directory): chart path -> source.
var chartCopies = map[string]string{
	"files/alerts.yaml":   "prometheus/alerts.yaml",
	"files/lifeboat.json": "grafana/lifeboat.json",
}

// TestChartGenerated: the chart's copies of the alert rules and the
// dashboard are the files themselves, and values.schema.json is
// schema.base.json with the config schema made from the option table
// (docs/configuration.md, generated from cmd/lifeboat/options.go). After
// changing any of them: go test ./deploy -run TestChartGenerated -update.
func TestChartGenerated(t *testing.T) {
	want := map[string][]byte{}
	for dst, src := range chartCopies {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		want[dst] = b
	}
	want["values.schema.json"] = chartSchema(t)
	for name, w := range want {
		p := filepath.Join(chartDir, name)
		if *updateChart {
			if err := os.WriteFile(p, w, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s is out of date (regenerate: %s):\n%s", p, regenerateHint, cmp.Diff(string(w), string(got)))
		}
	}
}

// configOption is one row of docs/configuration.md's option tables.
type configOption struct {
	key, typ, desc string
	secret         bool
}

var optionRow = regexp.MustCompile("^\\| `([a-z0-9_.]+)` \\|[^|]*\\|[^|]*\\| ([a-z]+) \\|[^|]*\\| (.*) \\|$")

// configOptions reads the option table from docs/configuration.md.
func configOptions(t *testing.T) []configOption {
	t.Helper()
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	var opts []configOption
	for line := range strings.Lines(string(data)) {
		m := optionRow.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil {
			continue
		}
		opts = append(opts, configOption{key: m[1], typ: m[2], desc: m[3], secret: strings.Contains(m[3], "(secret: redacted)")})
	}
	if len(opts) < 50 {
		t.Fatalf("%s: only %d options found in its tables", configDoc, len(opts))
	}
	return opts
}

// agentSchedules are the config keys whose values are robfig/cron
// schedules: the schema checks their form.
var agentSchedules = map[string]bool{"schedule.snapshot": true, "schedule.prune": true, "schedule.drill": true}

// leafSchema is the JSON schema of one option's value by its type name
// (cmd/lifeboat/options.go typeName).
func leafSchema(t *testing.T, o configOption) map[string]any {
	desc := strings.TrimSpace(strings.ReplaceAll(o.desc, "`", ""))
	var s map[string]any
	switch o.typ {
	case "string":
		s = map[string]any{"type": "string"}
	case "strings":
		s = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	case "bool":
		s = map[string]any{"type": "boolean"}
	case "int":
		s = map[string]any{"type": "integer"}
	case "size":
		// Bytes, or a string with a unit: 8MiB.
		s = map[string]any{"type": []string{"integer", "string"}, "pattern": `^[0-9]+(\.[0-9]+)?\s*([KMGT]i?B?|B)?$`}
	case "duration":
		// 30s, 1h30m, 14d, 2w (retention.ParseDuration); 0 is off.
		s = map[string]any{"type": []string{"string", "integer"}, "pattern": `^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h|d|w))+)$`}
	default:
		t.Fatalf("%s: option %s has type %q, which the chart's schema does not know: add it to leafSchema", configDoc, o.key, o.typ)
	}
	if agentSchedules[o.key] {
		s = map[string]any{"$ref": "#/$defs/agentSchedule"}
	}
	s["description"] = desc
	return s
}

// configSchema is the schema of the values' config: the option table's
// keys as nested objects, no other key.
func configSchema(t *testing.T) map[string]any {
	t.Helper()
	newObject := func() map[string]any {
		return map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{}}
	}
	root := newObject()
	root["description"] = "lifeboat's config.yaml (docs/configuration.md): only the option table's keys"
	for _, o := range configOptions(t) {
		parts := strings.Split(o.key, ".")
		obj := root
		for _, p := range parts[:len(parts)-1] {
			props := obj["properties"].(map[string]any)
			next, ok := props[p].(map[string]any)
			if !ok {
				next = newObject()
				props[p] = next
			}
			obj = next
		}
		obj["properties"].(map[string]any)[parts[len(parts)-1]] = leafSchema(t, o)
	}
	return root
}

// chartSchema is values.schema.json: schema.base.json with its config
// property replaced by configSchema.
func chartSchema(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(schemaBase)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", schemaBase, err)
	}
	props, _ := s["properties"].(map[string]any)
	if _, ok := props["config"]; !ok {
		t.Fatalf("%s has no properties.config to generate", schemaBase)
	}
	props["config"] = configSchema(t)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
