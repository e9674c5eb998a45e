package restore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// Etcd is a throwaway single-member etcd server on loopback: embedded in
// this process, or an external etcd binary run as a child process. It
// serves drills (booting a restored data dir) and the demo.
type Etcd struct {
	// ClientURL is where clients reach it (http://127.0.0.1:PORT).
	ClientURL string
	// PeerURL is its advertised (loopback) peer URL.
	PeerURL string
	// Name is the member name.
	Name string
	// Kind describes the server for reports: "embedded 3.7.3" or the
	// binary's path.
	Kind string

	e *embed.Etcd

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	out     *syncbuf.Buffer

	closeOnce sync.Once
}

// EtcdOptions configure StartEtcd.
type EtcdOptions struct {
	// DataDir is the member's data directory: empty for a new cluster, or
	// a restored one (then Name and PeerURL must match the restore).
	DataDir string
	// Name is the member name (default "lifeboat").
	Name string
	// PeerURL is the advertised peer URL; empty picks a free loopback port.
	PeerURL string
	// Token is the initial cluster token; empty picks a fresh random one
	// so the server can never join another cluster.
	Token string
	// QuotaBytes is the backend quota (0: etcd's default).
	QuotaBytes int64
	// ReadyTimeout bounds waiting for the server to be ready (default 60s).
	ReadyTimeout time.Duration
	// Binary runs this etcd executable instead of the embedded server,
	// with the equivalent flags (to match a cluster's etcd version).
	Binary string
}

// startAttempts bounds retries when a port picked as free was taken before
// etcd could bind it.
const startAttempts = 3

// StartEtcd starts the server and waits until it serves clients. It only
// listens on loopback.
func StartEtcd(ctx context.Context, o EtcdOptions) (*Etcd, error) {
	if o.Name == "" {
		o.Name = "lifeboat"
	}
	if o.Token == "" {
		o.Token = "lifeboat-" + randomHex(8)
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.PeerURL == "" {
		u, err := FreeLoopbackURL()
		if err != nil {
			return nil, err
		}
		o.PeerURL = u
	}
	if _, err := url.Parse(o.PeerURL); err != nil {
		return nil, fmt.Errorf("peer URL %q: %w", o.PeerURL, err)
	}
	var lastErr error
	listenPeer := o.PeerURL
	for range startAttempts {
		clientURL, err := FreeLoopbackURL()
		if err != nil {
			return nil, err
		}
		var s *Etcd
		if o.Binary != "" {
			s, err = startBinary(ctx, o, clientURL, listenPeer)
		} else {
			s, err = startEmbedded(ctx, o, clientURL, listenPeer)
		}
		if err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "address already in use") || ctx.Err() != nil {
			return nil, err
		}
		lastErr = err
		// The advertised peer URL stays as restored; a single member never
		// dials it, so it may listen elsewhere.
		if listenPeer, err = FreeLoopbackURL(); err != nil {
			return nil, err
		}
	}
	return nil, lastErr
}

func startEmbedded(ctx context.Context, o EtcdOptions, clientURL, listenPeer string) (*Etcd, error) {
	cu, _ := url.Parse(clientURL)
	pu, _ := url.Parse(o.PeerURL)
	lpu, _ := url.Parse(listenPeer)
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.DataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*lpu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	// NewConfig hard-codes InitialCluster for its default URLs.
	cfg.InitialCluster = o.Name + "=" + o.PeerURL
	cfg.InitialClusterToken = o.Token
	cfg.QuotaBackendBytes = o.QuotaBytes
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd on %s: %w", o.DataDir, err)
	}
	t := time.NewTimer(o.ReadyTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd on %s failed: %w", o.DataDir, err)
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("etcd on %s not ready after %s", o.DataDir, o.ReadyTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &Etcd{e: e, ClientURL: clientURL, PeerURL: o.PeerURL, Name: o.Name, Kind: "embedded " + version.Version}, nil
}

func startBinary(ctx context.Context, o EtcdOptions, clientURL, listenPeer string) (*Etcd, error) {
	args := []string{
		"--name", o.Name,
		"--data-dir", o.DataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", listenPeer,
		"--initial-advertise-peer-urls", o.PeerURL,
		"--initial-cluster", o.Name + "=" + o.PeerURL,
		"--initial-cluster-token", o.Token,
		"--log-level", "error",
	}
	if o.QuotaBytes > 0 {
		args = append(args, "--quota-backend-bytes", fmt.Sprint(o.QuotaBytes))
	}
	// Not CommandContext: the server must outlive ctx until Close.
	cmd := exec.Command(o.Binary, args...)
	cmd.Env = etcdEnv(os.Environ())
	out := &syncbuf.Buffer{Max: 1 << 20} // etcd logs for the whole drill
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr()
	s := &Etcd{cmd: cmd, exited: make(chan struct{}), out: out, ClientURL: clientURL, PeerURL: o.PeerURL, Name: o.Name, Kind: o.Binary}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends:
		// keep this goroutine on its thread until the child has exited.
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			s.waitErr = cmd.Wait()
		}
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Binary, err)
	}
	deadline := time.NewTimer(o.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	hc := &http.Client{Timeout: time.Second}
	for {
		if healthy(ctx, hc, clientURL) {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("etcd %s on %s exited: %v: %s", o.Binary, o.DataDir, s.waitErr, lastLines(out.String(), 5))
		case <-deadline.C:
			s.Close()
			return nil, fmt.Errorf("etcd %s on %s not ready after %s: %s", o.Binary, o.DataDir, o.ReadyTimeout, lastLines(out.String(), 5))
		case <-ctx.Done():
			s.Close()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// etcdEnv drops ETCD_* variables so that the child takes its configuration
// from its flags only (etcd reads every flag from ETCD_<FLAG> too).
func etcdEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ETCD_") {
			out = append(out, kv)
		}
	}
	return out
}

func healthy(ctx context.Context, hc *http.Client, clientURL string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
}

// Close stops the server and waits for it. It is idempotent.
func (s *Etcd) Close() {
	s.closeOnce.Do(func() {
		if s.e != nil {
			s.e.Close()
			<-s.e.Server.StopNotify()
			return
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-s.exited:
		case <-t.C:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// FreeLoopbackURL returns http://127.0.0.1:PORT for a port that was free a
// moment ago.
func FreeLoopbackURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", errors.Join(err)
	}
	return "http://" + addr, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
