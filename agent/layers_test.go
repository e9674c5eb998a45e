package agent

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/lifeboat-dev/lifeboat"

// TestJobsDoNotImportTheDaemon: the jobs (backup, retention/prune,
// restore, restore/drill, capture) and the fleet never import agent, directly or
// through another package, and the CLI's one-shot commands reach them
// without it: cmd/lifeboat's snapshot, prune and drill files import the
// job packages, not agent.
func TestJobsDoNotImportTheDaemon(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no go command to list the import graph: %v", err)
		}
		t.Skipf("no go command to list the import graph: %v", err)
	}
	jobs := []string{module + "/backup", module + "/retention/prune", module + "/restore", module + "/restore/drill", module + "/capture", module + "/fleet", module + "/scrub"}
	for _, pkg := range jobs {
		out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+"/agent" || dep == module+"/cmd/lifeboat" {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
	for file, want := range map[string]string{
		"snapshotcmd.go": module + "/backup",
		"prune.go":       module + "/retention/prune",
		"drill.go":       module + "/restore/drill",
		"scrubcmd.go":    module + "/scrub",
	} {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "cmd", "lifeboat", file), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == module+"/agent" {
				t.Errorf("cmd/lifeboat/%s imports the daemon (agent)", file)
			}
			found = found || path == want
		}
		if !found {
			t.Errorf("cmd/lifeboat/%s does not import %s", file, want)
		}
	}
}

// layers ranks the module's packages along the data flow: a package may
// import (outside its tests) only packages of a lower rank, so a lower
// layer never reaches a higher one and the jobs (backup, prune, restore)
// stay independent of each other. restore/child (the child processes)
// sits below restore, which builds its restore and replay children on
// it; restore/drill sits above restore. The test harness (test servers,
// fixtures, the shared store suite, the end-to-end tests and the bench
// tool) lives under internal/test/ and nowhere else: no shipped package
// imports it outside its _test files.
var layers = map[string]int{
	"verify": 0, "retention": 0, "signing": 0, "internal/writeback": 0, "internal/diskspace": 1, "internal/syncbuf": 0, "internal/seed": 0, "internal/units": 0, "internal/sysfilter": 0, "internal/logfield": 0,
	"snapshot": 1, "uploader": 1, "kubeobjects": 1,
	"repository": 2, "kit": 2, "restore/child": 2,
	"backup": 3, "retention/prune": 3, "restore": 3, "capture": 3, "inspect": 3, "replica": 3, "scrub": 3,
	"restore/drill": 4, "restore/kubeadm": 4,
	"agent": 5, "fleet": 5,
	"cmd/lifeboat": 6,
	"deploy":       6,
}

// harness is the path of the test harness: every package under it is for
// tests (and benchmarks) only.
const harness = "internal/test/"

func testOnly(pkg string) bool { return strings.HasPrefix(pkg, harness) }

// TestLayers checks every package of the module against layers: a new
// package must be given a rank (or be test-only), and no import goes up
// or sideways.
func TestLayers(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no go command to list the import graph: %v", err)
		}
		t.Skipf("no go command to list the import graph: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s/...: %v", module, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		rank, ranked := layers[pkg]
		if !ranked && !testOnly(pkg) && !strings.HasPrefix(pkg, "deploy/") {
			t.Errorf("package %s has no layer: add it to layers in agent/layers_test.go (or put test harness under internal/test/)", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if testOnly(dep) && !testOnly(pkg) {
				t.Errorf("%s imports the test-only package %s outside its tests", pkg, dep)
				continue
			}
			if !ranked || testOnly(dep) {
				continue
			}
			if dr, ok := layers[dep]; ok && dr >= rank {
				t.Errorf("%s (layer %d) imports %s (layer %d): lower layers never import higher or sibling ones", pkg, rank, dep, dr)
			}
		}
	}
}
