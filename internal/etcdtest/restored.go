package etcdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// StartRestored starts binary on a data dir that a restore wrote, with the
// member flags the restore printed (`lifeboat restore` prints them after
// "etcd": --name, --data-dir, the peer URLs, --initial-cluster, its token
// and state), as an operator would. It adds client URLs on a free loopback
// port, --unsafe-no-fsync and --log-level error, waits until /health reports
// it healthy and stops it at test cleanup. Process.DataDir is the
// --data-dir of flags.
func StartRestored(t testing.TB, binary string, flags []string) *Process {
	t.Helper()
	i := slices.Index(flags, "--data-dir")
	if i < 0 || i+1 >= len(flags) {
		t.Fatalf("etcdtest: restored member flags lack --data-dir: %q", flags)
	}
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	var err error
	for range startAttempts {
		var p *Process
		p, err = startRestored(ctx, binary, flags[i+1], flags)
		if err == nil {
			t.Cleanup(p.Stop)
			return p
		}
		// Only the client port is picked here: a taken peer port is the
		// restore's choice and fails every attempt alike.
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("etcdtest: %v", err)
	return nil
}

func startRestored(ctx context.Context, binary, dataDir string, flags []string) (*Process, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	p := &Process{ClientURL: client, DataDir: dataDir, Binary: binary, exited: make(chan struct{}), out: &syncbuf.Buffer{Max: 1 << 20}}
	args := append(slices.Clone(flags),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--unsafe-no-fsync",
		"--log-level", "error",
	)
	p.cmd = exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := StartChild(p.cmd, p.exited, &p.err); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	if err := p.waitReady(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}
