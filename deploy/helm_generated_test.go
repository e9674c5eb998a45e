package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// updateChart rewrites the chart's generated files: the copies of the
// alert rules and the dashboard, and values.schema.json.
var updateChart = flag.Bool("update", false, "rewrite the Helm chart's generated files (the copies in files/, values.schema.json)")

const (
	valuesDoc      = "../docs/deploy-kubernetes.md"
	valuesBegin    = "<!-- BEGIN GENERATED VALUES -->"
	valuesEnd      = "<!-- END GENERATED VALUES -->"
	chartDir       = "helm/lifeboat"
	schemaBase     = "helm/schema.base.json"
	configDoc      = "../docs/configuration.md"
	regenerateHint = "go test ./deploy -run TestChartGenerated -update"
)

// chartCopies are the files the chart carries as copies (Helm reads no
// file outside the chart's directory): chart path -> source.
var chartCopies = map[string]string{
	"files/alerts.yaml":         "prometheus/alerts.yaml",
	"files/lifeboat.json":       "grafana/lifeboat.json",
	"files/fleet-alerts.yaml":   "prometheus/fleet/alerts.yaml",
	"files/lifeboat-fleet.json": "grafana/lifeboat-fleet.json",
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
	doc, err := os.ReadFile(valuesDoc)
	if err != nil {
		t.Fatal(err)
	}
	want["../../"+valuesDoc] = []byte(spliceValuesDoc(t, string(doc), valuesReference(t)))
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
var agentSchedules = map[string]bool{"schedule.snapshot": true, "schedule.prune": true, "schedule.drill": true, "scrub.schedule": true}

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
	case "stores":
		// copies: a list of stores, each with its own keys (lifeboat's
		// config check refuses unknown ones, naming them).
		s = map[string]any{"type": "array", "items": map[string]any{"type": "object", "required": []string{"name", "url"},
			"properties": map[string]any{"name": map[string]any{"type": "string", "pattern": `^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`}, "url": map[string]any{"type": "string"},
				"s3": map[string]any{"type": "object"}, "object_lock": map[string]any{"type": "object"}, "retention": map[string]any{"type": "object"}},
			"additionalProperties": false}}
	case "percent":
		// 5%, 2.5% or a plain number from 0 to 100 (scrub.ParsePercent).
		s = map[string]any{"type": []string{"string", "number"}, "pattern": `^\s*[0-9]+(\.[0-9]+)?\s*%?\s*$`, "minimum": 0, "maximum": 100}
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

// valuesReference is the Markdown table of the chart's values: every
// leaf of values.schema.json but config's (docs/configuration.md has
// those), with its type, default (values.yaml) and description.
func valuesReference(t *testing.T) string {
	t.Helper()
	var schema map[string]any
	if err := json.Unmarshal(chartSchema(t), &schema); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["$defs"].(map[string]any)
	var defaults map[string]any
	decodeYAML(t, filepath.Join(chartDir, "values.yaml"), &defaults)
	var b strings.Builder
	b.WriteString("| value | type | default | description |\n|---|---|---|---|\n")
	var walk func(path string, s map[string]any, def any)
	walk = func(path string, s map[string]any, def any) {
		if ref, ok := s["$ref"].(string); ok {
			d, _ := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
			merged := map[string]any{}
			maps.Copy(merged, d)
			maps.Copy(merged, s)
			delete(merged, "$ref")
			s = merged
		}
		props, _ := s["properties"].(map[string]any)
		if len(props) > 0 && path != "config" && !strings.HasSuffix(path, "resources") {
			for _, k := range slices.Sorted(maps.Keys(props)) {
				p := k
				if path != "" {
					p = path + "." + k
				}
				dm, _ := def.(map[string]any)
				walk(p, props[k].(map[string]any), dm[k])
			}
			return
		}
		typ := fmt.Sprint(s["type"])
		if e, ok := s["enum"].([]any); ok {
			var vs []string
			for _, v := range e {
				vs = append(vs, fmt.Sprint(v))
			}
			typ = strings.Join(vs, " \\| ")
		}
		typ = strings.NewReplacer("[", "", "]", "", " ", " or ").Replace(typ)
		d := ""
		if def != nil {
			j, _ := json.Marshal(def)
			d = "`" + string(j) + "`"
		}
		desc := fmt.Sprint(s["description"])
		if s["description"] == nil {
			desc = ""
		}
		if path == "config" {
			desc = "lifeboat's config.yaml: the keys of [configuration.md](configuration.md), checked by the schema (the chart sets the credential paths, directories and, in deployment mode, agent.listen and the schedules config.schedule leaves unset; config.schedule is refused in cronjob mode, whose schedules are cronjob.*.schedule)"
			typ, d = "object", ""
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", path, typ, strings.ReplaceAll(d, "|", "\\|"), strings.ReplaceAll(desc, "|", "\\|"))
	}
	walk("", schema, defaults)
	return b.String()
}

// spliceValuesDoc replaces the generated values reference of doc.
func spliceValuesDoc(t *testing.T, doc, table string) string {
	t.Helper()
	i, j := strings.Index(doc, valuesBegin), strings.Index(doc, valuesEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s ... %s markers", valuesDoc, valuesBegin, valuesEnd)
	}
	return doc[:i] + valuesBegin + "\n<!-- generated from deploy/helm/lifeboat/values.schema.json and values.yaml: " + regenerateHint + " -->\n" + table + doc[j:]
}
