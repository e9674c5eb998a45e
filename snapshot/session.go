package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
)

// Session is one job's connection to an etcd cluster: one gRPC connection
// per endpoint of its Config, each opened once, and one login shared by
// all of them. Every request of the job (status, member list, the snapshot
// stream, HashKV) goes over the connection of the member it is for, so a
// backup costs one TCP connection and one TLS handshake per member and one
// user/password login (a bcrypt check on the server) in all, however many
// requests it makes. A connection that breaks is re-established by gRPC.
//
// Design: one clientv3.Client per endpoint, each confined to its endpoint
// (clientv3 routes a client's calls over a balancer of all its endpoints,
// and its per-endpoint Maintenance calls open a new connection per call);
// requests are made with the etcdserverpb stubs on the client's connection,
// which keeps clientv3's interceptors and keepalive. The clients carry no
// credentials: etcd's auth token is valid on every member (the login is a
// raft request), so the session logs in on one member and sends the token
// with each request, logging in again only when etcd says the token went
// stale (an expired simple token, an auth revision change).
//
// A Session is safe for concurrent use. Close it when the job is done.
type Session struct {
	cfg  Config // withDefaults applied
	cc   clientv3.Config
	lg   *slog.Logger
	clis []*clientv3.Client // parallel to cfg.Endpoints

	mu      sync.Mutex
	members []MemberStatus // the latest Members answer, for the next Take

	authMu sync.Mutex
	token  string // "" before the login, and when auth is off
	// tokenAt is when the token was issued; tokenKnown holds the
	// (normalized) endpoints that issued or accepted it.
	tokenAt    time.Time
	tokenKnown map[string]bool
	authOff    bool  // the cluster said auth is not enabled
	refused    error // etcd refused the credentials: the refusal
}

// Dial opens a session with the cluster described by cfg: it validates
// cfg, loads the TLS material (errors name the file) and opens one
// connection per endpoint. The connections are made in the background;
// the first request (usually Members) waits for them, and a connection
// that fails is reported by the request, with its cause. The login
// happens once, on the first request that needs it. lg receives the
// session's log lines (fallbacks, members not used); nil discards them.
func Dial(ctx context.Context, cfg Config, lg *slog.Logger) (*Session, error) {
	cc, err := cfg.ClientConfig()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	cfg = cfg.withDefaults()
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	// The session logs in itself, once (see login): a client given the
	// credentials would log in on its own, once per client.
	cc.Username, cc.Password = "", ""
	// clientv3's unary interceptor retries a refused token up to 100
	// times (it cannot renew a token it did not get); the session renews
	// it itself (withToken) and makes each request once. A later
	// WithUnaryInterceptor replaces an earlier one.
	cc.DialOptions = append(slices.Clip(cc.DialOptions), grpc.WithUnaryInterceptor(invokeOnce))
	s := &Session{cfg: cfg, cc: cc, lg: lg}
	for _, ep := range cfg.Endpoints {
		cli, err := clientv3.New(forEndpoint(cc, ep))
		if err != nil {
			_ = s.Close()
			return nil, explain("connect to", ep, cfg, err)
		}
		cli.ActiveConnection().Connect()
		s.clis = append(s.clis, cli)
	}
	return s, nil
}

// invokeOnce is a unary interceptor that makes the call as it is.
func invokeOnce(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Close closes the session's connections. Streams and requests still
// running fail.
func (s *Session) Close() error {
	var errs []error
	for _, cli := range s.clis {
		if err := cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close etcd session: %w", err)
	}
	return nil
}

// client returns the client of endpoint ep, nil if ep is not one of the
// session's endpoints.
func (s *Session) client(ep string) *clientv3.Client {
	for i, e := range s.cfg.Endpoints {
		if normalizeEndpoint(e) == normalizeEndpoint(ep) {
			return s.clis[i]
		}
	}
	return nil
}

// Members asks every endpoint for its status, concurrently with a
// per-endpoint timeout of Config.DialTimeout, and returns the answers in
// the order a snapshot should be tried (see Config.Member):
//
//   - "follower" (default): healthy, caught-up (applied index within a small
//     lag of the highest raft index seen), voting, non-leader members first,
//     then the leader, then caught-up learners, then lagging members, then
//     members reporting alarms, then members that see no leader;
//   - "leader": the leader first, then the default order;
//   - "any": endpoint order, members that see no leader last;
//   - an endpoint URL: that endpoint first (even when it sees no leader),
//     then the default order.
//
// Members that could not be asked come last with Err set. With a user and
// password, Members also logs the session in (once per session): when
// etcd refuses a status request without a user, there and then; else,
// after the statuses, on a member that sees a leader, because etcd's login
// needs quorum. When the login cannot succeed, every member that answered
// gets the login error as Err.
// The error is non-nil when no endpoint answered (it then says why for the
// first endpoint), when the login failed, and when the endpoints that
// answered belong to different clusters (ErrMixedClusters, naming each
// endpoint's cluster ID): one backup is of one cluster.
//
// The answer is kept for the session's next Take, which then does not ask
// again.
func (s *Session) Members(ctx context.Context) ([]MemberStatus, error) {
	sts := make([]MemberStatus, len(s.cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range s.cfg.Endpoints {
		wg.Go(func() { sts[i] = s.status(ctx, ep, s.clis[i]) })
	}
	wg.Wait()
	loginErr := s.login(ctx, orderMembers(sts, s.cfg.Member))
	if loginErr != nil {
		for i, st := range sts {
			if st.Err == nil {
				sts[i] = MemberStatus{Endpoint: st.Endpoint, Err: loginErr}
			}
		}
	}
	for i := range sts {
		if sts[i].Err == nil {
			wg.Go(func() { s.memberName(ctx, &sts[i], s.clis[i]) })
		}
	}
	wg.Wait()
	ordered := orderMembers(sts, s.cfg.Member)
	s.mu.Lock()
	s.members = ordered
	s.mu.Unlock()
	switch {
	case loginErr != nil:
		return ordered, redact(loginErr, s.cfg.Password)
	case ordered[0].Err != nil && ctx.Err() != nil:
		return ordered, fmt.Errorf("ask etcd members for status: %w", ctx.Err())
	case ordered[0].Err != nil:
		return ordered, redact(fmt.Errorf("no etcd member reachable at %v: %w", s.cfg.Endpoints, sts[0].Err), s.cfg.Password)
	}
	if err := sameCluster(sts); err != nil {
		return ordered, err
	}
	return ordered, nil
}

// lastMembers returns the latest Members answer and forgets it: it serves
// one Take.
func (s *Session) lastMembers() []MemberStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members
	s.members = nil
	return m
}

// status asks one endpoint for its status. It asks without a token until
// the session has one: etcd answers a client certificate's user (and a
// cluster without auth), and a member that sees no leader can answer
// although it cannot log anyone in; when etcd wants a user, status logs
// the session in (once for all endpoints) and asks again. The request does not wait for a connection that failed: it fails
// at once with gRPC's reason, and a direct probe (TCP, TLS handshake,
// HTTP/2 preface, on the failure path only) names the cause that gRPC's
// text may blur.
func (s *Session) status(parent context.Context, ep string, cli *clientv3.Client) MemberStatus {
	st := MemberStatus{Endpoint: ep}
	ctx, cancel := context.WithTimeout(parent, s.cfg.DialTimeout)
	defer cancel()
	var resp *pb.StatusResponse
	err := s.tokenCall(ctx, ep, false, func(ctx context.Context) error {
		var err error
		resp, err = pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
		return clientv3.ContextError(ctx, err)
	})
	if err != nil {
		if perr := probe(ctx, ep, s.cc.TLS); perr != nil {
			st.Err = explain("connect to", ep, s.cfg, perr)
		} else {
			st.Err = explain("status of", ep, s.cfg, err)
		}
		return st
	}
	st.ID, st.ClusterID = resp.Header.GetMemberId(), resp.Header.GetClusterId()
	st.LeaderID = resp.Leader
	st.Leader = resp.Leader != 0 && resp.Leader == st.ID
	st.Learner = resp.IsLearner
	st.RaftIndex, st.AppliedIndex = resp.RaftIndex, resp.RaftAppliedIndex
	st.Revision = resp.Header.GetRevision()
	st.Version = resp.Version
	st.DBSize = resp.DbSize
	st.Alarms = resp.Errors
	return st
}

// memberName fills st's Name and ClusterSize from the member's member
// list. The name is a nicety for logs and manifests: a failure here does
// not make the member unusable.
func (s *Session) memberName(parent context.Context, st *MemberStatus, cli *clientv3.Client) {
	ctx, cancel := context.WithTimeout(parent, s.cfg.DialTimeout)
	defer cancel()
	var ml *pb.MemberListResponse
	err := s.withToken(ctx, st.Endpoint, func(ctx context.Context) error {
		var err error
		ml, err = pb.NewClusterClient(cli.ActiveConnection()).MemberList(ctx, &pb.MemberListRequest{Linearizable: false})
		return clientv3.ContextError(ctx, err)
	})
	if err != nil {
		return
	}
	st.ClusterSize = len(ml.Members)
	for _, m := range ml.Members {
		if m.ID == st.ID {
			st.Name, st.PeerURLs = m.Name, m.PeerURLs
		}
	}
}

// login logs the session in with the configured user and password, unless
// it is logged in already or has no user. It asks the members that
// answered and see a leader, in order, until one accepts or refuses the
// credentials: etcd's login is a raft request, so a member without a
// leader cannot serve it, and the token it returns is valid on every
// member.
func (s *Session) login(ctx context.Context, members []MemberStatus) error {
	if s.cfg.User == "" {
		return nil
	}
	s.authMu.Lock()
	defer s.authMu.Unlock()
	if s.token != "" || s.authOff {
		return nil
	}
	var err error
	for _, m := range members {
		if m.Err != nil || m.LeaderID == 0 {
			continue
		}
		if err = s.authenticate(ctx, m.Endpoint); err == nil || errors.Is(err, rpctypes.ErrAuthFailed) {
			return err
		}
	}
	if err != nil {
		return err
	}
	for _, m := range members {
		if m.Err == nil {
			return fmt.Errorf("log in to %s as %q: %w: etcd's user/password login is a raft request and needs quorum; "+
				"authenticate with a client certificate instead (--cert/--key, without --user/--password)", m.Endpoint, s.cfg.User, ErrNoLeader)
		}
	}
	return nil // no member answered: Members says why
}

// authenticate logs in on ep and keeps the token; the caller holds authMu.
// Once etcd has refused the credentials, it returns that refusal without
// asking again.
func (s *Session) authenticate(parent context.Context, ep string) error {
	if s.refused != nil {
		return s.refused
	}
	cli := s.client(ep)
	if cli == nil {
		return fmt.Errorf("log in to %s: not one of the endpoints %v", ep, s.cfg.Endpoints)
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.DialTimeout)
	defer cancel()
	resp, err := pb.NewAuthClient(cli.ActiveConnection()).Authenticate(ctx,
		&pb.AuthenticateRequest{Name: s.cfg.User, Password: s.cfg.Password.Reveal()}, grpc.WaitForReady(true))
	err = clientv3.ContextError(ctx, err)
	switch {
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		s.authOff = true
		return nil
	case err != nil && isTimeout(err):
		return redact(fmt.Errorf("%w (etcd's user/password login is a raft request and needs quorum: if the cluster lost it, "+
			"authenticate with a client certificate instead, --cert/--key without --user/--password)", explain("log in to", ep, s.cfg, err)), s.cfg.Password)
	case errors.Is(err, rpctypes.ErrAuthFailed):
		s.refused = redact(explain("log in to", ep, s.cfg, err), s.cfg.Password)
		return s.refused
	case err != nil:
		return redact(explain("log in to", ep, s.cfg, err), s.cfg.Password)
	}
	s.token, s.tokenAt = resp.Token, time.Now()
	s.tokenKnown = map[string]bool{normalizeEndpoint(ep): true}
	return nil
}

// withToken runs call with the session's token in its context, logging
// in on ep first when the session has a user but no token yet (a request
// without a token would run as the client certificate's user). When etcd
// says the token is missing or stale (expired, or the auth data changed),
// it logs in again on ep, once, and repeats the call.
func (s *Session) withToken(ctx context.Context, ep string, call func(context.Context) error) error {
	return s.tokenCall(ctx, ep, true, call)
}

// tokenCall is withToken; without eager, a session without a token yet
// makes the call without one first.
func (s *Session) tokenCall(ctx context.Context, ep string, eager bool, call func(context.Context) error) error {
	s.authMu.Lock()
	if eager && s.cfg.User != "" && s.token == "" && !s.authOff {
		if err := s.authenticate(ctx, ep); err != nil {
			s.authMu.Unlock()
			return err
		}
	}
	token, issuedAt, known := s.token, s.tokenAt, s.tokenKnown[normalizeEndpoint(ep)]
	s.authMu.Unlock()
	err := s.callWith(ctx, ep, token, issuedAt, known, call)
	if err == nil || s.cfg.User == "" || !staleToken(err) {
		return err
	}
	s.authMu.Lock()
	if s.token == token {
		if lerr := s.authenticate(ctx, ep); lerr != nil {
			s.authMu.Unlock()
			return lerr
		}
	}
	// The token may be one another request just got from another member
	// (concurrent status requests refused without a user all log in
	// again, and the first login serves them all): callWith waits for
	// this member to apply it, as for the first call.
	token, issuedAt, known = s.token, s.tokenAt, s.tokenKnown[normalizeEndpoint(ep)]
	s.authMu.Unlock()
	return s.callWith(ctx, ep, token, issuedAt, known, call)
}

// callWith makes call on ep with token. When ep has not yet accepted the
// token (known is false) and refuses it as invalid, the member may not
// have applied the login yet: the call is repeated while the token is
// younger than tokenSpread (awaitToken). Once ep accepts the token, it is
// known there.
func (s *Session) callWith(ctx context.Context, ep, token string, issuedAt time.Time, known bool, call func(context.Context) error) error {
	err := call(tokenContext(ctx, token))
	if errors.Is(err, rpctypes.ErrInvalidAuthToken) && !known {
		err = awaitToken(ctx, issuedAt, func() error { return call(tokenContext(ctx, token)) }, err)
	}
	if err == nil && token != "" && !known {
		s.authMu.Lock()
		if s.token == token {
			s.tokenKnown[normalizeEndpoint(ep)] = true
		}
		s.authMu.Unlock()
	}
	return err
}

// tokenSpread bounds how long a token issued by one member may be refused
// by another as unknown: the login is a raft entry, and a member knows the
// token once it has applied it, usually milliseconds after the member
// that issued it.
const tokenSpread = 2 * time.Second

// awaitToken repeats call, every 20 ms, while it is refused for an invalid
// token and the token is younger than tokenSpread: a member that has not
// accepted the token yet may not have applied the login. err is the first
// call's error.
func awaitToken(ctx context.Context, issuedAt time.Time, call func() error, err error) error {
	for errors.Is(err, rpctypes.ErrInvalidAuthToken) && time.Since(issuedAt) < tokenSpread {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
		err = call()
	}
	return err
}

// tokenContext adds etcd's auth token to ctx's outgoing metadata, as
// clientv3 sends it.
func tokenContext(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, token)
}

// staleToken reports whether err refused a request for its token, so that
// a new login may help (clientv3's shouldRefreshToken).
func staleToken(err error) bool {
	return errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrInvalidAuthToken) ||
		errors.Is(err, rpctypes.ErrAuthOldRevision)
}

// ready waits up to Config.DialTimeout for cli's connection to be
// established, reconnecting it if it went idle.
func (s *Session) ready(ctx context.Context, cli *clientv3.Client) error {
	conn := cli.ActiveConnection()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	for {
		st := conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown:
			return errors.New("session closed")
		}
		if !conn.WaitForStateChange(ctx, st) {
			return ctx.Err()
		}
	}
}

// ErrCompacted is wrapped by HashKV when the member has compacted past the
// requested revision: its hash at that revision is gone. This is the one
// legitimate reason a live comparison cannot be made; any other failure
// is an error.
var ErrCompacted = errors.New("revision compacted on the member")

// futureRevWait bounds how long HashKV waits for a member that has not
// applied the requested revision yet (a follower a few entries behind the
// one that was snapshotted).
const futureRevWait = 5 * time.Second

// HashKV asks the member at endpoint, one of the session's, for the hash
// of its key-value store at revision rev (0 for its current revision) and
// returns the hash and the member's compact revision (-1 if it never
// compacted). Hashes of two members, or of a member and a restored
// snapshot, are comparable only when their compact revisions agree. A
// member that has not applied rev yet is asked again for a few seconds;
// one that compacted past rev returns an error wrapping ErrCompacted.
func (s *Session) HashKV(ctx context.Context, endpoint string, rev int64) (hash uint32, compactRev int64, err error) {
	op := fmt.Sprintf("hashkv at revision %d from", rev)
	cli := s.client(endpoint)
	if cli == nil {
		return 0, 0, fmt.Errorf("%s %s: not one of the endpoints %v", op, endpoint, s.cfg.Endpoints)
	}
	if err := s.ready(ctx, cli); err != nil {
		if perr := probe(ctx, endpoint, s.cc.TLS); perr != nil {
			err = perr
		}
		return 0, 0, redact(explain("connect to", endpoint, s.cfg, err), s.cfg.Password)
	}
	mc := pb.NewMaintenanceClient(cli.ActiveConnection())
	wait := time.NewTimer(futureRevWait)
	defer wait.Stop()
	for {
		var resp *pb.HashKVResponse
		err := s.withToken(ctx, endpoint, func(ctx context.Context) error {
			var err error
			resp, err = mc.HashKV(ctx, &pb.HashKVRequest{Revision: rev}, grpc.WaitForReady(true))
			return clientv3.ContextError(ctx, err)
		})
		switch {
		case err == nil:
			return resp.Hash, resp.CompactRevision, nil
		case errors.Is(err, rpctypes.ErrCompacted):
			return 0, 0, fmt.Errorf("%s %s: %w: %w", op, endpoint, ErrCompacted, err)
		case errors.Is(err, rpctypes.ErrFutureRev):
			select {
			case <-wait.C:
				return 0, 0, fmt.Errorf("%s %s: the member did not reach the revision within %s: %w", op, endpoint, futureRevWait, err)
			case <-ctx.Done():
				return 0, 0, fmt.Errorf("%s %s: %w", op, endpoint, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return 0, 0, redact(explain(op, endpoint, s.cfg, err), s.cfg.Password)
		}
	}
}
