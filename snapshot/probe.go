package snapshot

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// probeTimeout bounds how long probe waits for the server's first HTTP/2
// frame; an answer that takes longer leaves the diagnosis to the client.
const probeTimeout = time.Second

// h2Preface is the HTTP/2 client connection preface followed by an empty
// SETTINGS frame; a gRPC server answers it with its own SETTINGS frame.
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")

// errProbeNoH2 is returned for a plain-text endpoint that did not answer
// like an HTTP/2 server: usually it serves TLS.
var errProbeNoH2 = errors.New("no plain-text HTTP/2 answer")

// errProbeClosed is returned when a TLS server hangs up right after the
// handshake: it did not like the client certificate.
var errProbeClosed = errors.New("connection closed after the TLS handshake")

// probe connects to ep the way the gRPC client would (TCP or unix socket,
// TLS when the endpoint or configuration asks for it) and exchanges the
// HTTP/2 preface. It returns an error only when the connection definitely
// cannot work, with the real cause (connection refused, certificate
// rejected, TLS versus plain text) that the etcd client would otherwise
// hide behind "context deadline exceeded" while it keeps retrying. nil means
// the probe found nothing wrong, or could not tell in time.
func probe(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	network, addr, host, secure := splitEndpoint(ep)
	if secure && tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if !secure && network == "tcp" && strings.Contains(ep, "://") {
		tlsCfg = nil // http:// never uses TLS, whatever files are set
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil // slow, not refused: let the client decide
		}
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl) // best effort: a failure only makes the probe inconclusive
	}
	if tlsCfg != nil {
		cfg := tlsCfg.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			if isTimeout(err) {
				return nil
			}
			return err
		}
		conn = tc
	}
	if _, err := conn.Write(h2Preface); err != nil {
		if isTimeout(err) {
			return nil
		}
		return err
	}
	var hdr [9]byte
	n, err := io.ReadFull(conn, hdr[:])
	switch {
	case err == nil && hdr[3] == 0x4: // SETTINGS: an HTTP/2 server
		return nil
	case isTimeout(err):
		return nil
	case strings.Contains(fmt.Sprint(err), "remote error: tls"):
		return err // TLS 1.3 reports a rejected client certificate here
	case tlsCfg == nil:
		return errProbeNoH2
	case err != nil && n == 0:
		return fmt.Errorf("%w: %w", errProbeClosed, err)
	}
	return nil
}

// splitEndpoint returns how to dial ep: network, address, TLS server name
// and whether TLS is required by the scheme.
func splitEndpoint(ep string) (network, addr, host string, secure bool) {
	switch {
	case strings.HasPrefix(ep, "unix://"), strings.HasPrefix(ep, "unixs://"):
		secure = strings.HasPrefix(ep, "unixs://")
		addr = ep[strings.Index(ep, "://")+3:]
		return "unix", addr, host, secure
	case strings.HasPrefix(ep, "unix:"), strings.HasPrefix(ep, "unixs:"):
		secure = strings.HasPrefix(ep, "unixs:")
		addr = ep[strings.Index(ep, ":")+1:]
		return "unix", addr, host, secure
	}
	addr = ep
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		addr = u.Host
		secure = u.Scheme == "https"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return "tcp", addr, host, secure
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}
