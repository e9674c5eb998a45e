package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestTrailerCheck: the stream's trailer errors are ErrTrailer (and
// verify.ErrCorrupt) and say what happened and what to do. The check
// itself is verify.TrailerHash's, tested there.
func TestTrailerCheck(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	db := make([]byte, 4096)
	for i := range db {
		db[i] = byte(r.Uint32())
	}
	sum := sha256.Sum256(db)
	good := append(append([]byte(nil), db...), sum[:]...)
	flipped := append([]byte(nil), good...)
	flipped[7] ^= 1
	tests := []struct {
		name    string
		data    []byte
		wantErr []string // nil: success
	}{
		{name: "intact", data: good},
		{name: "trailer missing", data: db, wantErr: []string{"trailer sha256 missing", "after 4096 bytes", "cut short, retry"}},
		{name: "cut short", data: good[:1000], wantErr: []string{"trailer sha256 missing", "after 1000 bytes"}},
		{name: "one byte flipped", data: flipped, wantErr: []string{"trailer sha256 mismatch: got ", " want " + hex.EncodeToString(sum[:]), "corrupted in transit, retry"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := verify.NewTrailerHash()
			h.Write(tt.data)
			got, err := trailerCheck(h)
			if tt.wantErr == nil {
				if err != nil || got != hex.EncodeToString(sum[:]) {
					t.Fatalf("trailerCheck = %q, %v; want %x", got, err, sum)
				}
				return
			}
			if !errors.Is(err, ErrTrailer) || !errors.Is(err, verify.ErrCorrupt) || got != "" {
				t.Fatalf("trailerCheck = %q, %v; want ErrTrailer and verify.ErrCorrupt", got, err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestOrderMembers(t *testing.T) {
	down := errors.New("down")
	const lid = 7 // the leader's member ID
	follower := func(ep string) MemberStatus {
		return MemberStatus{Endpoint: ep, LeaderID: lid, RaftIndex: 5000, AppliedIndex: 5000}
	}
	leader := MemberStatus{Endpoint: "L", ID: lid, LeaderID: lid, Leader: true, RaftIndex: 5000, AppliedIndex: 5000}
	lagging := MemberStatus{Endpoint: "lag", LeaderID: lid, RaftIndex: 5000, AppliedIndex: 5000 - maxApplyLag - 1}
	slightlyBehind := MemberStatus{Endpoint: "behind", LeaderID: lid, RaftIndex: 4990, AppliedIndex: 4980}
	learner := MemberStatus{Endpoint: "learner", LeaderID: lid, Learner: true, RaftIndex: 5000, AppliedIndex: 5000}
	alarmed := MemberStatus{Endpoint: "alarm", LeaderID: lid, RaftIndex: 5000, AppliedIndex: 5000, Alarms: []string{"NOSPACE"}}
	failed := MemberStatus{Endpoint: "failed", Err: down}
	// A member cut off from its peers: it sees no leader (etcd then also
	// reports "etcdserver: no leader" among its errors).
	noLeader := MemberStatus{Endpoint: "noleader", RaftIndex: 5000, AppliedIndex: 5000, Alarms: []string{"etcdserver: no leader"}}
	all := []MemberStatus{failed, leader, lagging, alarmed, learner, follower("F1"), slightlyBehind, follower("F2")}
	withNoLeader := []MemberStatus{noLeader, follower("F1"), leader}
	tests := []struct {
		name string
		in   []MemberStatus
		pref string
		want []string
	}{
		{name: "default prefers caught-up voting followers", in: all, pref: "",
			want: []string{"F1", "behind", "F2", "L", "learner", "lag", "alarm", "failed"}},
		{name: "follower", in: all, pref: MemberFollower,
			want: []string{"F1", "behind", "F2", "L", "learner", "lag", "alarm", "failed"}},
		{name: "leader first", in: all, pref: MemberLeader,
			want: []string{"L", "F1", "behind", "F2", "learner", "lag", "alarm", "failed"}},
		{name: "any keeps endpoint order, failed last", in: all, pref: MemberAny,
			want: []string{"L", "lag", "alarm", "learner", "F1", "behind", "F2", "failed"}},
		{name: "url first", in: all, pref: "F2",
			want: []string{"F2", "F1", "behind", "L", "learner", "lag", "alarm", "failed"}},
		{name: "failed url stays last", in: all, pref: "failed",
			want: []string{"F1", "behind", "F2", "L", "learner", "lag", "alarm", "failed"}},
		{name: "only the leader", in: []MemberStatus{failed, leader}, pref: "",
			want: []string{"L", "failed"}},
		{name: "no leader last", in: []MemberStatus{noLeader, alarmed, leader}, pref: "",
			want: []string{"L", "alarm", "noleader"}},
		{name: "any: no leader after members with one", in: withNoLeader, pref: MemberAny,
			want: []string{"F1", "L", "noleader"}},
		{name: "leader: no leader last", in: withNoLeader, pref: MemberLeader,
			want: []string{"L", "F1", "noleader"}},
		{name: "url of a member without leader first", in: withNoLeader, pref: "noleader",
			want: []string{"noleader", "F1", "L"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, st := range orderMembers(tt.in, tt.pref) {
				got = append(got, st.Endpoint)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiagnose(t *testing.T) {
	cfg := Config{User: "backup", CACert: "/etc/etcd/ca.pem"}
	tests := []struct {
		err  string
		want string
	}{
		{err: `rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`, want: "check --endpoints"},
		{err: `tls: failed to verify certificate: x509: certificate signed by unknown authority`, want: "check --cacert"},
		{err: `remote error: tls: unknown certificate authority`, want: "check --cert/--key"},
		{err: `remote error: tls: certificate required`, want: "set --cert and --key"},
		{err: `etcdserver: authentication failed, invalid user ID or password`, want: `authentication failed for user "backup"; check --user/--password`},
		{err: `etcdserver: permission denied`, want: "root role"},
		{err: `something odd`, want: "check --endpoints, TLS and credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := diagnose(cfg, errors.New(tt.err)); !strings.Contains(got, tt.want) {
				t.Errorf("diagnose(%q) = %q, want it to contain %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestHashKVMember(t *testing.T) {
	const lid = 7
	st := func(ep string, mod func(*MemberStatus)) MemberStatus {
		s := MemberStatus{Endpoint: ep, LeaderID: lid, RaftIndex: 5000, AppliedIndex: 5000, ClusterSize: 3}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	snap := st("S", nil)
	leader := st("L", func(s *MemberStatus) { s.ID, s.Leader = lid, true })
	other := st("F", nil)
	lagging := st("lag", func(s *MemberStatus) { s.AppliedIndex = 5000 - maxApplyLag - 1 })
	alarmed := st("alarm", func(s *MemberStatus) { s.Alarms = []string{"NOSPACE"} })
	down := st("down", func(s *MemberStatus) { s.Err = errors.New("refused") })
	noLeader := st("noleader", func(s *MemberStatus) { s.LeaderID = 0 })
	learner := st("learner", func(s *MemberStatus) { s.Learner = true })
	tests := []struct {
		name     string
		in       []MemberStatus
		want     string
		wantSame string
	}{
		{name: "the other follower before the leader", in: []MemberStatus{leader, snap, other}, want: "F"},
		{name: "the leader when it is the only other", in: []MemberStatus{snap, leader}, want: "L"},
		{name: "a healthy member before a lagging or alarmed one", in: []MemberStatus{lagging, alarmed, snap, leader}, want: "L"},
		{name: "a lagging member before the snapshot's own", in: []MemberStatus{snap, lagging}, want: "lag"},
		{name: "never a member without leader, a learner or an unreachable one", in: []MemberStatus{noLeader, learner, down, snap}, want: "S",
			wantSame: "no other member could answer: noleader sees no leader, learner is a learner, down unreachable"},
		{name: "single-member cluster", in: []MemberStatus{st("S", func(s *MemberStatus) { s.ClusterSize = 1 })}, want: "S",
			wantSame: "single-member cluster"},
		{name: "one endpoint of three", in: []MemberStatus{snap}, want: "S",
			wantSame: "no other endpoint given: --endpoints lists 1 of the cluster's 3 members"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, same := HashKVMember(tt.in, "S")
			if got.Endpoint != tt.want || same != tt.wantSame {
				t.Errorf("HashKVMember = %s, %q; want %s, %q", got.Endpoint, same, tt.want, tt.wantSame)
			}
		})
	}
}
