package etcdtest_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// putGet writes a key through cli and reads it back.
func putGet(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/etcdtest/k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := cli.Get(ctx, "/etcdtest/k")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get /etcdtest/k = %v, want one key with value v", resp.Kvs)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    etcdtest.Options
		members int
		scheme  string
	}{
		{name: "one member", opts: etcdtest.Options{}, members: 1, scheme: "http://"},
		{name: "three members", opts: etcdtest.Options{Members: 3}, members: 3, scheme: "http://"},
		{name: "three members tls auth", opts: etcdtest.Options{Members: 3, TLS: true, Auth: true}, members: 3, scheme: "https://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := etcdtest.Start(t, tt.opts)
			if got := len(c.Members); got != tt.members {
				t.Fatalf("len(Members) = %d, want %d", got, tt.members)
			}
			eps := c.Endpoints()
			if len(eps) != tt.members {
				t.Fatalf("Endpoints() = %v, want %d", eps, tt.members)
			}
			for _, ep := range eps {
				if !strings.HasPrefix(ep, tt.scheme+"127.0.0.1:") {
					t.Errorf("endpoint %q does not start with %s127.0.0.1:", ep, tt.scheme)
				}
			}
			cli := c.Client(t)
			putGet(t, cli)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			resp, err := cli.MemberList(ctx)
			if err != nil {
				t.Fatalf("member list: %v", err)
			}
			var got []string
			for _, m := range resp.Members {
				got = append(got, m.ClientURLs...)
			}
			if diff := cmp.Diff(eps, got, sortStrings); diff != "" {
				t.Errorf("member client URLs (-endpoints +member list):\n%s", diff)
			}

			leader := c.Leader(t)
			st, err := cli.Status(ctx, leader.ClientURL)
			if err != nil {
				t.Fatalf("status of %s: %v", leader.Name, err)
			}
			if st.Leader != st.Header.MemberId {
				t.Errorf("Leader() = %s, but it reports leader %x and is %x", leader.Name, st.Leader, st.Header.MemberId)
			}
		})
	}
}

var sortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func TestTLSAuth(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{TLS: true, Auth: true})
	if c.User != "root" || c.Password == "" {
		t.Fatalf("User, Password = %q, %q; want root and a password", c.User, c.Password)
	}
	otherCA, otherCert, otherKey := etcdtest.OtherCA(t)

	tlsConfig := func(t *testing.T, info transport.TLSInfo) clientv3.Config {
		t.Helper()
		tc, err := info.ClientConfig()
		if err != nil {
			t.Fatalf("tls config: %v", err)
		}
		cfg := c.ClientConfig()
		cfg.TLS = tc
		return cfg
	}

	t.Run("right material", func(t *testing.T) {
		putGet(t, c.Client(t))
	})
	t.Run("file modes", func(t *testing.T) {
		for _, f := range []string{c.CAFile, c.CertFile, c.KeyFile, otherCA, otherCert, otherKey} {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != 0o600 {
				t.Errorf("mode of %s = %o, want 600", f, got)
			}
		}
	})

	tests := []struct {
		name    string
		cfg     func(t *testing.T) clientv3.Config
		wantErr error // nil: any error will do
	}{
		{
			name: "no client certificate",
			cfg: func(t *testing.T) clientv3.Config {
				return tlsConfig(t, transport.TLSInfo{TrustedCAFile: c.CAFile})
			},
		},
		{
			name: "client certificate from another CA",
			cfg: func(t *testing.T) clientv3.Config {
				return tlsConfig(t, transport.TLSInfo{TrustedCAFile: c.CAFile, CertFile: otherCert, KeyFile: otherKey})
			},
		},
		{
			name: "server not trusted",
			cfg: func(t *testing.T) clientv3.Config {
				return tlsConfig(t, transport.TLSInfo{TrustedCAFile: otherCA, CertFile: c.CertFile, KeyFile: c.KeyFile})
			},
		},
		{
			name: "plain http",
			cfg: func(t *testing.T) clientv3.Config {
				cfg := c.ClientConfig()
				cfg.TLS = nil
				return cfg
			},
		},
		{
			name: "wrong password",
			cfg: func(t *testing.T) clientv3.Config {
				cfg := c.ClientConfig()
				cfg.Password = "wrong"
				return cfg
			},
			wantErr: rpctypes.ErrAuthFailed,
		},
		{
			name: "no credentials",
			cfg: func(t *testing.T) clientv3.Config {
				cfg := c.ClientConfig()
				cfg.Username, cfg.Password = "", ""
				return cfg
			},
			wantErr: rpctypes.ErrPermissionDenied,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg(t)
			cfg.DialTimeout = 2 * time.Second
			err := tryGet(t, cfg)
			if err == nil {
				t.Fatal("get succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(rpctypes.Error(err), tt.wantErr) {
				t.Errorf("get error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// tryGet creates a client (which may already fail, e.g. when authenticating)
// and reads a key with it.
func tryGet(t *testing.T, cfg clientv3.Config) error {
	t.Helper()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "/etcdtest/k")
	return err
}

func TestMemberStop(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cli := c.Client(t)
	putGet(t, cli)

	old := c.Leader(t)
	old.Stop()
	old.Stop() // idempotent

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := cli.Status(ctx, old.ClientURL); err == nil {
		t.Errorf("status of stopped member %s succeeded, want an error", old.Name)
	}

	leader := c.Leader(t)
	if leader == old {
		t.Fatalf("Leader() = stopped member %s", old.Name)
	}
	// The remaining two members still form a quorum.
	putGet(t, cli)

	// With two of three down there is no quorum: writes fail.
	for _, m := range c.Members {
		if m != old && m != leader {
			m.Stop()
		}
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel2()
	if _, err := cli.Put(ctx2, "/etcdtest/k", "v2"); err == nil {
		t.Error("put with one of three members succeeded, want an error")
	}
}

func TestOtherCA(t *testing.T) {
	t.Parallel()
	ca, cert, key := etcdtest.OtherCA(t)
	if _, err := (transport.TLSInfo{TrustedCAFile: ca, CertFile: cert, KeyFile: key}).ClientConfig(); err != nil {
		t.Fatalf("OtherCA material does not load: %v", err)
	}
}
