package etcdtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// ConnCounter is a TCP proxy in front of one member's client URL that
// counts the connections it accepts: every dial of that member by a client
// (gRPC connection, probe or health check) shows here. Bytes pass through
// untouched, so TLS and etcd auth work as against the member itself.
type ConnCounter struct {
	// URL is the proxy's client URL: the member's URL with the proxy's
	// address (https:// when the member serves TLS; the test certificates
	// name 127.0.0.1, so they stay valid).
	URL      string
	accepted atomic.Int64
}

// Accepted returns the number of connections accepted so far.
func (p *ConnCounter) Accepted() int { return int(p.accepted.Load()) }

// CountConns starts a ConnCounter in front of the member at clientURL. It
// stops at test cleanup, after its connections are closed.
func CountConns(t testing.TB, clientURL string) *ConnCounter {
	t.Helper()
	u, err := url.Parse(clientURL)
	if err != nil {
		t.Fatalf("count connections to %s: %v", clientURL, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("count connections to %s: %v", clientURL, err)
	}
	p := &ConnCounter{URL: u.Scheme + "://" + l.Addr().String()}
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
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			track(c)
			track(s)
			wg.Go(func() { _, _ = io.Copy(s, c); s.Close() })
			wg.Go(func() { _, _ = io.Copy(c, s); c.Close() })
		}
	})
	return p
}

// Authentications returns how many Authenticate requests the in-process
// etcd members of this test binary have handled so far (Handled).
func Authentications(t testing.TB) int {
	t.Helper()
	return Handled(t, "Authenticate")
}

// Handled returns how many requests of the gRPC method (its short name,
// e.g. "Authenticate", "HashKV") the in-process etcd members of this test
// binary have handled so far, from etcd's gRPC server metrics
// (grpc_server_handled_total, in the default Prometheus registry, shared
// by all members). Take the difference around the code under test.
func Handled(t testing.TB, method string) int {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("gather etcd's metrics: %v", err)
	}
	var n float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		found = true
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" && l.GetValue() == method {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	if !found {
		t.Fatal("etcd's gRPC server metrics (grpc_server_handled_total) are not in the default registry")
	}
	return int(n)
}
