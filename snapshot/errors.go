package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrTrailer means the snapshot stream did not end with a valid sha256
// trailer: it was missing, short, or did not match the bytes received. The
// stream was cut or corrupted in transit; taking the snapshot again usually
// helps.
var ErrTrailer = errors.New("snapshot trailer check failed")

// ErrStalled means no bytes arrived from the snapshot stream for
// Options.StallTimeout.
var ErrStalled = errors.New("snapshot stream stalled")

// MemberError is returned by Take when the snapshot stream from one member
// failed after bytes had arrived (the member stopped or restarted, the
// connection broke, the stream stalled or failed its trailer check). The
// member may be at fault, not the cluster: another member can serve the
// snapshot, but only from the start, into a new spool file.
type MemberError struct {
	// Endpoint and Member name the member that failed.
	Endpoint, Member string
	// Err says how it failed.
	Err error
}

func (e *MemberError) Error() string { return e.Err.Error() }
func (e *MemberError) Unwrap() error { return e.Err }

// explain wraps err from talking to endpoint with what it means and what the
// user should check. op names the operation ("status", "snapshot").
func explain(op, endpoint string, cfg Config, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %s: %s: %w", op, endpoint, diagnose(cfg, err), err)
}

// diagnose maps an error from the etcd client (gRPC status, TLS, dial) to a
// short cause and the flags to check. gRPC flattens most transport errors
// into text, so this matches on the well-known messages of crypto/tls,
// crypto/x509, net and etcd's rpctypes.
func diagnose(cfg Config, err error) string {
	msg := err.Error()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrStalled):
		return "the member stopped sending data; it may be overloaded or the network stalled; retry, or raise the stall timeout"
	case has("certificate signed by unknown authority"):
		if cfg.CACert == "" {
			return "the server certificate is not signed by a trusted CA; set --cacert to the CA that signed etcd's server certificate"
		}
		return fmt.Sprintf("the server certificate is not signed by the CA in %s; check --cacert", cfg.CACert)
	case has("certificate is valid for", "certificate is not valid for any names"):
		return "the server certificate does not name this endpoint's host; use a host name from the certificate in --endpoints"
	case has("certificate has expired", "certificate is not yet valid"):
		return "a certificate is expired or not yet valid; check the certificates and the clock"
	case has("tls: certificate required") && cfg.Cert != "":
		// Go sends no certificate when it is not signed by a CA the
		// server lists as acceptable.
		return fmt.Sprintf("the server did not accept the client certificate %s; check --cert/--key (they must be signed by a CA etcd trusts for clients)", cfg.Cert)
	case has("tls: certificate required"):
		return "the server requires a client certificate; set --cert and --key"
	case has("remote error: tls:", "tls: bad certificate", "tls: unknown certificate authority"):
		return "the server rejected the client certificate; check --cert/--key (they must be signed by a CA etcd trusts for clients)"
	case errors.Is(err, errProbeClosed):
		return "the server closed the connection after the TLS handshake; check --cert/--key (they must be signed by a CA etcd trusts for clients)"
	case errors.Is(err, errProbeNoH2):
		return "the endpoint does not speak plain-text gRPC; if etcd serves TLS there, use https:// and --cacert"
	case has("first record does not look like a TLS handshake", "server gave HTTP response"):
		return "the endpoint does not speak TLS; use http:// or check the port in --endpoints"
	case has("authentication failed"):
		return fmt.Sprintf("authentication failed for user %q; check --user/--password", cfg.User)
	case has("user name is empty", "user name not found", "invalid auth token"):
		if cfg.User == "" {
			return "the cluster has authentication enabled; set --user and --password"
		}
		return fmt.Sprintf("authentication failed for user %q; check --user/--password", cfg.User)
	case has("permission denied"):
		return fmt.Sprintf("user %q may not take snapshots; it needs the root role", cfg.User)
	case has("connection refused"):
		return "connection refused; check --endpoints and that etcd is running there"
	case has("no such host"):
		return "host not found; check --endpoints"
	case has("error reading server preface", "connection closed before server preface", "connection reset by peer", "EOF"):
		return "the server closed the connection; if etcd serves TLS use https:// with --cacert, and check --cert/--key"
	case errors.Is(err, context.DeadlineExceeded), has("i/o timeout", "DeadlineExceeded", "deadline exceeded"):
		return "no answer in time; check --endpoints, the network and the TLS settings"
	default:
		return "check --endpoints, TLS and credentials"
	}
}

// redactedError hides a secret that might have been echoed back in an error
// text (etcd never does, but a proxy or a future client might).
type redactedError struct {
	err    error
	secret string
}

func (e *redactedError) Error() string {
	return strings.ReplaceAll(e.err.Error(), e.secret, redacted)
}

func (e *redactedError) Unwrap() error { return e.err }

// redact makes sure the password never appears in err's text.
func redact(err error, s Secret) error {
	if err == nil || s == "" {
		return err
	}
	return &redactedError{err: err, secret: s.Reveal()}
}
