package snapshot

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxApplyLag is how far a member's applied index may trail the highest raft
// (commit) index seen and still count as caught up. Applying a few hundred
// entries takes milliseconds; a member further behind is busy catching up and
// its snapshot would be older than the others'.
const maxApplyLag = 1000

// MemberStatus is one endpoint's answer to a status request.
type MemberStatus struct {
	// Endpoint is the URL the status was asked from.
	Endpoint string
	// ID and ClusterID identify the member and its cluster.
	ID, ClusterID uint64
	// Name is the member's name (empty if the member list was unavailable).
	Name string
	// Leader is true when this member is the raft leader; Learner when it
	// is a non-voting learner.
	Leader, Learner bool
	// RaftIndex is the member's committed raft index, AppliedIndex the
	// index it has applied to its store.
	RaftIndex, AppliedIndex uint64
	// Revision is the member's current store revision.
	Revision int64
	// Version is the etcd server version.
	Version string
	// DBSize is the size of the backend database file in bytes.
	DBSize int64
	// Alarms are the errors the member reported in its status (e.g. an
	// active NOSPACE alarm). Such a member can still be snapshotted.
	Alarms []string
	// Err is set when the endpoint could not be asked; the other fields are
	// then zero.
	Err error
}

// Members asks every endpoint for its status, concurrently with a
// per-endpoint timeout of cfg.DialTimeout, and returns the answers in the
// order a snapshot should be tried (see cfg.Member):
//
//   - "follower" (default): healthy, caught-up (applied index within a small
//     lag of the highest raft index seen), voting, non-leader members first,
//     then the leader, then caught-up learners, then lagging members, then
//     members reporting alarms;
//   - "leader": the leader first, then the default order;
//   - "any": endpoint order;
//   - an endpoint URL: that endpoint first, then the default order.
//
// Members that could not be asked come last with Err set. The error is
// non-nil only when no endpoint answered, and then says why for the first
// endpoint.
func Members(ctx context.Context, cfg Config) ([]MemberStatus, error) {
	cc, err := cfg.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sts := make([]MemberStatus, len(cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		wg.Go(func() {
			sts[i] = memberStatus(ctx, cfg, cc, ep)
		})
	}
	wg.Wait()
	ordered := orderMembers(sts, cfg.Member)
	if ordered[0].Err != nil {
		if ctx.Err() != nil {
			return ordered, fmt.Errorf("ask etcd members for status: %w", ctx.Err())
		}
		return ordered, redact(fmt.Errorf("no etcd member reachable at %v: %w", cfg.Endpoints, sts[0].Err), cfg.Password)
	}
	return ordered, nil
}

// memberStatus asks one endpoint for its status and its member name.
func memberStatus(ctx context.Context, cfg Config, cc clientv3.Config, ep string) MemberStatus {
	st := MemberStatus{Endpoint: ep}
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	// The client hides why it cannot connect behind a timeout while it
	// keeps retrying; a direct probe finds refused connections and TLS
	// problems at once and says which.
	if err := probe(ctx, ep, cc.TLS); err != nil {
		st.Err = explain("connect to", ep, cfg, err)
		return st
	}
	cli, err := newClient(ctx, cc, ep)
	if err != nil {
		st.Err = explain("connect to", ep, cfg, err)
		return st
	}
	defer cli.Close()
	resp, err := cli.Status(ctx, ep)
	if err != nil {
		st.Err = explain("status of", ep, cfg, err)
		return st
	}
	st.ID, st.ClusterID = resp.Header.GetMemberId(), resp.Header.GetClusterId()
	st.Leader = resp.Leader != 0 && resp.Leader == st.ID
	st.Learner = resp.IsLearner
	st.RaftIndex, st.AppliedIndex = resp.RaftIndex, resp.RaftAppliedIndex
	st.Revision = resp.Header.GetRevision()
	st.Version = resp.Version
	st.DBSize = resp.DbSize
	st.Alarms = resp.Errors
	// The name is a nicety for logs and manifests: a failure here does not
	// make the member unusable.
	if ml, err := cli.MemberList(ctx, clientv3.WithSerializable()); err == nil {
		for _, m := range ml.Members {
			if m.ID == st.ID {
				st.Name = m.Name
			}
		}
	}
	return st
}

// newClient connects to ep only. The client, including its authentication
// request, is bound to ctx.
func newClient(ctx context.Context, cc clientv3.Config, ep string) (*clientv3.Client, error) {
	cc = forEndpoint(cc, ep)
	cc.Context = ctx
	return clientv3.New(cc)
}

// rank orders members under the default ("follower") preference: lower is
// tried first.
func rank(st MemberStatus, maxRaft uint64) int {
	switch {
	case st.Err != nil:
		return 9
	case len(st.Alarms) > 0:
		return 5
	case maxRaft > st.AppliedIndex && maxRaft-st.AppliedIndex > maxApplyLag:
		return 4
	case st.Learner:
		return 3
	case st.Leader:
		return 2
	default:
		return 1
	}
}

// orderMembers sorts statuses by the preference pref; ties keep endpoint
// order. Failed members always come last.
func orderMembers(sts []MemberStatus, pref string) []MemberStatus {
	out := slices.Clone(sts)
	var maxRaft uint64
	for _, st := range out {
		if st.Err == nil {
			maxRaft = max(maxRaft, st.RaftIndex)
		}
	}
	key := func(st MemberStatus) int {
		r := rank(st, maxRaft)
		if st.Err != nil {
			return r
		}
		switch pref {
		case MemberAny:
			return 0
		case MemberLeader:
			if st.Leader {
				return 0
			}
		case "", MemberFollower:
		default:
			if normalizeEndpoint(st.Endpoint) == normalizeEndpoint(pref) {
				return 0
			}
		}
		return r
	}
	slices.SortStableFunc(out, func(a, b MemberStatus) int { return cmp.Compare(key(a), key(b)) })
	return out
}
