package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// TestDemoHintNamesTheBinaryRun: the demo's closing hint names the program
// as it was run, so `make demo` (which runs .bin/lifeboat, not on PATH)
// suggests commands that work as printed.
func TestDemoHintNamesTheBinaryRun(t *testing.T) {
	wd := t.TempDir()
	tests := []struct {
		name, arg0, want string
	}{
		{name: "from PATH", arg0: "lifeboat", want: "lifeboat"},
		{name: "make demo", arg0: filepath.Join(wd, ".bin", "lifeboat"), want: filepath.Join(".bin", "lifeboat")},
		{name: "relative", arg0: "./lifeboat", want: "./lifeboat"},
		{name: "elsewhere", arg0: "/opt/lb/lifeboat", want: "/opt/lb/lifeboat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := programName(tt.arg0, wd); got != tt.want {
				t.Errorf("programName(%q, %q) = %q, want %q", tt.arg0, wd, got, tt.want)
			}
			var b strings.Builder
			printDemoSummary(&b, programName(tt.arg0, wd), &Config{Store: StoreConfig{URL: "file:///s"}}, "id", 1)
			if !strings.Contains(b.String(), "try:  "+tt.want+" list --store file:///s") {
				t.Errorf("summary does not suggest %q:\n%s", tt.want+" list", b.String())
			}
		})
	}
}

// TestDemoPointInTime runs the demo and checks what its point-in-time
// steps did: the log found the namespace's deletion at the revisions etcd
// answered, the state restored to the revision before it and booted holds
// every key of the namespace as it was (values, versions, revisions),
// including changes made after the backup that only the replay can bring,
// ls lists the deleted deployments and get --for-apply prints the deleted
// Deployment without its server-set fields. Nothing is left behind: no
// temporary file, no child process.
func TestDemoPointInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole demo")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out, errOut := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	d, err := playDemo(t.Context(), &app{stdout: out, stderr: errOut, getenv: envMap(nil)}, demoTestConfig(t), demoOptions{objects: 500})
	if err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out, errOut)
	}
	p := &d.pitr
	t.Logf("demo output:\n%s", out)

	// The deletion, as etcd answered it, and as lifeboat log found it.
	last := p.Deletion[len(p.Deletion)-1]
	if p.Start != p.Deletion[0] || p.Delete != last || p.Target != p.Start-1 || p.BeforeRevision != p.Target {
		t.Errorf("log found the PUT at %d and the DELETE at %d, target %d; etcd wrote the deletion at %v, the state before it read at %d",
			p.Start, p.Delete, p.Target, p.Deletion, p.BeforeRevision)
	}
	if p.Deleted != len(p.Before) || len(p.Before) <= len(demoObjects()) {
		t.Errorf("log found %d DELETEs; the namespace had %d keys (its seeded objects and %d written by the demo)", p.Deleted, len(p.Before), len(demoObjects()))
	}
	// Restored: equal to before, and some of it written after the backup.
	if diff := cmp.Diff(p.Before, p.Restored); diff != "" || p.RestoredRevision != p.Target {
		t.Errorf("restored at revision %d (want %d), namespace state (-before +restored):\n%s", p.RestoredRevision, p.Target, diff)
	}
	replayed := 0
	for _, kv := range p.Before {
		if kv.ModRevision > d.backup.Revision {
			replayed++
		}
	}
	if replayed == 0 || p.Changes[0] != d.backup.Revision+1 || p.Changes[1] != p.Target {
		t.Errorf("%d keys of the namespace changed after the backup at %d (changes %v, target %d): the restore replayed nothing of them", replayed, d.backup.Revision, p.Changes, p.Target)
	}
	checkDemoLs(t, p)
	checkDemoGet(t, p)
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the demo left %d entries in its temporary directory: %v", len(left), left)
	}
	if kids := childProcesses(t); len(kids) > 0 {
		t.Errorf("the demo left child processes running: %v", kids)
	}
}

// demoTestConfig is the demo's configuration with a store of the test's.
func demoTestConfig(t *testing.T) *Config {
	t.Helper()
	cfg, err := LoadConfig("", envMap(nil), map[string]string{"store.url": "file://" + filepath.Join(t.TempDir(), "store"), "log.level": "warn"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// checkDemoLs: ls at the target lists every deleted deployment.
func checkDemoLs(t *testing.T, p *demoPITR) {
	t.Helper()
	for k := range p.Before {
		if name, ok := strings.CutPrefix(k, "/registry/deployments/"+demoNamespace+"/"); ok && !strings.Contains(p.Ls, " "+name+" ") {
			t.Errorf("ls at revision %d does not list deployment %s:\n%s", p.Target, name, p.Ls)
		}
	}
}

// checkDemoGet: get --for-apply printed the deleted Deployment at the
// target, as it was written, without the fields the server sets.
func checkDemoGet(t *testing.T, p *demoPITR) {
	t.Helper()
	header, body, _ := strings.Cut(p.Get, "\n")
	if want := fmt.Sprintf("# %s at revision %d ", demoDeployment, p.Target); !strings.HasPrefix(header, want) {
		t.Errorf("get's first line %q, want it to start with %q", header, want)
	}
	var got appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(body), &got); err != nil {
		t.Fatalf("get --for-apply output is not a Deployment: %v\n%s", err, p.Get)
	}
	want := demoObjects()[demoDeployment].(*appsv1.Deployment)
	want.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	want.UID, want.CreationTimestamp, want.Generation, want.ManagedFields = "", metav1.Time{}, 0, nil
	want.Status = appsv1.DeploymentStatus{}
	if diff := cmp.Diff(want, &got); diff != "" {
		t.Errorf("get --for-apply (-want +got):\n%s", diff)
	}
}

// childProcesses lists the processes whose parent is this one (Linux).
func childProcesses(t *testing.T) []string {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		_, rest, _ := strings.Cut(string(b), ") ")
		if fields := strings.Fields(rest); len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			kids = append(kids, f)
		}
	}
	return kids
}

// TestDemoCleansUpOnFailure: a demo interrupted at a step (the context
// ends as the step begins, like SIGINT) fails with an error naming what
// it could not do and leaves nothing behind: capture stopped, every etcd
// stopped, the temporary directory removed.
func TestDemoCleansUpOnFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	for _, step := range []string{"9/13", "11/13"} {
		t.Run(step, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			out := &cancelAt{marker: step, cancel: cancel}
			_, err := playDemo(ctx, &app{stdout: out, stderr: &syncbuf.Buffer{}, getenv: envMap(nil)}, demoTestConfig(t), demoOptions{objects: 300})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("demo interrupted at step %s: got %v, want an error wrapping context.Canceled\n%s", step, err, &out.b)
			}
			if !strings.Contains(out.b.String(), step) {
				t.Fatalf("the demo never reached step %s:\n%s", step, &out.b)
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("the demo left %d entries in its temporary directory: %v", len(left), left)
			}
			if kids := childProcesses(t); len(kids) > 0 {
				t.Errorf("the demo left child processes running: %v", kids)
			}
		})
	}
}

// cancelAt collects output and cancels when a write begins with marker.
type cancelAt struct {
	b      syncbuf.Buffer
	marker string
	cancel context.CancelFunc
}

func (c *cancelAt) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), c.marker) {
		c.cancel()
	}
	return c.b.Write(p)
}
