package etcdtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// ProxyOptions configures NewProxy. The zero value is a plain TCP proxy on
// a free loopback port that only counts connections.
type ProxyOptions struct {
	// Listener is where the proxy accepts clients, e.g. a unix socket
	// (net.Listen("unix", path)); the proxy closes it at cleanup. Nil: a
	// new TCP listener on 127.0.0.1, on a free port.
	Listener net.Listener
	// CutAfter, when > 0, resets each connection once it has carried that
	// many bytes from the member to the client: to the client the member
	// died in the middle of a response, as a killed process does (a TCP
	// reset). Status requests are far smaller than a snapshot stream and
	// pass. 0: never.
	CutAfter int64
}

// Proxy forwards connections to one etcd member's client URL. Bytes pass
// through untouched, so TLS and etcd auth work as against the member
// itself. It counts the connections it accepts (every dial of the member by
// a client: gRPC connection, probe or health check shows here) and, with
// ProxyOptions.CutAfter, breaks them off mid-stream.
type Proxy struct {
	// URL is the proxy's client URL: the member's URL with the proxy's
	// address (https:// when the member serves TLS; the test certificates
	// name 127.0.0.1, so they stay valid), or unix://path for a unix
	// socket listener.
	URL string

	target   string // host:port of the member
	cutAfter int64
	accepted atomic.Int64
	cuts     atomic.Int64
}

// Accepted returns the number of connections accepted so far.
func (p *Proxy) Accepted() int { return int(p.accepted.Load()) }

// Cuts returns the number of connections reset after ProxyOptions.CutAfter
// bytes so far.
func (p *Proxy) Cuts() int { return int(p.cuts.Load()) }

// NewProxy starts a Proxy in front of the member at clientURL. It stops at
// test cleanup, after closing its listener and its connections.
func NewProxy(t testing.TB, clientURL string, opts ProxyOptions) *Proxy {
	t.Helper()
	u, err := url.Parse(clientURL)
	if err != nil {
		t.Fatalf("proxy to etcd member %s: %v", clientURL, err)
	}
	l := opts.Listener
	if l == nil {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("proxy to etcd member %s: %v", clientURL, err)
		}
	}
	p := &Proxy{URL: u.Scheme + "://" + l.Addr().String(), target: u.Host, cutAfter: opts.CutAfter}
	if l.Addr().Network() == "unix" {
		p.URL = "unix://" + l.Addr().String()
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			track(c)
			track(s)
			wg.Go(func() { _, _ = io.Copy(s, c); s.Close() })
			wg.Go(func() { p.toClient(c, s) })
		}
	})
	return p
}

// toClient copies the member's bytes to the client, and cuts the
// connection after p.cutAfter bytes when that is set.
func (p *Proxy) toClient(c, s net.Conn) {
	defer s.Close()
	defer c.Close()
	if p.cutAfter <= 0 {
		_, _ = io.Copy(c, s)
		return
	}
	if n, _ := io.CopyN(c, s, p.cutAfter); n < p.cutAfter {
		return // the member or the client closed first
	}
	p.cuts.Add(1)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends a reset, as from a killed process
	}
}
