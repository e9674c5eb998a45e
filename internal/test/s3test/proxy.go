package s3test

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FaultKind says what the proxy does to one request.
type FaultKind int

// The faults a Proxy can inject.
const (
	// FaultNone forwards the request unchanged.
	FaultNone FaultKind = iota
	// FaultStatus drains the request body and answers Status with an S3 XML
	// error body, without forwarding.
	FaultStatus
	// FaultReset reads Bytes of the request body, then resets the
	// connection (TCP RST), without forwarding.
	FaultReset
	// FaultStall waits Delay (or until the client gives up) and then
	// forwards the request.
	FaultStall
	// FaultTruncate forwards the request and passes on the response headers
	// (Content-Length included) but only Bytes of the body, then closes the
	// connection.
	FaultTruncate
	// FaultDrop forwards the request, lets the server act on it, throws
	// the response away and resets the connection: a lost response.
	FaultDrop
)

// Fault is what the proxy does to one request. Build one with Status, Reset,
// Stall, Truncate or Drop; the zero Fault forwards the request unchanged.
type Fault struct {
	Kind   FaultKind
	Status int           // FaultStatus
	Bytes  int64         // FaultReset, FaultTruncate
	Delay  time.Duration // FaultStall
}

// None forwards the request unchanged.
var None = Fault{}

// Status answers code (e.g. 500, 503) with an S3 XML error body.
func Status(code int) Fault { return Fault{Kind: FaultStatus, Status: code} }

// Reset reads n bytes of the request body and then resets the connection.
func Reset(n int64) Fault { return Fault{Kind: FaultReset, Bytes: n} }

// Stall holds the request for d before forwarding it.
func Stall(d time.Duration) Fault { return Fault{Kind: FaultStall, Delay: d} }

// Truncate cuts the response body after n bytes.
func Truncate(n int64) Fault { return Fault{Kind: FaultTruncate, Bytes: n} }

// Drop forwards the request and loses the response.
func Drop() Fault { return Fault{Kind: FaultDrop} }

// FaultFunc decides the fault for request r, the n-th request (1-based) of
// its operation Op(r) through the proxy, retries included.
type FaultFunc func(r *http.Request, n int) Fault

// Proxy is a reverse proxy in front of an S3 server that injects faults.
type Proxy struct {
	// URL is the proxy's base URL; point the client's endpoint at it.
	URL string

	srv     *httptest.Server
	rp      *httputil.ReverseProxy
	closing chan struct{}

	mu     sync.Mutex
	fault  FaultFunc
	counts map[string]int
}

// NewProxy starts a proxy on a free loopback port in front of target (a base
// URL such as Server.Endpoint) and closes it at cleanup. The Host header is
// passed through unchanged so that SigV4 signatures made for the proxy's
// address stay valid.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("proxy target %q: %v", target, err)
	}
	p := &Proxy{counts: map[string]int{}, closing: make(chan struct{})}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
		},
		// Flush as data arrives so that streamed bodies keep streaming.
		FlushInterval: -1,
		// Aborted copies (truncation, clients giving up) are expected here.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	t.Cleanup(func() {
		close(p.closing)
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
	return p
}

// SetFault installs fn as the fault plan; nil forwards everything. The
// per-operation counters are reset.
func (p *Proxy) SetFault(fn FaultFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = fn
	p.counts = map[string]int{}
}

// Count reports how many requests of operation op (as named by Op) the proxy
// has seen since the last SetFault.
func (p *Proxy) Count(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[op]
}

// Counts reports the requests the proxy has seen by operation (as named
// by Op) since the last SetFault or ResetCounts.
func (p *Proxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}

// ResetCounts sets the per-operation counters to zero, keeping the fault
// plan.
func (p *Proxy) ResetCounts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts = map[string]int{}
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	op := Op(r)
	p.mu.Lock()
	p.counts[op]++
	n := p.counts[op]
	fn := p.fault
	p.mu.Unlock()

	f := None
	if fn != nil {
		f = fn(r, n)
	}
	switch f.Kind {
	case FaultStatus:
		_, _ = io.Copy(io.Discard, r.Body)
		writeS3Error(w, f.Status)
	case FaultReset:
		_, _ = io.CopyN(io.Discard, r.Body, f.Bytes)
		resetConn(w)
	case FaultStall:
		select {
		case <-time.After(f.Delay):
			p.rp.ServeHTTP(w, r)
		case <-r.Context().Done():
		case <-p.closing:
		}
	case FaultTruncate:
		p.rp.ServeHTTP(&truncatingWriter{ResponseWriter: w, left: f.Bytes}, r)
	case FaultDrop:
		p.rp.ServeHTTP(httptest.NewRecorder(), r)
		resetConn(w)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

func writeS3Error(w http.ResponseWriter, status int) {
	code := "InternalError"
	if status == http.StatusServiceUnavailable {
		code = "SlowDown"
	}
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>fault injected by s3test proxy</Message><RequestId>s3test</RequestId></Error>`, code)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// resetConn takes over the connection and closes it with a TCP RST.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// truncatingWriter passes on the headers and the first left bytes of the
// body, then hijacks and closes the connection so the client sees a body
// shorter than its Content-Length.
type truncatingWriter struct {
	http.ResponseWriter
	left int64
	done bool
}

func (tw *truncatingWriter) Write(b []byte) (int, error) {
	if tw.done {
		return 0, net.ErrClosed
	}
	if int64(len(b)) <= tw.left {
		tw.left -= int64(len(b))
		return tw.ResponseWriter.Write(b)
	}
	if _, err := tw.ResponseWriter.Write(b[:tw.left]); err != nil {
		return 0, err
	}
	tw.done = true
	rc := http.NewResponseController(tw.ResponseWriter)
	_ = rc.Flush()
	conn, buf, err := rc.Hijack()
	if err == nil {
		_ = flushBuffered(buf)
		_ = conn.Close()
	}
	return 0, net.ErrClosed
}

func flushBuffered(buf *bufio.ReadWriter) error {
	if buf == nil {
		return nil
	}
	return buf.Flush()
}

// Flush lets the reverse proxy stream through the truncating writer.
func (tw *truncatingWriter) Flush() {
	if !tw.done {
		_ = http.NewResponseController(tw.ResponseWriter).Flush()
	}
}

// Unwrap gives http.ResponseController access to the real writer.
func (tw *truncatingWriter) Unwrap() http.ResponseWriter { return tw.ResponseWriter }

// Op names the S3 operation of a path-style request: "PutObject",
// "UploadPart", "CreateMultipartUpload", "CompleteMultipartUpload",
// "AbortMultipartUpload", "ListMultipartUploads", "ListParts", "GetObject",
// "HeadObject", "DeleteObject", "ListObjectsV2", "HeadBucket",
// "CreateBucket", "DeleteBucket", or METHOD+"?"+subresource (e.g.
// "PUT?retention") for the rest.
func Op(r *http.Request) string {
	q := r.URL.Query()
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	hasKey := key != ""
	_, uploads := q["uploads"]
	_, uploadID := q["uploadId"]
	for _, sub := range []string{"retention", "legal-hold", "versioning", "object-lock", "tagging", "acl", "versions", "policy", "location", "attributes", "delete"} {
		if _, ok := q[sub]; ok {
			return r.Method + "?" + sub
		}
	}
	switch r.Method {
	case http.MethodPut:
		switch {
		case uploadID:
			return "UploadPart"
		case hasKey:
			return "PutObject"
		default:
			return "CreateBucket"
		}
	case http.MethodPost:
		switch {
		case uploads:
			return "CreateMultipartUpload"
		case uploadID:
			return "CompleteMultipartUpload"
		}
	case http.MethodGet:
		switch {
		case uploads:
			return "ListMultipartUploads"
		case uploadID:
			return "ListParts"
		case hasKey:
			return "GetObject"
		default:
			return "ListObjectsV2"
		}
	case http.MethodHead:
		if hasKey {
			return "HeadObject"
		}
		return "HeadBucket"
	case http.MethodDelete:
		switch {
		case uploadID:
			return "AbortMultipartUpload"
		case hasKey:
			return "DeleteObject"
		default:
			return "DeleteBucket"
		}
	}
	return r.Method
}
