package etcdtest_test

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// proxyClient is an etcd client whose only endpoint is the proxy's URL.
func proxyClient(t *testing.T, c *etcdtest.Cluster, p *etcdtest.Proxy) *clientv3.Client {
	t.Helper()
	cfg := c.ClientConfig()
	cfg.Endpoints = []string{p.URL}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("client through the proxy %s: %v", p.URL, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// getVersion sends GET /version (an HTTP request the member's client port
// answers next to gRPC) to the proxy at addr and returns what came back
// until the connection ended, and how it ended (nil: a clean close).
func getVersion(t *testing.T, addr string) ([]byte, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /version HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return io.ReadAll(conn)
}

// TestProxy: the proxy in front of a real member passes etcd traffic, over
// TCP (the member's scheme) and over a unix socket, counts the connections
// it accepted, and with CutAfter resets a connection after that many bytes
// from the member while a shorter response passes.
func TestProxy(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	m := c.Members[0]

	t.Run("counts connections", func(t *testing.T) {
		p := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{})
		if want := "http://127.0.0.1:"; !strings.HasPrefix(p.URL, want) {
			t.Errorf("URL = %s, want %s...", p.URL, want)
		}
		if n := p.Accepted(); n != 0 {
			t.Errorf("Accepted = %d before any client, want 0", n)
		}
		putGet(t, proxyClient(t, c, p))
		putGet(t, proxyClient(t, c, p))
		if n := p.Accepted(); n != 2 {
			t.Errorf("Accepted = %d after two clients, want 2", n)
		}
		if n := p.Cuts(); n != 0 {
			t.Errorf("Cuts = %d without CutAfter, want 0", n)
		}
	})

	t.Run("unix socket", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "etcd.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		p := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{Listener: l})
		if want := "unix://" + sock; p.URL != want {
			t.Errorf("URL = %s, want %s", p.URL, want)
		}
		putGet(t, proxyClient(t, c, p))
		if n := p.Accepted(); n != 1 {
			t.Errorf("Accepted = %d after one client, want 1", n)
		}
	})

	t.Run("cut after", func(t *testing.T) {
		const cutAfter = 20
		cut := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{CutAfter: cutAfter})
		got, err := getVersion(t, strings.TrimPrefix(cut.URL, "http://"))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read through the cutting proxy ended with %v after %d bytes, want a connection reset", err, len(got))
		}
		if len(got) > cutAfter {
			t.Errorf("read %d bytes through the proxy, want at most CutAfter=%d: %q", len(got), cutAfter, got)
		}
		if n := cut.Cuts(); n != 1 {
			t.Errorf("Cuts = %d, want 1", n)
		}

		pass := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{CutAfter: 1 << 20})
		got, err = getVersion(t, strings.TrimPrefix(pass.URL, "http://"))
		if err != nil || !strings.Contains(string(got), "etcdserver") {
			t.Errorf("GET /version under CutAfter: %q, %v; want the whole answer", got, err)
		}
		if n := pass.Cuts(); n != 0 {
			t.Errorf("Cuts = %d for a response shorter than CutAfter, want 0", n)
		}
	})

	t.Run("cut", func(t *testing.T) {
		p := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{})
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Accepted and tracked once it forwarded a byte back.
		if _, err := io.WriteString(conn, "GET /version HTTP/1.1\r\nHost: etcd\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if n := p.Cut(); n != 1 || p.Cuts() != 1 {
			t.Fatalf("Cut = %d, Cuts = %d with one open connection, want 1 and 1", n, p.Cuts())
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(conn); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read after Cut: %v, want a connection reset", err)
		}
		// New connections pass.
		putGet(t, proxyClient(t, c, p))
	})

	t.Run("stall after", func(t *testing.T) {
		const stallAfter = 20
		p := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{StallAfter: stallAfter})
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /version HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		if _, err := io.ReadFull(conn, buf[:stallAfter]); err != nil {
			t.Fatalf("read the first %d bytes through the stalling proxy: %v", stallAfter, err)
		}
		// Nothing more comes, and the connection stays open: the read
		// ends at the deadline. (A proxy that does not stall sends the
		// rest at once, so the deadline does not decide the result.)
		if err := conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if n, err := conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("read after StallAfter = %d bytes, %v; want nothing until the deadline", n, err)
		}
		select {
		case <-p.Stalled():
		default:
			t.Error("Stalled is not closed after a stall")
		}
		if n := p.Stalls(); n != 1 {
			t.Errorf("Stalls = %d, want 1", n)
		}
	})
}
