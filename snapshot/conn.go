package snapshot

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
)

// Conn runs call with the gRPC connection of one of the session's members
// (the first endpoint, in Config order, whose connection is ready) and a
// context that carries the session's auth token, logging in first when
// the session has a user. A call refused for a stale token is made once
// more after a new login. It is for the RPCs and streams the session
// does not wrap (capture's raw watch stream and its lease lookups): a
// stream opened in call lives until the caller's ctx ends, not until
// Conn returns. The error names the endpoint.
func (s *Session) Conn(ctx context.Context, call func(ctx context.Context, endpoint string, conn *grpc.ClientConn) error) error {
	var errs []error
	for i, ep := range s.cfg.Endpoints {
		cli := s.clis[i]
		if err := s.ready(ctx, cli); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("connect to %s: %w", ep, ctx.Err())
			}
			errs = append(errs, redact(explain("connect to", ep, s.cfg, err), s.cfg.Password))
			continue
		}
		conn := cli.ActiveConnection()
		return s.withToken(ctx, ep, func(ctx context.Context) error { return call(ctx, ep, conn) })
	}
	return fmt.Errorf("no etcd endpoint is ready: %w", errors.Join(errs...))
}
