package deploy

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// shBlock matches a fenced ```sh block of a Markdown page.
var shBlock = regexp.MustCompile("(?ms)^```sh\n(.*?)^```")

// fakeMake stands in for make in TestGettingStarted: the page's build
// step names the binaries, which the test provides already built (make
// would overwrite the shared .bin/lifeboat); it refuses any other target.
const fakeMake = `#!/bin/sh
for t in "$@"; do
	case $t in
	build) t=.bin/lifeboat ;;
	.bin/etcd | .bin/etcdctl | .bin/etcdutl) ;;
	*) echo "getting-started: make $t: not a target the page should need" >&2; exit 2 ;;
	esac
	[ -x "$t" ] || { echo "make: $t missing" >&2; exit 2; }
done
`

// TestGettingStarted (issue 29 §3): docs/getting-started.md's commands,
// every ```sh block in order in one shell, run as written against real
// etcd, lifeboat, etcdctl and etcdutl, in a temporary directory that
// stands for the repository's root; only the ports (2379, 2380, 9469)
// are replaced by free ones, and make is a stand-in that checks the
// binaries are there. The page ends by checking the restored keys
// itself ("all 21 keys are back"), so it cannot rot.
func TestGettingStarted(t *testing.T) {
	page, err := os.ReadFile("../docs/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	for index, link := range map[string]string{"../README.md": "(docs/getting-started.md)", "../docs/README.md": "(getting-started.md)"} {
		if b, err := os.ReadFile(index); err != nil || !bytes.Contains(b, []byte(link)) {
			t.Errorf("%s does not link the getting-started page %s (%v)", index, link, err)
		}
	}
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for _, m := range shBlock.FindAllStringSubmatch(string(page), -1) {
		script.WriteString(m[1])
	}
	body := script.String()
	for _, want := range []string{"lifeboat snapshot", "lifeboat list", "lifeboat drill latest", "lifeboat agent --capture", "restore --to-time"} {
		if !strings.Contains(body, want) {
			t.Fatalf("getting-started.md's commands lack %q", want)
		}
	}
	for _, port := range []string{"2379", "2380", "9469"} {
		body = strings.ReplaceAll(body, "127.0.0.1:"+port, "127.0.0.1:"+strconv.Itoa(freeLoopbackPort(t)))
	}

	root := t.TempDir()
	bin := filepath.Join(root, ".bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"lifeboat": lifeboatBinary(t),
		"etcd":     etcdtest.NeedBinary(t, "ETCD_BIN", "etcd"),
		"etcdctl":  etcdtest.NeedBinary(t, "ETCDCTL_BIN", "etcdctl"),
		"etcdutl":  etcdtest.NeedBinary(t, "ETCDUTL_BIN", "etcdutl"),
	} {
		abs, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	tools := filepath.Join(root, "tools")
	if err := os.Mkdir(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tools, "make"), []byte(fakeMake), 0o755); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", body)
	cmd.Dir = root
	cmd.Env = append(cleanEnv(), "PATH="+tools+":"+os.Getenv("PATH"), "HOME="+root)
	// The page starts etcd and the agent in the background: one process
	// group, killed whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("getting-started.md's commands failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"drill of backup", "PASSED", "capture windows", "all 21 keys are back"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the walk-through did not print %q:\n%s", want, out.String())
		}
	}
}

// freeLoopbackPort is a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
