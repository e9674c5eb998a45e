package child

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
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// EtcdCommand is the hidden first argument that makes this program run a
// throwaway etcd server (RunEtcd) instead of its usual work: StartEtcd
// starts the server as a child process of the same binary with it, so that
// an etcd that panics or exits on the data it serves takes only itself
// down. cmd/lifeboat registers it as a hidden command; a test binary that
// starts servers dispatches it in TestMain.
const EtcdCommand = "__etcd"

// ErrEtcdExited is wrapped when a throwaway etcd exited (crashed, or
// refused its data) before it was stopped.
var ErrEtcdExited = errors.New("etcd exited")

// Etcd is a throwaway single-member etcd server in a child process: this
// binary run with EtcdCommand (etcd embedded in its own process), or an
// external etcd binary. It serves drills (booting a restored data dir) and
// the demo. It listens on unix sockets in a private directory, or, for
// data that was not restored, on loopback TCP (EtcdOptions.SocketDir).
type Etcd struct {
	// ClientURL is where clients reach it: unix:///dir/client:1 or
	// http://127.0.0.1:PORT (a clientv3 endpoint). For a socket directory
	// too deep for a socket path it is unix:///proc/self/fd/N/client:1,
	// valid in this process only.
	ClientURL string
	// PeerURL is its advertised peer URL.
	PeerURL string
	// Name is the member name.
	Name string
	// SocketDir is the directory of its unix sockets ("" on TCP).
	SocketDir string
	// Kind describes the server for reports: "etcd 3.7.3 (lifeboat
	// __etcd)" or the binary's path.
	Kind string

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	oom     int64 // oomKills when it started
	out     *syncbuf.Buffer
	hc      *http.Client
	health  string
	dirFile *os.File // keeps a /proc/self/fd client path valid

	stopping  atomic.Bool
	closeOnce sync.Once
}

// EtcdOptions configure StartEtcd.
type EtcdOptions struct {
	// DataDir is the member's data directory: empty for a new cluster, or
	// a restored one (then Name and PeerURL must match the restore).
	DataDir string
	// Name is the member name (default "lifeboat").
	Name string
	// PeerURL is the advertised peer URL; empty picks a free loopback port
	// (TCP) or SocketDir's peer socket (SocketPeerURL).
	PeerURL string
	// SocketDir makes the server listen on unix sockets in this directory
	// (created 0700; it must be private to lifeboat) for clients and peers,
	// and on no TCP port. Empty: loopback TCP on free ports, only for data
	// that was not restored (the demo's seed server, benchmarks).
	SocketDir string
	// Token is the initial cluster token; empty picks a fresh random one
	// so the server can never join another cluster.
	Token string
	// QuotaBytes is the backend quota (0: etcd's default).
	QuotaBytes int64
	// ReadyTimeout bounds waiting for the server to be ready (default 60s).
	ReadyTimeout time.Duration
	// Binary runs this etcd executable instead of this program with
	// EtcdCommand, with the same flags (to match a cluster's etcd version).
	Binary string
	// NoSync makes the built-in server (not Binary) skip every fsync-like
	// call (skipSyncs): for data deleted when the server stops, a drill's.
	// Its restored database, written without syncs, then stays in the
	// page cache instead of being flushed by the server's first commit.
	NoSync bool
}

// Socket names inside EtcdOptions.SocketDir. etcd (3.5 and later, and
// etcdutl) wants host:port in the URLs of a member, so the sockets are
// named like one and the server creates them relative to its working
// directory, the socket directory.
const (
	clientSocket = "client:1"
	peerSocket   = "peer:2"
)

// SocketPeerURL is the peer URL of a server started with SocketDir: the
// peer URL to restore a member with before booting it there.
const SocketPeerURL = "unix://" + peerSocket

// maxSocketPath is the longest unix socket path Linux accepts (sun_path,
// 108 bytes with its NUL).
const maxSocketPath = 107

// The throwaway server's raft timing: a 10 ms heartbeat and a 100 ms
// election timeout instead of etcd's 100 ms and 1 s. It is a single member
// with no peers, so no missed heartbeat can ever cost it its leadership;
// the only election is its first, and with etcd's defaults a lone member
// waits 0.1–1.1 s for it after loading the data (etcd fast-forwards all
// but one tick of the randomized timeout), with these 10–110 ms.
const (
	heartbeatMs = "10"
	electionMs  = "100"
)

// startAttempts bounds retries when a port picked as free was taken before
// etcd could bind it (TCP only).
const startAttempts = 3

// DefaultQuota is etcd's own default backend quota.
const DefaultQuota = 2 << 30

// QuotaFor is a backend quota for an etcd that boots on a dbSize
// database: etcd's default, or the database and a quarter (at least
// 256 MiB) above it when that is more, so that a backup of a cluster whose
// quota was raised boots without its NOSPACE alarm and takes writes.
func QuotaFor(dbSize int64) int64 {
	return max(DefaultQuota, dbSize+max(dbSize/4, 256<<20))
}

// ReadyFor is how long an etcd that boots on a dbSize database may take
// to serve: etcd rebuilds its key index from the whole file before it
// answers, about linear in the database (on bench-scale's 8.3 GB file
// 92 s on 2 busy cores): 60 s, and 30 s more for every GiB.
func ReadyFor(dbSize int64) time.Duration {
	return 60*time.Second + time.Duration(dbSize*30/(1<<30))*time.Second
}

// StartEtcd starts the server and waits until it serves clients. It never
// listens beyond loopback, and with SocketDir on no TCP port at all. The
// child dies with this process. An exit before it is ready wraps
// ErrEtcdExited, with the end of its output.
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
	if o.SocketDir != "" {
		return startOnSockets(ctx, o)
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
		s, err := startChild(ctx, o, childSpec{clientURL: clientURL, listenClient: clientURL, listenPeer: listenPeer, health: clientURL + "/health"})
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

func startOnSockets(ctx context.Context, o EtcdOptions) (*Etcd, error) {
	dir, err := filepath.Abs(o.SocketDir)
	if err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", o.SocketDir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	// MkdirAll keeps an existing directory's mode: insist on 0700.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	sock := filepath.Join(dir, clientSocket)
	var dirFile *os.File
	if len(sock) > maxSocketPath {
		// The server binds relative to its working directory; clients
		// here reach the socket through a descriptor of the directory
		// (Linux), so a deep scratch directory is no problem.
		f, err := os.Open(dir)
		if err != nil {
			return nil, fmt.Errorf("socket directory %s: %w", dir, err)
		}
		short := fmt.Sprintf("/proc/self/fd/%d/%s", f.Fd(), clientSocket)
		if _, err := os.Stat(filepath.Dir(short)); err != nil || len(short) > maxSocketPath {
			f.Close()
			return nil, fmt.Errorf("socket directory %s: path too long for a unix socket (%d bytes, at most %d): choose a shorter scratch directory", dir, len(sock), maxSocketPath)
		}
		sock, dirFile = short, f
	}
	if o.PeerURL == "" {
		o.PeerURL = SocketPeerURL
	}
	s, err := startChild(ctx, o, childSpec{
		clientURL:    "unix://" + sock,
		listenClient: "unix://" + clientSocket,
		// Whatever peer URL was restored, it listens on the peer socket: a
		// single member never dials its own peer URL.
		listenPeer: SocketPeerURL,
		dir:        dir,
		health:     "http://etcd/health",
		dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	})
	if err != nil {
		if dirFile != nil {
			dirFile.Close()
		}
		return nil, err
	}
	s.dirFile = dirFile
	return s, nil
}

// childSpec is where one child listens.
type childSpec struct {
	clientURL    string // for clients of this process
	listenClient string // as etcd is told (relative to dir for sockets)
	listenPeer   string
	dir          string // the child's working directory (sockets); "" inherits
	health       string // the /health URL
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
}

// startChild starts the server o and c describe in a child process and
// waits until it serves clients.
func startChild(ctx context.Context, o EtcdOptions, c childSpec) (*Etcd, error) {
	bin, kind, args, err := etcdCommand(o, c)
	if err != nil {
		return nil, err
	}
	// Not CommandContext: the server must outlive ctx until Close.
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv(os.Environ())
	cmd.Dir = c.dir
	out := &syncbuf.Buffer{Max: 1 << 20} // etcd logs for the whole drill
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr()
	tr := &http.Transport{DialContext: c.dial, DisableKeepAlives: true}
	s := &Etcd{
		cmd: cmd, exited: make(chan struct{}), out: out,
		hc: &http.Client{Timeout: time.Second, Transport: tr}, health: c.health,
		ClientURL: c.clientURL, PeerURL: o.PeerURL, Name: o.Name, SocketDir: c.dir, Kind: kind,
	}
	if err := s.start(); err != nil {
		return nil, fmt.Errorf("start etcd %s: %w", bin, err)
	}
	if err := s.waitReady(ctx, o); err != nil {
		return nil, err
	}
	return s, nil
}

// etcdCommand is the executable, the description for reports and the
// arguments of the server o and c describe: this program with
// EtcdCommand (and --no-sync with o.NoSync), or o.Binary.
func etcdCommand(o EtcdOptions, c childSpec) (bin, kind string, args []string, _ error) {
	args = []string{
		"--name", o.Name,
		"--data-dir", o.DataDir,
		"--listen-client-urls", c.listenClient,
		"--advertise-client-urls", c.listenClient,
		"--listen-peer-urls", c.listenPeer,
		"--initial-advertise-peer-urls", o.PeerURL,
		"--initial-cluster", o.Name + "=" + o.PeerURL,
		"--initial-cluster-token", o.Token,
		"--heartbeat-interval", heartbeatMs,
		"--election-timeout", electionMs,
		"--log-level", "error",
	}
	if o.QuotaBytes > 0 {
		args = append(args, "--quota-backend-bytes", fmt.Sprint(o.QuotaBytes))
	}
	if o.DataDir != "" {
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return "", "", nil, fmt.Errorf("data directory %s: %w", o.DataDir, err)
		}
		args[3] = abs // the child may run in another directory
	}
	if o.Binary != "" {
		return o.Binary, o.Binary, args, nil
	}
	self, err := selfExecutable()
	if err != nil {
		return "", "", nil, err
	}
	args = append([]string{EtcdCommand}, args...)
	if o.NoSync {
		args = append(args, "--no-sync")
	}
	return self, "etcd " + version.Version + " (lifeboat " + EtcdCommand + ")", args, nil
}

// start starts the server's process and a goroutine that waits for it
// (s.exited), on an OS thread of its own: Pdeathsig fires when the
// thread that started the child ends, so the goroutine keeps its thread
// until the child has exited.
func (s *Etcd) start() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		s.oom = oomKills()
		err := s.cmd.Start()
		started <- err
		if err == nil {
			if onStart != nil {
				onStart(s.cmd)
			}
			s.waitErr = s.cmd.Wait()
		}
		close(s.exited)
	}()
	return <-started
}

// waitReady waits until the server serves clients, it exits (an error
// wrapping ErrEtcdExited), o.ReadyTimeout passes or ctx ends (then it is
// stopped).
func (s *Etcd) waitReady(ctx context.Context, o EtcdOptions) error {
	deadline := time.NewTimer(o.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.healthy(ctx) {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("etcd on %s: %w", o.DataDir, s.exitError())
		case <-deadline.C:
			s.Close()
			return fmt.Errorf("etcd on %s not ready after %s: %s", o.DataDir, o.ReadyTimeout, lastLines(s.out.String(), 5))
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// selfExecutable is this program, to run it with EtcdCommand. On Linux
// /proc/self/exe still names it when the file was replaced by an upgrade.
func selfExecutable() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this program to run etcd with: %w", err)
	}
	return p, nil
}

// childEnvKeep are the variables a throwaway etcd inherits; everything
// else is dropped. ETCD_* would configure it behind its flags' back (etcd
// reads every flag from ETCD_<FLAG> too); GOMEMLIMIT and GOGC are tuned
// for lifeboat's small bounded buffers, not for a server that maps the
// whole database (the parent's soft limit slowed drills by a fifth); and
// the credentials of the store or of the live cluster have no business in
// a server of restored data.
var childEnvKeep = []string{"PATH", "HOME", "TMPDIR", "TZ", "LANG", "LC_ALL", "LC_CTYPE", "GODEBUG", "GOTRACEBACK", "GOMAXPROCS", "GOCOVERDIR"}

func childEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		for _, keep := range childEnvKeep {
			if k == keep {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}

func (s *Etcd) healthy(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.health, nil)
	if err != nil {
		return false
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
}

// Pid is the child's process id.
func (s *Etcd) Pid() int { return s.cmd.Process.Pid }

// Exited returns, without waiting, an error wrapping ErrEtcdExited when
// the server exited on its own (crashed, or refused its data), naming how
// and ending with the last lines of its output; nil while it runs. After
// Close it reports nothing.
func (s *Etcd) Exited() error {
	select {
	case <-s.exited:
	default:
		return nil
	}
	if s.stopping.Load() {
		return nil
	}
	return s.exitError()
}

// WaitExited waits up to d for the server to exit on its own and returns
// Exited's answer: after a failed request, it tells a crash from a
// network error.
func (s *Etcd) WaitExited(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
	}
	return s.Exited()
}

func (s *Etcd) exitError() error {
	if note, killed := killNote(s.waitErr, s.oom); killed {
		return fmt.Errorf("%w (%s): %w: %s", ErrEtcdExited, note, ErrKilled, orNone(lastLines(s.out.String(), 5)))
	}
	how := "exit status 0"
	if s.waitErr != nil {
		how = s.waitErr.Error()
	}
	return fmt.Errorf("%w (%s): %s", ErrEtcdExited, how, crashSummary(s.out.String()))
}

// UntilExit returns a context that ends with ctx or when the server exits,
// whichever comes first, for the requests of a drill's checks: etcd's
// client retries a request to a server that has gone until its context
// ends, and a crash or a kill must end the checks at once, not at the
// drill's timeout. stop releases it.
func (s *Etcd) UntilExit(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// crashSummary names the crash in etcd's output (its panic or fatal log
// line, or the Go runtime's panic line) and appends the last lines.
func crashSummary(out string) string {
	last := lastLines(out, 5)
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") ||
			strings.Contains(line, `"level":"panic"`) || strings.Contains(line, `"level":"fatal"`) {
			if strings.Contains(last, line) {
				return last
			}
			return line + "\n...\n" + last
		}
	}
	if last == "" {
		return "(no output)"
	}
	return last
}

// Close stops the server (SIGTERM, then SIGKILL after 30s) and waits for
// it. It is idempotent, and Close after Kill (or Kill after Close) does
// nothing.
func (s *Etcd) Close() { s.stop(syscall.SIGTERM) }

// Kill stops the server at once (SIGKILL) and waits for it: for a server
// whose data is deleted next (a drill's), where a graceful stop would only
// flush a database about to be removed. It is idempotent.
func (s *Etcd) Kill() { s.stop(syscall.SIGKILL) }

func (s *Etcd) stop(sig syscall.Signal) {
	s.closeOnce.Do(func() {
		s.stopping.Store(true)
		_ = s.cmd.Process.Signal(sig)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-s.exited:
		case <-t.C:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		if s.dirFile != nil {
			s.dirFile.Close()
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
