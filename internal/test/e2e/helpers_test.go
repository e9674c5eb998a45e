package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
)

// needLifeboat returns LIFEBOAT_BIN (make test builds it) or ends the
// test: Fatal under CI=true, Skip otherwise.
func needLifeboat(t testing.TB) string {
	t.Helper()
	p := os.Getenv("LIFEBOAT_BIN")
	if p == "" {
		msg := "no lifeboat binary: run make build and set LIFEBOAT_BIN=$PWD/.bin/lifeboat"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("LIFEBOAT_BIN: %v", err)
	}
	return p
}

// lifeboat runs the lifeboat binary with a store in a directory and a
// spool dir, without the LIFEBOAT_/ETCDCTL_/AWS_ variables of the
// environment (only the flags count).
type lifeboat struct {
	bin   string
	store string // file:// URL, or s3:// with flags and env saying how to reach it
	spool string
	// flags are added to every command (the agent's too): an S3
	// endpoint, encryption, a scratch dir.
	flags []string
	// env is added to the cleaned environment of every command (the
	// agent's too): the S3 credentials, which only the AWS SDK's chain
	// reads.
	env []string
	// agentConfig is appended to the agent's config file: what its flags
	// cannot say (copies:).
	agentConfig string
}

func newLifeboat(t testing.TB) *lifeboat {
	t.Helper()
	dir := t.TempDir()
	// The store exists, as after the first snapshot: readers (list, which
	// the waits poll, restore) refuse a missing one, and a wait may poll
	// before the agent it waits for has created it.
	if err := os.Mkdir(filepath.Join(dir, "store"), 0o700); err != nil {
		t.Fatal(err)
	}
	return &lifeboat{bin: needLifeboat(t), store: "file://" + filepath.Join(dir, "store"), spool: filepath.Join(dir, "spool")}
}

// run runs `lifeboat args... --store S --spool-dir D` (and l.flags) and returns its
// standard output; a non-zero exit fails the test with both outputs.
func (l *lifeboat) run(t testing.TB, args ...string) string {
	t.Helper()
	code, out, errOut := l.runCode(t, args...)
	if code != 0 {
		t.Fatalf("lifeboat %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// runCode runs `lifeboat args... --store S --spool-dir D` and returns its
// exit code and both outputs; only a binary that could not run at all
// fails the test.
func (l *lifeboat) runCode(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// Not canceled at the test's end: a cleanup may run it to diagnose.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Minute)
	defer cancel()
	args = append(append(args, "--store", l.store, "--spool-dir", l.spool, "--log-level", "error"), l.flags...)
	cmd := exec.CommandContext(ctx, l.bin, args...)
	cmd.Env = append(cleanEnv(), l.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatalf("lifeboat %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return 0, out.String(), errOut.String()
}

// cleanEnv is the environment without the LIFEBOAT_/ETCDCTL_/AWS_
// variables (only the flags count).
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "LIFEBOAT_") && !strings.HasPrefix(e, "ETCDCTL_") && !strings.HasPrefix(e, "AWS_") {
			env = append(env, e)
		}
	}
	return env
}

var (
	storedRE   = regexp.MustCompile(`(?m)^backup (\S+) stored$`)
	revisionRE = regexp.MustCompile(`(?m)^  revision +(\d+) `)
)

// snapshot runs `lifeboat snapshot` against endpoint and returns the id
// and the revision of the stored backup.
func (l *lifeboat) snapshot(t testing.TB, endpoint string) (string, int64) {
	t.Helper()
	out := l.run(t, "snapshot", "--endpoints", endpoint)
	m, r := storedRE.FindStringSubmatch(out), revisionRE.FindStringSubmatch(out)
	if m == nil || r == nil {
		t.Fatalf("lifeboat snapshot printed no backup id and revision:\n%s", out)
	}
	rev, err := strconv.ParseInt(r[1], 10, 64)
	if err != nil {
		t.Fatalf("lifeboat snapshot: revision %q: %v", r[1], err)
	}
	return m[1], rev
}

// restore runs `lifeboat restore` of one member named m0 into a new data
// dir with the peer URL on a free loopback port and extra (the backup id
// and flags), and returns the etcd flags it printed for the member.
func (l *lifeboat) restore(t *testing.T, extra ...string) []string {
	t.Helper()
	flags, _ := l.restoreOut(t, extra...)
	return flags
}

// restoreOut is restore that also returns what the restore printed.
func (l *lifeboat) restoreOut(t *testing.T, extra ...string) ([]string, string) {
	t.Helper()
	out := l.run(t, restoreArgs(t, filepath.Join(t.TempDir(), "restored"), extra...)...)
	return etcdFlags(t, out), out
}

// restoreArgs are the arguments of a restore of one member named m0 into
// dataDir, with the peer URL on a free loopback port and extra.
func restoreArgs(t *testing.T, dataDir string, extra ...string) []string {
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	args := append([]string{"restore"}, extra...)
	return append(args, "--data-dir", dataDir, "--name", "m0", "--initial-advertise-peer-urls", peer)
}

// etcdFlags returns the flags of the one `  etcd ...` line a restore of
// one member prints.
func etcdFlags(t *testing.T, out string) []string {
	t.Helper()
	var lines []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "  etcd ") {
			lines = append(lines, strings.TrimPrefix(line, "  etcd "))
		}
	}
	if len(lines) != 1 {
		t.Fatalf("restore printed %d etcd command lines, want 1:\n%s", len(lines), out)
	}
	if strings.ContainsAny(lines[0], `'"\`) {
		t.Fatalf("etcd flags are quoted (a path with spaces?): %s", lines[0])
	}
	return strings.Fields(lines[0])
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// kubeObject is one object the workload writes and expects back.
type kubeObject struct {
	r         kubetest.Resource
	ns, name  string
	uid       string
	field     string // a top-level field compared ("data", "spec")
	want      any    // its value as the API returned it at creation
	createdRV string
}

func (o kubeObject) String() string { return o.r.Plural + " " + o.ns + "/" + o.name }

// shopGroup is the group of the workload's CRD.
const shopGroup = "stable.example.com"

var widgets = kubetest.CRDResource(shopGroup, "widgets")

// writeShop writes, through the API, a namespace ns holding a ConfigMap, a
// Secret, a Deployment and a Widget (the kind of a CRD it creates once),
// and returns them, the namespace first.
func writeShop(t *testing.T, c *kubetest.Client, ns string) []kubeObject {
	t.Helper()
	ctx := t.Context()
	if _, err := c.Get(ctx, kubetest.CRDs, "", "widgets."+shopGroup); kubetest.IsNotFound(err) {
		if _, err := c.Create(ctx, kubetest.CRDs, "", kubetest.NewCRD(shopGroup, "Widget", "widgets")); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitCRD(ctx, "widgets."+shopGroup, widgets); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	objs := []struct {
		r     kubetest.Resource
		obj   kubetest.Object
		field string
	}{
		{kubetest.Namespaces, kubetest.NewNamespace(ns), "metadata"},
		{kubetest.ConfigMaps, kubetest.NewConfigMap(ns, "config", map[string]string{"color": "blue", "size": strings.Repeat("x", 2000)}), "data"},
		{kubetest.Secrets, kubetest.NewSecret(ns, "creds", map[string][]byte{"password": []byte("hunter2")}), "data"},
		{kubetest.Deployments, kubetest.NewDeployment(ns, "web", "registry.k8s.io/pause:3.10", 3), "spec"},
		{widgets, kubetest.NewCustom(shopGroup, "Widget", ns, "w1", kubetest.Object{"size": "large"}), "spec"},
	}
	var out []kubeObject
	for _, o := range objs {
		got, err := c.Create(ctx, o.r, ns, o.obj)
		if err != nil {
			t.Fatalf("create %s %s: %v", o.r.Plural, kubetest.Name(o.obj), err)
		}
		ko := kubeObject{r: o.r, ns: ns, name: kubetest.Name(got), uid: kubetest.Meta(got, "uid"), field: o.field, want: got[o.field], createdRV: kubetest.Meta(got, "resourceVersion")}
		if o.r == kubetest.Namespaces {
			ko.ns, ko.field, ko.want = "", "", nil
		}
		out = append(out, ko)
	}
	return out
}

// failures repeats a long test's failures at its very end. A failed soak
// logs pages of diagnosis after its assertions (each agent's stderr,
// the store's listing, versitygw's request log), and a CI log shown by
// its tail would show only those: newFailures registers its Cleanup
// first, so that it runs last, after every dump.
type failures struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func newFailures(t *testing.T) *failures {
	f := &failures{t: t}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.lines) > 0 {
			t.Logf("%s FAILED, in short (the diagnosis is above):\n- %s", t.Name(), strings.Join(f.lines, "\n- "))
		}
	})
	return f
}

func (f *failures) add(msg string) {
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = append(f.lines, msg)
}

// Errorf is t.Errorf, repeated at the end.
func (f *failures) Errorf(format string, args ...any) {
	f.t.Helper()
	f.add(fmt.Sprintf(format, args...))
	f.t.Errorf(format, args...)
}

// Fatalf is t.Fatalf, repeated at the end.
func (f *failures) Fatalf(format string, args ...any) {
	f.t.Helper()
	f.add(fmt.Sprintf(format, args...))
	f.t.Fatalf(format, args...)
}
