package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// docPages are the Markdown files whose links TestDocsLinks checks, relative
// to the repository root (docs/*.md is added by glob).
var docPages = []string{"README.md", "deploy/README.md", "deploy/prometheus/runbook.md"}

// mdLink matches an inline Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// TestDocsLinks: every link between the README, docs/ and deploy/ pages
// points at a file that exists, and every #fragment at a heading of that
// page (GitHub's anchors), so moving a section cannot leave a dead link.
func TestDocsLinks(t *testing.T) {
	root := ".."
	pages := slices.Clone(docPages)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md pages found")
	}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, rel)
	}
	anchors := map[string]map[string]bool{} // page path (from root) -> anchors
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		data, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatalf("read %s: %v", page, err)
		}
		a := headingAnchors(string(data))
		anchors[page] = a
		return a
	}
	for _, page := range pages {
		t.Run(page, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, page))
			if err != nil {
				t.Fatal(err)
			}
			for _, target := range links(string(data)) {
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				var dest string
				switch {
				case path == "":
					dest = page
				case strings.HasPrefix(path, "/"):
					dest = filepath.Clean(strings.TrimPrefix(path, "/"))
				default:
					dest = filepath.Clean(filepath.Join(filepath.Dir(page), path))
				}
				if strings.HasPrefix(dest, "..") {
					t.Errorf("link %q leaves the repository", target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("link %q: %v", target, err)
					continue
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("link %q: a fragment on a file that is not Markdown", target)
					continue
				}
				if !anchorsOf(dest)[frag] {
					t.Errorf("link %q: %s has no heading with anchor #%s", target, dest, frag)
				}
			}
		})
	}
}

// links returns the inline link targets of a Markdown text outside fenced
// code blocks.
func links(md string) []string {
	var out []string
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives a page's headings: lower
// case, punctuation other than '-' and '_' dropped, spaces as '-', a
// repeated anchor suffixed -1, -2, ….
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := slug(text)
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocsSlug pins the anchor rule TestDocsLinks relies on.
func TestDocsSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"How `lifeboat snapshot` works", "how-lifeboat-snapshot-works"},
		{"At 3 a.m., in order", "at-3-am-in-order"},
		{"Kubernetes: `--bump-revision` and `--mark-compacted`", "kubernetes---bump-revision-and---mark-compacted"},
		{"Deploy on Kubernetes (kubeadm)", "deploy-on-kubernetes-kubeadm"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// TestDocsListMetrics: docs/agent.md's metrics table lists exactly the
// metrics the agent exports (lifeboatMetrics, which TestAgentExportsMetrics
// checks against the binary).
func TestDocsListMetrics(t *testing.T) {
	data, err := os.ReadFile("../docs/agent.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(lifeboat_[a-z_]+)` \\|")
	var got []string
	for _, line := range strings.Split(string(data), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			got = append(got, m[1])
		}
	}
	want := slices.Clone(lifeboatMetrics)
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("docs/agent.md metrics table (-documented +exported):\n%s", diff)
	}
}

// TestDocsGeneratedOptionsMarkers: docs/configuration.md holds the option
// table between one pair of markers, where the option table's generator
// writes it.
func TestDocsGeneratedOptionsMarkers(t *testing.T) {
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	const begin, end = "<!-- BEGIN GENERATED OPTIONS -->", "<!-- END GENERATED OPTIONS -->"
	if strings.Count(s, begin) != 1 || strings.Count(s, end) != 1 {
		t.Fatalf("docs/configuration.md: want one %s and one %s", begin, end)
	}
	if i, j := strings.Index(s, begin), strings.Index(s, end); j < i || !strings.Contains(s[i:j], "| `cluster` |") {
		t.Errorf("docs/configuration.md: the option table is not between %s and %s", begin, end)
	}
}
