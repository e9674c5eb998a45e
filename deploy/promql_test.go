package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// A small PromQL scanner: enough to find the metrics, label matchers and
// grouping labels an expression uses (promtool checks the syntax). Pulling
// in Prometheus' own parser would add the whole Prometheus module to
// go.mod.

// selector is one vector selector: a metric name and its label matchers.
type selector struct {
	Metric   string
	Matchers []matcher
}

type matcher struct {
	Label, Op, Value string
}

var (
	stringLit  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	braces     = regexp.MustCompile(`\{[^}]*\}`)
	brackets   = regexp.MustCompile(`\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")`)
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{[^}]*\})`)
	keywords   = map[string]bool{
		"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true,
		"ignoring": true, "group_left": true, "group_right": true, "bool": true, "offset": true,
		"inf": true, "nan": true, "atan2": true,
	}
)

// metricNames returns the metric names expr selects, in order, without
// duplicates.
func metricNames(expr string) []string {
	s := stringLit.ReplaceAllString(expr, `""`)
	s = braces.ReplaceAllString(s, " ")
	s = brackets.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var names []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= '0' && c <= '9' || c == '.':
			// A number or a duration (3600, 0.9, 1e9, 5m): skip it whole.
			for i < len(s) && isIdent(s[i]) || i < len(s) && s[i] == '.' {
				i++
			}
		case c == '$':
			// A Grafana variable outside a selector.
			for i++; i < len(s) && isIdent(s[i]); i++ {
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\n' || s[k] == '\t') {
				k++
			}
			isCall := k < len(s) && s[k] == '('
			if !isCall && !keywords[strings.ToLower(word)] && !slices.Contains(names, word) {
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// selectors returns the selectors of expr that have label matchers.
func selectors(expr string) []selector {
	var out []selector
	for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
		sel := selector{Metric: m[1]}
		for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			v := mm[3][1 : len(mm[3])-1]
			v = strings.ReplaceAll(v, `\\`, `\`)
			sel.Matchers = append(sel.Matchers, matcher{Label: mm[1], Op: mm[2], Value: v})
		}
		if sel.Metric == "" {
			for _, mt := range sel.Matchers {
				if mt.Label == "__name__" && mt.Op == "=" {
					sel.Metric = mt.Value
				}
			}
		}
		out = append(out, sel)
	}
	return out
}

// groupingLabels returns the labels named in by, without, on, ignoring and
// group_left/right clauses.
func groupingLabels(expr string) []string {
	var out []string
	for _, m := range grouping.FindAllStringSubmatch(stringLit.ReplaceAllString(expr, `""`), -1) {
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

func TestPromQLScanner(t *testing.T) {
	tests := []struct {
		expr     string
		names    []string
		sels     []selector
		grouping []string
	}{
		{
			expr:  `time() - max without (instance, pod) (lifeboat_job_last_success_timestamp_seconds{job_name="snapshot"}) > 3 * 3600`,
			names: []string{"lifeboat_job_last_success_timestamp_seconds"},
			sels: []selector{{Metric: "lifeboat_job_last_success_timestamp_seconds",
				Matchers: []matcher{{"job_name", "=", "snapshot"}}}},
			grouping: []string{"instance", "pod"},
		},
		{
			expr:  `histogram_quantile(0.9, sum by (job_name, le) (rate(lifeboat_job_duration_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`,
			names: []string{"lifeboat_job_duration_seconds_bucket"},
			sels: []selector{{Metric: "lifeboat_job_duration_seconds_bucket",
				Matchers: []matcher{{"instance", "=~", "$instance"}}}},
			grouping: []string{"job_name", "le"},
		},
		{
			expr:  "(a == 0)\nand\n(b >= ignoring (instance) group_left () max without (pod) (b)) or on() vector(1) unless c offset 5m",
			names: []string{"a", "b", "c"}, grouping: []string{"instance", "pod"},
		},
		{
			expr:  `{__name__="up", job!~"x|y"} == 1e9 and bool up`,
			names: []string{"up"},
			sels:  []selector{{Metric: "up", Matchers: []matcher{{"__name__", "=", "up"}, {"job", "!~", "x|y"}}}},
		},
		{expr: `label_replace(up, "a", "$1", "b", "(.*)")`, names: []string{"up"}},
		{expr: `sum(rate(x[5m])) / $scale`, names: []string{"x"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			if diff := cmp.Diff(metricNames(tt.expr), tt.names, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("metricNames (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(selectors(tt.expr), tt.sels, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("selectors (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(groupingLabels(tt.expr), tt.grouping, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("groupingLabels (-got +want):\n%s", diff)
			}
		})
	}
}

func FuzzMetricNames(f *testing.F) {
	f.Add(`time() - max without (instance) (a{b="c"}) > 3`)
	f.Add(`sum by (x) (rate(y[5m]))`)
	f.Add(`"unterminated {`)
	f.Fuzz(func(t *testing.T, expr string) {
		for _, n := range metricNames(expr) {
			if n == "" || !isIdentStart(n[0]) {
				t.Errorf("metricNames(%q) returned %q", expr, n)
			}
		}
		selectors(expr)
		groupingLabels(expr)
	})
}
