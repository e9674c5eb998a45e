package etcdtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
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
	return StartRestoredTLS(t, binary, flags, nil)
}

// StartRestoredTLS is StartRestored serving clients over TLS as tl says
// (nil: plain http), and peers too when the restore's peer URLs are https.
func StartRestoredTLS(t testing.TB, binary string, flags []string, tl *TLS) *Process {
	t.Helper()
	i := slices.Index(flags, "--data-dir")
	if i < 0 || i+1 >= len(flags) {
		t.Fatalf("etcdtest: restored member flags lack --data-dir: %q", flags)
	}
	// Only the client port is picked here: a taken peer port is the
	// restore's choice and fails every attempt alike.
	return startRetried(t, func(ctx context.Context) (*Process, error) { return startRestored(ctx, binary, flags[i+1], flags, tl) })
}

func startRestored(ctx context.Context, binary, dataDir string, flags []string, tl *TLS) (*Process, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	client := fmt.Sprintf("%s://127.0.0.1:%d", tl.scheme(false), ports[0])
	peerTLS := slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "https://") })
	return launch(ctx, binary, dataDir, client, tl, append(append(slices.Clone(flags), tl.args(peerTLS)...),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--unsafe-no-fsync",
		"--log-level", "error",
	)...)
}
