package restore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a throwaway single-member etcd server on loopback, embedded in
// this process: for drills (booting a restored data dir) and the demo.
type Etcd struct {
	e *embed.Etcd
	// ClientURL is where clients reach it (http://127.0.0.1:PORT).
	ClientURL string
	// PeerURL is its (loopback) peer URL.
	PeerURL string
	// Name is the member name.
	Name string
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
}

// StartEtcd starts the server and waits until it serves clients.
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
	clientURL, err := FreeLoopbackURL()
	if err != nil {
		return nil, err
	}
	cu, _ := url.Parse(clientURL)
	pu, err := url.Parse(o.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("peer URL %q: %w", o.PeerURL, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.DataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
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
	return &Etcd{e: e, ClientURL: clientURL, PeerURL: o.PeerURL, Name: o.Name}, nil
}

// Close stops the server and waits for it.
func (s *Etcd) Close() {
	s.e.Close()
	<-s.e.Server.StopNotify()
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
