package etcdtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// Process is a single-member etcd cluster run from an etcd binary as a
// child process on loopback: a server of another etcd version than the one
// in go.mod (the version tests build them, see scripts/build-etcd.sh).
type Process struct {
	// ClientURL is where clients reach it (http://127.0.0.1:PORT, https://
	// with TLS).
	ClientURL string
	// DataDir is its data directory, under t.TempDir.
	DataDir string
	// Binary is the executable it runs.
	Binary string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed
	out    *syncbuf.Buffer
	tls    *tls.Config // a client's, with TLS
}

// TLS is how an etcd started from a binary serves its clients (and,
// optionally, its peers) over TLS, with certificates the test made (a
// kubeadm-like PKI, internal/test/kittest): etcd's flags --cert-file,
// --key-file, --trusted-ca-file and --client-cert-auth.
type TLS struct {
	// CAFile is the CA that signed every certificate below; clients and
	// peers must present a certificate it signed.
	CAFile string
	// CertFile and KeyFile are the certificate etcd serves clients with.
	CertFile, KeyFile string
	// PeerCertFile and PeerKeyFile, when set, are the certificate etcd
	// serves its peer URL with (https, --peer-client-cert-auth).
	PeerCertFile, PeerKeyFile string
	// ClientCertFile and ClientKeyFile are the client certificate the
	// readiness check and Client present.
	ClientCertFile, ClientKeyFile string
}

// args are etcd's flags for t; peer says whether the peer URLs are https.
func (t *TLS) args(peer bool) []string {
	if t == nil {
		return nil
	}
	a := []string{"--cert-file", t.CertFile, "--key-file", t.KeyFile, "--trusted-ca-file", t.CAFile, "--client-cert-auth"}
	if peer {
		a = append(a, "--peer-cert-file", t.PeerCertFile, "--peer-key-file", t.PeerKeyFile,
			"--peer-trusted-ca-file", t.CAFile, "--peer-client-cert-auth")
	}
	return a
}

// scheme is the scheme of URLs served with t.
func (t *TLS) scheme(peer bool) string {
	if t == nil || (peer && t.PeerCertFile == "") {
		return "http"
	}
	return "https"
}

// clientConfig is a client's TLS configuration for a server of t.
func (t *TLS) clientConfig() (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	c, err := (transport.TLSInfo{CertFile: t.ClientCertFile, KeyFile: t.ClientKeyFile, TrustedCAFile: t.CAFile}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd client TLS: %w", err)
	}
	return c, nil
}

// FindBinary returns the etcd binary named by the environment variable env
// or, when env is unset, .bin/name in the module root if it exists, else "".
func FindBinary(t testing.TB, env, name string) string {
	t.Helper()
	if b := os.Getenv(env); b != "" {
		return b
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			b := filepath.Join(dir, ".bin", name)
			if _, err := os.Stat(b); err == nil {
				return b
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// NeedBinary is FindBinary that ends the test when there is no binary:
// Fatal under CI=true, Skip otherwise.
func NeedBinary(t testing.TB, env, name string) string {
	t.Helper()
	b := FindBinary(t, env, name)
	if b == "" {
		msg := fmt.Sprintf("no etcd binary .bin/%s: run `make tools` or set %s", name, env)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return b
}

// StartBinary starts binary as a new single-member cluster with its data
// under t.TempDir, listening on free loopback ports, without fsync, and
// waits until /health reports it healthy (a leader and a served read). It
// is stopped at test cleanup.
func StartBinary(t testing.TB, binary string) *Process {
	t.Helper()
	return StartBinaryTLS(t, binary, nil)
}

// StartBinaryTLS is StartBinary serving clients (and peers, when
// tl.PeerCertFile is set) over TLS as tl says; nil is plain http.
func StartBinaryTLS(t testing.TB, binary string, tl *TLS) *Process {
	t.Helper()
	// A fresh data dir per attempt: a failed start may have bootstrapped one.
	return startRetried(t, func(ctx context.Context) (*Process, error) { return startBinary(ctx, binary, t.TempDir(), tl) })
}

// startRetried runs start until it succeeds or fails for another reason
// than a port taken between picking it and binding it, and stops the
// process at test cleanup.
func startRetried(t testing.TB, start func(context.Context) (*Process, error)) *Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	var err error
	for range startAttempts {
		var p *Process
		p, err = start(ctx)
		if err == nil {
			t.Cleanup(p.Stop)
			return p
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("etcdtest: %v", err)
	return nil
}

func startBinary(ctx context.Context, binary, dir string, tl *TLS) (*Process, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	client := fmt.Sprintf("%s://127.0.0.1:%d", tl.scheme(false), ports[0])
	peer := fmt.Sprintf("%s://127.0.0.1:%d", tl.scheme(true), ports[1])
	args := append(tl.args(tl.scheme(true) == "https"),
		"--name", "m0",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m0="+peer,
		"--initial-cluster-token", "etcdtest-"+randomHex(8),
		"--unsafe-no-fsync",
		"--log-level", "error",
	)
	return launch(ctx, binary, filepath.Join(dir, "data"), client, tl, args...)
}

// launch starts binary with args (its data in dataDir, serving clients at
// client, over TLS as tl says) and waits until it is ready.
func launch(ctx context.Context, binary, dataDir, client string, tl *TLS, args ...string) (*Process, error) {
	tc, err := tl.clientConfig()
	if err != nil {
		return nil, err
	}
	p := &Process{ClientURL: client, DataDir: dataDir, Binary: binary, exited: make(chan struct{}), out: &syncbuf.Buffer{Max: 1 << 20}, tls: tc}
	p.cmd = exec.Command(binary, args...)
	// etcd reads every flag from ETCD_<FLAG> too: only the flags count.
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

// waitReady polls /health, then a read, until ctx ends or etcd exits.
func (p *Process) waitReady(ctx context.Context) error {
	hc := &http.Client{Timeout: time.Second}
	if p.tls != nil {
		hc.Transport = &http.Transport{TLSClientConfig: p.tls.Clone()}
		defer hc.CloseIdleConnections()
	}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.ClientURL+"/health", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %v: %s", p.Binary, p.err, lastLines(p.out.String(), 5))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w: %s", p.Binary, ctx.Err(), lastLines(p.out.String(), 5))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ClientConfig returns a client configuration for the server with a 5 s
// DialTimeout.
func (p *Process) ClientConfig() clientv3.Config {
	cfg := clientv3.Config{Endpoints: []string{p.ClientURL}, DialTimeout: dialTimeout, Logger: zap.NewNop()}
	if p.tls != nil {
		cfg.TLS = p.tls.Clone()
	}
	return cfg
}

// Client returns a client built from ClientConfig; it is closed at test
// cleanup.
func (p *Process) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(p.ClientConfig())
	if err != nil {
		t.Fatalf("etcdtest: new client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Stop stops the server (SIGTERM, SIGKILL after 30 s) and waits for it. It
// is idempotent.
func (p *Process) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Output returns the last of the server's log (at level error).
func (p *Process) Output() string { return p.out.String() }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Version is an etcd server binary of one version, built by make
// (scripts/build-etcd.sh, the Makefile's tools target) into .bin; the
// version tests run each of Versions.
type Version struct {
	// Name is the version the server must report: a minor ("3.6") or,
	// when the test needs that very release, a full version ("3.5.15").
	Name string
	// Minor is its minor version ("3.5").
	Minor string
	// Env is the environment variable naming the binary, Bin its file
	// name under .bin (FindBinary).
	Env, Bin string
}

// Versions are the etcd servers the version tests run, oldest first. The
// last is Current.
var Versions = []Version{
	{Name: "3.5", Minor: "3.5", Env: "ETCD35_BIN", Bin: "etcd-3.5"},
	// The last 3.5 release whose compaction removes a tombstone at the
	// compact revision (3.5.16 keeps it).
	{Name: "3.5.15", Minor: "3.5", Env: "ETCD3515_BIN", Bin: "etcd-3.5.15"},
	{Name: "3.6", Minor: "3.6", Env: "ETCD36_BIN", Bin: "etcd-3.6"},
	Current,
}

// Current is the etcd server of go.mod's version (.bin/etcd, ETCD_BIN):
// the one a drill runs unless told otherwise.
var Current = Version{Name: version.APIVersion, Minor: version.APIVersion, Env: "ETCD_BIN", Bin: "etcd"}

// Need returns v's binary or ends the test (NeedBinary): Fatal under
// CI=true, Skip otherwise.
func (v Version) Need(t testing.TB) string {
	t.Helper()
	return NeedBinary(t, v.Env, v.Bin)
}
