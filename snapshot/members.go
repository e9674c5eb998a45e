package snapshot

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
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
	// PeerURLs are the member's peer URLs from its member list (empty if
	// the list was unavailable): with the cluster token they give its ID
	// when it was an initial member, which is how a cluster restored by
	// lifeboat is recognised as restored from a backup.
	PeerURLs []string
	// ClusterSize is the number of members in the member's member list,
	// learners included (0 if the list was unavailable).
	ClusterSize int
	// Leader is true when this member is the raft leader; Learner when it
	// is a non-voting learner.
	Leader, Learner bool
	// LeaderID is the leader this member reports; 0 means it sees none: it
	// lost quorum (its peers are down or cut off) or an election is under
	// way. Such a member serves a snapshot, but its data may miss the
	// cluster's last writes.
	LeaderID uint64
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

// sameCluster returns an error wrapping ErrMixedClusters when the members
// that answered report different cluster IDs.
func sameCluster(sts []MemberStatus) error {
	byCluster := map[uint64][]string{}
	var ids []uint64
	for _, st := range sts {
		if st.Err != nil {
			continue
		}
		if _, ok := byCluster[st.ClusterID]; !ok {
			ids = append(ids, st.ClusterID)
		}
		byCluster[st.ClusterID] = append(byCluster[st.ClusterID], st.Endpoint)
	}
	if len(ids) < 2 {
		return nil
	}
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("cluster %x: %s", id, strings.Join(byCluster[id], ", ")))
	}
	return fmt.Errorf("%w: the endpoints belong to %d etcd clusters (%s); list the members of one cluster only in --endpoints",
		ErrMixedClusters, len(ids), strings.Join(parts, "; "))
}

// usable returns the members a snapshot may be taken from, in order: those
// that answered and, unless pref names a member explicitly, see a leader.
// A member without a leader may hold stale data (a partitioned minority) or
// be the last survivor of a cluster that lost quorum: it is snapshotted only
// when named (--member URL). The error wraps ErrNoLeader when members
// answered but none may be used.
func usable(members []MemberStatus, pref string) ([]MemberStatus, error) {
	named := func(st MemberStatus) bool {
		switch pref {
		case "", MemberFollower, MemberLeader, MemberAny:
			return false
		}
		return normalizeEndpoint(st.Endpoint) == normalizeEndpoint(pref)
	}
	var out []MemberStatus
	var leaderless []string
	for _, st := range members {
		switch {
		case st.Err != nil:
		case st.LeaderID == 0 && !named(st):
			leaderless = append(leaderless, st.Endpoint)
		default:
			out = append(out, st)
		}
	}
	if len(out) == 0 && len(leaderless) > 0 {
		return nil, fmt.Errorf("%w: %s sees no leader (quorum lost, or an election is under way): its data may miss the cluster's last writes; "+
			"to take the last snapshot of a surviving member anyway, name it: --member %s",
			ErrNoLeader, strings.Join(leaderless, ", "), leaderless[0])
	}
	return out, nil
}

// rank orders members under the default ("follower") preference: lower is
// tried first.
func rank(st MemberStatus, maxRaft uint64) int {
	switch {
	case st.Err != nil:
		return 9
	case st.LeaderID == 0:
		return 6
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
			if st.LeaderID == 0 {
				return r
			}
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

// SameSingleMember is HashKVMember's reason when the cluster has one
// member: comparing it with itself is all there is, not a warning.
const SameSingleMember = "single-member cluster"

// SelfCompared reports whether HashKVMember's reason same means that a
// member of a larger cluster was compared with itself (a diverged member
// would go unnoticed): a warning.
func SelfCompared(same string) bool { return same != "" && same != SameSingleMember }

// HashKVMember picks the member to ask for the live HashKV that a snapshot
// taken from snapEndpoint is compared with. Asking a different member is
// what makes the comparison detect member divergence (members whose stores
// differ at the same revision, the common real-world etcd corruption): the
// snapshot's own member would only confirm itself. The choice is a healthy
// (answered, sees a leader, no alarms, caught up) voting member other than
// the snapshot's, a follower before the leader, because etcd blocks writes
// on the member while it hashes and a follower's stall does not delay the
// cluster's commits; then a member with alarms or lagging. When no other
// member can answer it returns the snapshot's own member and why (same is
// empty when another member was chosen).
func HashKVMember(members []MemberStatus, snapEndpoint string) (m MemberStatus, same string) {
	var maxRaft uint64
	for _, st := range members {
		if st.Err == nil {
			maxRaft = max(maxRaft, st.RaftIndex)
		}
	}
	var (
		best     MemberStatus
		bestRank = -1
		self     = MemberStatus{Endpoint: snapEndpoint}
		why      []string
	)
	for _, st := range members {
		if normalizeEndpoint(st.Endpoint) == normalizeEndpoint(snapEndpoint) {
			self = st
			continue
		}
		switch {
		case st.Err != nil:
			why = append(why, st.Endpoint+" unreachable")
			continue
		case st.LeaderID == 0:
			why = append(why, st.Endpoint+" sees no leader")
			continue
		case st.Learner:
			why = append(why, st.Endpoint+" is a learner")
			continue
		}
		r := rank(st, maxRaft)
		if bestRank < 0 || r < bestRank {
			best, bestRank = st, r
		}
	}
	if bestRank >= 0 {
		return best, ""
	}
	switch {
	case len(why) > 0:
		return self, "no other member could answer: " + strings.Join(why, ", ")
	case self.ClusterSize == 1:
		return self, SameSingleMember
	case self.ClusterSize > 1:
		return self, fmt.Sprintf("no other endpoint given: --endpoints lists 1 of the cluster's %d members", self.ClusterSize)
	default:
		return self, "no other endpoint given"
	}
}
