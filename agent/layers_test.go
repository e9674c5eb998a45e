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
// restore) never import agent, directly or through another package, and
// the CLI's one-shot commands reach them without it: cmd/lifeboat's
// snapshot, prune and drill files import the job packages, not agent.
func TestJobsDoNotImportTheDaemon(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no go command to list the import graph: %v", err)
		}
		t.Skipf("no go command to list the import graph: %v", err)
	}
	jobs := []string{module + "/backup", module + "/retention/prune", module + "/restore"}
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
		"drill.go":       module + "/restore",
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
