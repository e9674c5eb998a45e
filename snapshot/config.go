package snapshot

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member preferences for Config.Member.
const (
	// MemberFollower prefers a healthy, caught-up, voting follower and uses
	// the leader only when no follower can serve (the default).
	MemberFollower = "follower"
	// MemberLeader prefers the leader.
	MemberLeader = "leader"
	// MemberAny takes the endpoints in the order given.
	MemberAny = "any"
)

// Live HashKV modes (the snapshot.live_hashkv setting): whether a backup
// compares the HashKV computed from the snapshot file with a live member's.
const (
	// LiveHashKVAlways compares with another healthy member, or with the
	// snapshot's own member when no other can answer (the default).
	LiveHashKVAlways = "always"
	// LiveHashKVAuto is LiveHashKVAlways except on a single-member cluster,
	// where the comparison is deferred: there the live member is the
	// snapshot's own, its hash checks the same data a drill's restored
	// member checks, and etcd blocks the cluster's only member's writes
	// while it hashes.
	LiveHashKVAuto = "auto"
	// LiveHashKVDefer never asks a live member during a backup; the drill
	// compares the file's HashKV with the restored member's. Member
	// divergence is then not detected.
	LiveHashKVDefer = "defer"
)

// ValidateLiveHashKV reports whether mode is a live HashKV mode ("" means
// LiveHashKVAlways).
func ValidateLiveHashKV(mode string) error {
	switch mode {
	case "", LiveHashKVAlways, LiveHashKVAuto, LiveHashKVDefer:
		return nil
	}
	return fmt.Errorf("%q is not %q, %q or %q", mode, LiveHashKVAlways, LiveHashKVAuto, LiveHashKVDefer)
}

// DefaultDialTimeout is the connection and per-endpoint status timeout.
const DefaultDialTimeout = 5 * time.Second

// Config says how to reach etcd. Field names follow etcdctl's flags.
type Config struct {
	// Endpoints are the client URLs of the members (--endpoints), e.g.
	// https://10.0.0.1:2379. A snapshot is always streamed from exactly one.
	Endpoints []string
	// CACert is the path of the PEM CA bundle that signs the server
	// certificates (--cacert). Empty: system roots when TLS is used.
	CACert string
	// Cert and Key are the paths of the PEM client certificate and its key
	// (--cert, --key), for clusters with client-certificate authentication.
	Cert, Key string
	// User and Password authenticate with etcd's own auth (--user,
	// --password). Snapshots need a user with the root role.
	User     string
	Password Secret
	// DialTimeout bounds connecting to one endpoint and asking its status.
	// Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// Member says which member to snapshot: "follower" (the default),
	// "leader", "any" (endpoint order) or one endpoint URL. It is a
	// preference: when that member cannot serve, the next one is used.
	Member string
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Member == "" {
		c.Member = MemberFollower
	}
	return c
}

// Validate reports the first configuration error, naming the setting.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("endpoints: empty; set --endpoints (e.g. https://127.0.0.1:2379)")
	}
	seen := make(map[string]bool)
	for i, ep := range c.Endpoints {
		if err := ValidateEndpoint(ep); err != nil {
			return fmt.Errorf("endpoints: entry %d: %w", i+1, err)
		}
		if seen[normalizeEndpoint(ep)] {
			return fmt.Errorf("endpoints: %q is listed twice", ep)
		}
		seen[normalizeEndpoint(ep)] = true
	}
	switch {
	case c.Cert != "" && c.Key == "":
		return errors.New("cert set without key: set --key to the client certificate's private key")
	case c.Key != "" && c.Cert == "":
		return errors.New("key set without cert: set --cert to the client certificate")
	case c.User == "" && c.Password != "":
		return errors.New("password set without user: set --user")
	case c.User != "" && c.Password == "":
		return fmt.Errorf("user %q set without password: set --password", c.User)
	case strings.Contains(c.User, ":"):
		return errors.New("user: contains ':'; give the password with --password")
	case c.DialTimeout < 0:
		return fmt.Errorf("dial timeout: %s is negative", c.DialTimeout)
	}
	switch c.Member {
	case "", MemberFollower, MemberLeader, MemberAny:
	default:
		if err := ValidateEndpoint(c.Member); err != nil {
			return fmt.Errorf("member: not %q, %q, %q or an endpoint URL: %w",
				MemberFollower, MemberLeader, MemberAny, err)
		}
		if !seen[normalizeEndpoint(c.Member)] {
			return fmt.Errorf("member: %q is not one of the endpoints %v", c.Member, c.Endpoints)
		}
	}
	return nil
}

// ValidateEndpoint is the one rule for an etcd endpoint (the configuration
// checks etcd.endpoints and etcd.member with it): what etcdctl accepts,
// scheme://host:port with scheme http, https, unix or unixs, or a bare
// host:port; never credentials (user:password@host: etcd's own auth takes
// them as User and Password). Its errors name the endpoint, except one that
// holds credentials.
func ValidateEndpoint(ep string) error {
	if ep == "" {
		return errors.New("empty")
	}
	if hasUserInfo(ep) {
		return errors.New("holds credentials (user:password@): give them as the user and password settings (--user, ETCDCTL_PASSWORD)")
	}
	if strings.TrimSpace(ep) != ep {
		return fmt.Errorf("%q has leading or trailing spaces", ep)
	}
	if !strings.Contains(ep, "://") {
		if strings.HasPrefix(ep, "unix:") || strings.HasPrefix(ep, "unixs:") {
			return nil
		}
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return fmt.Errorf("%q: want scheme://host:port or host:port: %w", ep, err)
		}
		return nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Errorf("%q: %w", ep, errors.Unwrap(err))
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Errorf("%q has no host", ep)
		}
	case "unix", "unixs":
	default:
		return fmt.Errorf("%q: scheme %q is not http, https, unix or unixs", ep, u.Scheme)
	}
	return nil
}

// hasUserInfo reports whether an endpoint names credentials before its
// host (user:password@host).
func hasUserInfo(ep string) bool {
	if _, rest, ok := strings.Cut(ep, "://"); ok {
		ep = rest
	}
	host, _, _ := strings.Cut(ep, "/")
	return strings.Contains(host, "@")
}

// normalizeEndpoint makes endpoints comparable: no trailing slash, lower
// case scheme and host.
func normalizeEndpoint(ep string) string {
	return strings.ToLower(strings.TrimRight(ep, "/"))
}

// ClientConfig builds the etcd client configuration for all endpoints: TLS
// from the CA and client certificate files (errors name the file), auth and
// the dial timeout. The client logs nothing (its zap logger is a no-op):
// this package reports what matters through its errors and slog.
func (c Config) ClientConfig() (clientv3.Config, error) {
	if err := c.Validate(); err != nil {
		return clientv3.Config{}, err
	}
	c = c.withDefaults()
	cc := clientv3.Config{
		Endpoints:   append([]string(nil), c.Endpoints...),
		DialTimeout: c.DialTimeout,
		Username:    c.User,
		Password:    c.Password.Reveal(),
		Logger:      zap.NewNop(),
		// Snapshots of large databases arrive in many messages; keep the
		// connection alive through quiet phases.
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return clientv3.Config{}, err
	}
	cc.TLS = tlsCfg
	return cc, nil
}

// tlsConfig returns nil when TLS is not configured and no endpoint asks for
// it.
func (c Config) tlsConfig() (*tls.Config, error) {
	needTLS := c.CACert != "" || c.Cert != ""
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs:") {
			needTLS = true
		}
	}
	if !needTLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACert != "" {
		pem, err := os.ReadFile(c.CACert)
		if err != nil {
			return nil, fmt.Errorf("read CA file %s (--cacert): %w", c.CACert, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read CA file %s (--cacert): no PEM certificate found", c.CACert)
		}
		cfg.RootCAs = pool
	}
	if c.Cert != "" {
		certPEM, err := os.ReadFile(c.Cert)
		if err != nil {
			return nil, fmt.Errorf("read client certificate file %s (--cert): %w", c.Cert, err)
		}
		keyPEM, err := os.ReadFile(c.Key)
		if err != nil {
			return nil, fmt.Errorf("read client key file %s (--key): %w", c.Key, err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load client certificate %s (--cert) with key %s (--key): %w", c.Cert, c.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// forEndpoint returns a client configuration that talks to ep only.
func forEndpoint(cc clientv3.Config, ep string) clientv3.Config {
	cc.Endpoints = []string{ep}
	return cc
}
