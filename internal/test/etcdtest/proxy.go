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
	// StallAfter, when > 0, stops passing bytes from the member to the
	// client once a connection has carried that many, and holds the
	// connection open until cleanup: a member that hangs in the middle of
	// a snapshot stream, so that a test can act while the stream is under
	// way. 0: never. At most one of CutAfter and StallAfter.
	StallAfter int64
}

// Proxy forwards connections to one etcd member's client URL. Bytes pass
// through untouched, so TLS and etcd auth work as against the member
// itself. It counts the connections it accepts (every dial of the member by
// a client: gRPC connection, probe or health check shows here) and, with
// ProxyOptions.CutAfter or StallAfter, breaks them off or stalls them
// mid-stream; Cut resets every open connection at once.
type Proxy struct {
	// URL is the proxy's client URL: the member's URL with the proxy's
	// address (https:// when the member serves TLS; the test certificates
	// name 127.0.0.1, so they stay valid), or unix://path for a unix
	// socket listener.
	URL string

	target     string // host:port of the member
	cutAfter   int64
	stallAfter int64
	stopped    chan struct{} // closed at cleanup: stalled connections end
	stalled    chan struct{} // closed at the first stall
	stallOnce  sync.Once
	mu         sync.Mutex
	conns      [][2]net.Conn // open connections: client side, member side
	accepted   atomic.Int64
	cuts       atomic.Int64
	stalls     atomic.Int64
}

// Accepted returns the number of connections accepted so far.
func (p *Proxy) Accepted() int { return int(p.accepted.Load()) }

// Cuts returns the number of connections reset so far, after
// ProxyOptions.CutAfter bytes or by Cut.
func (p *Proxy) Cuts() int { return int(p.cuts.Load()) }

// Stalls returns the number of connections stalled after
// ProxyOptions.StallAfter bytes so far.
func (p *Proxy) Stalls() int { return int(p.stalls.Load()) }

// Stalled is closed when the first connection stalls (StallAfter): wait on
// it to act while a stream hangs half way.
func (p *Proxy) Stalled() <-chan struct{} { return p.stalled }

// NewProxy starts a Proxy in front of the member at clientURL. It stops at
// test cleanup, after closing its listener and its connections.
func NewProxy(t testing.TB, clientURL string, opts ProxyOptions) *Proxy {
	t.Helper()
	u, err := url.Parse(clientURL)
	if err != nil {
		t.Fatalf("proxy to etcd member %s: %v", clientURL, err)
	}
	if opts.CutAfter > 0 && opts.StallAfter > 0 {
		t.Fatalf("proxy to etcd member %s: CutAfter and StallAfter both set, want at most one", clientURL)
	}
	l := opts.Listener
	if l == nil {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("proxy to etcd member %s: %v", clientURL, err)
		}
	}
	p := &Proxy{URL: u.Scheme + "://" + l.Addr().String(), target: u.Host,
		cutAfter: opts.CutAfter, stallAfter: opts.StallAfter, stopped: make(chan struct{}), stalled: make(chan struct{})}
	if l.Addr().Network() == "unix" {
		p.URL = "unix://" + l.Addr().String()
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(p.stopped)
		l.Close()
		p.mu.Lock()
		for _, cs := range p.conns {
			cs[0].Close()
			cs[1].Close()
		}
		p.mu.Unlock()
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
			p.mu.Lock()
			p.conns = append(p.conns, [2]net.Conn{c, s})
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(s, c); s.Close() })
			wg.Go(func() { p.toClient(c, s); p.untrack(c) })
		}
	})
	return p
}

// Cut resets every connection open now, as when the member's process
// died or the network dropped: each client sees a TCP reset wherever its
// streams were. New connections pass as before. It returns how many it
// cut (counted in Cuts).
func (p *Proxy) Cut() int {
	p.mu.Lock()
	cs := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range cs {
		if tc, ok := c[0].(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c[0].Close()
		c[1].Close()
	}
	p.cuts.Add(int64(len(cs)))
	return len(cs)
}

// untrack forgets a connection that ended.
func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, cs := range p.conns {
		if cs[0] == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

// toClient copies the member's bytes to the client, and cuts or stalls
// the connection after p.cutAfter or p.stallAfter bytes when one is set.
func (p *Proxy) toClient(c, s net.Conn) {
	defer s.Close()
	defer c.Close()
	limit := max(p.cutAfter, p.stallAfter)
	if limit <= 0 {
		_, _ = io.Copy(c, s)
		return
	}
	if n, _ := io.CopyN(c, s, limit); n < limit {
		return // the member or the client closed first
	}
	if p.stallAfter > 0 {
		p.stalls.Add(1)
		p.stallOnce.Do(func() { close(p.stalled) })
		<-p.stopped
		return
	}
	p.cuts.Add(1)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends a reset, as from a killed process
	}
}
