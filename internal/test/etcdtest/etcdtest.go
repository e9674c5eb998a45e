package etcdtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

const (
	// readyTimeout bounds how long Start waits for members to become ready.
	// Generous because the test machine is shared and noisy.
	readyTimeout = 90 * time.Second
	// startAttempts is how often Start retries when a picked port was taken
	// by someone else between picking and binding.
	startAttempts = 5
	// dialTimeout is the DialTimeout of ClientConfig.
	dialTimeout = 5 * time.Second
)

// Options configure Start. The zero value starts one plain-HTTP member
// without auth.
type Options struct {
	// Members is the cluster size: 1 (the default when 0) or 3.
	Members int
	// TLS serves clients over https with certificates from a generated CA and
	// requires client certificates (ClientCertAuth). The files are in
	// Cluster.CAFile, CertFile and KeyFile. Peers always talk plain http.
	TLS bool
	// Auth enables etcd authentication with user "root" (role root) and a
	// random password in Cluster.User and Cluster.Password.
	Auth bool
	// Logger receives etcd's server logs and is set on ClientConfig; default
	// zap.NewNop() to keep test output quiet.
	Logger *zap.Logger
	// Durable makes members fsync their WAL and backend. By default they run
	// with UnsafeNoFsync, which is much faster and enough for tests that do
	// not simulate power loss.
	Durable bool
}

// Cluster is a running etcd cluster started by Start.
type Cluster struct {
	// Members are the cluster's members in the order of their names
	// (m0, m1, m2).
	Members []*Member
	// CAFile, CertFile and KeyFile are PEM files (mode 0600) for clients when
	// Options.TLS is set: the CA that signed the servers' certificates and a
	// client certificate and key the servers accept. Empty otherwise.
	CAFile, CertFile, KeyFile string
	// User and Password are the root credentials when Options.Auth is set.
	User, Password string

	logger *zap.Logger
	tls    *tls.Config
}

// Member is one etcd member of a Cluster.
type Member struct {
	// Name is the member name (m0, m1, ...).
	Name string
	// ClientURL is the URL clients use (https:// when TLS).
	ClientURL string
	// PeerURL is the URL of the raft peer listener (always http://).
	PeerURL string
	// DataDir is the member's data directory.
	DataDir string
	// Etcd is the embedded server.
	Etcd *embed.Etcd

	stopOnce sync.Once
}

// Stop stops the member gracefully (a leader hands leadership to a peer
// first, as a real etcd does on SIGTERM) and closes its listeners. It is
// idempotent and safe to call concurrently. The ports may take a moment to
// be free again.
func (m *Member) Stop() {
	m.stopOnce.Do(func() { m.Etcd.Close() })
}

// Endpoints returns the client URLs of all members, including stopped ones.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, 0, len(c.Members))
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// ClientConfig returns a client configuration for all endpoints with the
// cluster's TLS material and credentials and a 5 s DialTimeout.
func (c *Cluster) ClientConfig() clientv3.Config {
	cfg := clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: dialTimeout,
		Username:    c.User,
		Password:    c.Password,
		Logger:      c.logger,
	}
	if c.tls != nil {
		cfg.TLS = c.tls.Clone()
	}
	return cfg
}

// Client returns a client built from ClientConfig; it is closed at test
// cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(c.ClientConfig())
	if err != nil {
		t.Fatalf("etcdtest: new client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Leader returns the member that is currently leader, waiting (polling)
// until the running members agree on one that is running.
func (c *Cluster) Leader(t testing.TB) *Member {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		if m := c.leader(); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: no leader after %v", readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leader returns the leader that a majority of running members report, or
// nil.
func (c *Cluster) leader() *Member {
	votes := map[uint64]int{}
	for _, m := range c.Members {
		if m.stopped() {
			continue
		}
		if id := uint64(m.Etcd.Server.Leader()); id != 0 {
			votes[id]++
		}
	}
	for _, m := range c.Members {
		if m.stopped() {
			continue
		}
		if votes[uint64(m.Etcd.Server.MemberID())]*2 > len(c.Members) {
			return m
		}
	}
	return nil
}

// halt stops the member without a leadership transfer.
func (m *Member) halt() {
	m.stopOnce.Do(func() {
		m.Etcd.Server.HardStop()
		m.Etcd.Close()
	})
}

func (m *Member) stopped() bool {
	select {
	case <-m.Etcd.Server.StopNotify():
		return true
	default:
		return false
	}
}

// Start starts a cluster as described by opts and waits until it is healthy:
// every member is ready, a leader is elected and a client can read. It calls
// t.Fatal on failure and stops the cluster at test cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Members == 0 {
		opts.Members = 1
	}
	if opts.Members != 1 && opts.Members != 3 {
		t.Fatalf("etcdtest: Members must be 1 or 3, got %d", opts.Members)
	}
	lg := opts.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	dir := t.TempDir()
	c := &Cluster{logger: lg}

	var serverTLS transport.TLSInfo
	if opts.TLS {
		var err error
		serverTLS, err = c.makeCerts(dir)
		if err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
	}
	if opts.Auth {
		c.User = "root"
		c.Password = randomHex(16)
	}

	var err error
	for attempt := range startAttempts {
		var members []*Member
		members, err = startMembers(filepath.Join(dir, fmt.Sprintf("try%d", attempt)), opts, lg, serverTLS)
		if err == nil {
			c.Members = members
			break
		}
	}
	if err != nil {
		t.Fatalf("etcdtest: start %d member(s): %v", opts.Members, err)
	}
	t.Cleanup(c.stop)

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	if opts.Auth {
		if err := c.enableAuth(ctx); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
	}
	return c
}

// stop stops all members concurrently. Each server is hard-stopped first:
// a graceful stop of the leader would wait up to the request timeout (6 s)
// for a leadership transfer to peers that are going away too.
func (c *Cluster) stop() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.halt)
	}
	wg.Wait()
	waitPeerConns(stuckConnWait)
}

// stuckConnWait bounds waitPeerConns: a stuck peer connection ends when its
// read deadline (rafthttp.ConnReadTimeout, 5 s) expires.
const stuckConnWait = 7 * time.Second

// waitPeerConns waits, at most limit, until no goroutine is stuck in
// net/http's abortPendingRead. etcd's peer listener wraps connections in a
// timeoutConn that resets the read deadline on every Read, so an HTTP server
// connection (e.g. a peer's version check) can miss the deadline that
// net/http sets to abort its background read, and outlive Close until the
// 5 s read timeout. After a multi-member cluster stops a few such
// connections usually remain, so its cleanup takes up to 5 s longer; a single
// member has no peer connections and returns at once. Waiting here keeps
// goleak-checked tests reliable. The check is process-wide, hence bounded.
func waitPeerConns(limit time.Duration) {
	deadline := time.Now().Add(limit)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		if n == len(buf) && len(buf) < 64<<20 {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if !bytes.Contains(buf[:n], []byte("net/http.(*connReader).abortPendingRead")) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// makeCerts writes a CA, a server certificate and a client certificate to
// dir, sets the client fields of c and returns the server's TLS settings.
func (c *Cluster) makeCerts(dir string) (transport.TLSInfo, error) {
	ca, err := newCA(dir, "etcd")
	if err != nil {
		return transport.TLSInfo{}, err
	}
	// The server certificate is also used as a client certificate by etcd's
	// own gRPC gateway when ClientCertAuth is on, so it needs both usages.
	serverCert, serverKey, err := ca.leaf(dir, "server", "etcd-server",
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	clientCert, clientKey, err := ca.leaf(dir, "client", clientCommonName, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	c.CAFile, c.CertFile, c.KeyFile = ca.caFile, clientCert, clientKey
	tlsCfg, err := (transport.TLSInfo{CertFile: clientCert, KeyFile: clientKey, TrustedCAFile: ca.caFile}).ClientConfig()
	if err != nil {
		return transport.TLSInfo{}, fmt.Errorf("client tls config: %w", err)
	}
	c.tls = tlsCfg
	return transport.TLSInfo{
		CertFile:       serverCert,
		KeyFile:        serverKey,
		TrustedCAFile:  ca.caFile,
		ClientCertAuth: true,
	}, nil
}

// startMembers starts all members concurrently on freshly picked ports.
// With several members, each StartEtcd returns once its listeners are up;
// the cluster forms afterwards (see waitHealthy).
func startMembers(dir string, opts Options, lg *zap.Logger, serverTLS transport.TLSInfo) ([]*Member, error) {
	ports, err := freePorts(2 * opts.Members)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if opts.TLS {
		scheme = "https"
	}
	token := "etcdtest-" + randomHex(8)
	members := make([]*Member, opts.Members)
	peers := make([]string, opts.Members)
	for i := range members {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			DataDir:   filepath.Join(dir, fmt.Sprintf("m%d", i)),
		}
		members[i] = m
		peers[i] = m.Name + "=" + m.PeerURL
	}
	initialCluster := strings.Join(peers, ",")

	cfgs := make([]*embed.Config, len(members))
	for i, m := range members {
		if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		cu, err := url.Parse(m.ClientURL)
		if err != nil {
			return nil, fmt.Errorf("parse client url: %w", err)
		}
		pu, err := url.Parse(m.PeerURL)
		if err != nil {
			return nil, fmt.Errorf("parse peer url: %w", err)
		}
		cfg := embed.NewConfig()
		cfg.Name = m.Name
		cfg.Dir = m.DataDir
		cfg.ListenClientUrls = []url.URL{*cu}
		cfg.AdvertiseClientUrls = []url.URL{*cu}
		cfg.ListenPeerUrls = []url.URL{*pu}
		cfg.AdvertisePeerUrls = []url.URL{*pu}
		// NewConfig hard-codes InitialCluster from the default peer URL.
		cfg.InitialCluster = initialCluster
		cfg.InitialClusterToken = token
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.ClientTLSInfo = serverTLS
		cfg.Logger = "zap"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
		// etcd's default heartbeat (100 ms) and election timeout (1 s):
		// shorter ones barely speed up a start (a single member elects
		// itself at once) but cause spurious leader changes on a busy
		// shared machine, especially under -race.
		cfg.TickMs = 100
		cfg.ElectionMs = 1000
		cfg.UnsafeNoFsync = !opts.Durable
		// Cheap password hashing: auth tests authenticate often.
		cfg.BcryptCost = uint(bcrypt.MinCost)
		// Room for benchmark data sets (~1 GiB plus history).
		cfg.QuotaBackendBytes = 8 << 30
		cfgs[i] = cfg
	}

	type started struct {
		e   *embed.Etcd
		err error
	}
	results := make([]started, len(members))
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() {
			e, err := embed.StartEtcd(cfgs[i])
			results[i] = started{e, err}
		})
	}
	wg.Wait()
	var errs []error
	for i, r := range results {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("member %s: %w", members[i].Name, r.err))
			continue
		}
		members[i].Etcd = r.e
	}
	if len(errs) > 0 {
		for _, m := range members {
			if m.Etcd != nil {
				m.halt()
			}
		}
		return nil, errors.Join(errs...)
	}
	return members, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before etcd binds it; Start retries then.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHealthy waits for every member's ReadyNotify, for a leader, and for a
// successful linearizable read through a client.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	for _, m := range c.Members {
		select {
		case <-m.Etcd.Server.ReadyNotify():
		case err := <-m.Etcd.Err():
			return fmt.Errorf("member %s failed: %w", m.Name, err)
		case <-ctx.Done():
			return fmt.Errorf("member %s not ready: %w", m.Name, ctx.Err())
		}
	}
	for c.leader() == nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Credentials are not set up yet at this point.
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	return waitRead(ctx, cfg)
}

// waitRead polls a read through a client of cfg until one succeeds or
// ctx ends.
func waitRead(ctx context.Context, cfg clientv3.Config) error {
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer func() { _ = cli.Close() }()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(rctx, "etcdtest-health")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for a successful read: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// enableAuth creates user root with role root and enables authentication,
// then checks that the credentials work.
func (c *Cluster) enableAuth(ctx context.Context) error {
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer func() { _ = cli.Close() }()
	if _, err := cli.RoleAdd(ctx, "root"); err != nil {
		return fmt.Errorf("add role root: %w", err)
	}
	if _, err := cli.UserAdd(ctx, c.User, c.Password); err != nil {
		return fmt.Errorf("add user root: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, c.User, "root"); err != nil {
		return fmt.Errorf("grant role root: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable auth: %w", err)
	}
	authed, err := clientv3.New(c.ClientConfig())
	if err != nil {
		return fmt.Errorf("new client with credentials: %w", err)
	}
	defer func() { _ = authed.Close() }()
	if _, err := authed.Get(ctx, "etcdtest-health"); err != nil {
		return fmt.Errorf("read with credentials: %w", err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}
