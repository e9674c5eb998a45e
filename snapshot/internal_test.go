package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// snapshotBytes returns a fake snapshot stream: size database bytes followed
// by their sha256.
func snapshotBytes(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, size, size+sha256.Size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

func TestTrailerHashSplits(t *testing.T) {
	data := snapshotBytes(3*4096, 1)
	want := hex.EncodeToString(data[len(data)-sha256.Size:])
	tests := []struct {
		name   string
		splits func(r *rand.Rand) int
	}{
		{name: "one byte at a time", splits: func(*rand.Rand) int { return 1 }},
		{name: "31 bytes", splits: func(*rand.Rand) int { return 31 }},
		{name: "32 bytes", splits: func(*rand.Rand) int { return 32 }},
		{name: "33 bytes", splits: func(*rand.Rand) int { return 33 }},
		{name: "4096 bytes", splits: func(*rand.Rand) int { return 4096 }},
		{name: "whole", splits: func(*rand.Rand) int { return len(data) }},
		{name: "random small", splits: func(r *rand.Rand) int { return 1 + r.IntN(40) }},
		{name: "random large", splits: func(r *rand.Rand) int { return 1 + r.IntN(9000) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(2, 3))
			var h trailerHash
			h.init()
			for rest := data; len(rest) > 0; {
				n := min(tt.splits(r), len(rest))
				h.Write(rest[:n])
				rest = rest[n:]
			}
			got, err := h.check(int64(len(data)))
			if err != nil {
				t.Fatalf("check: %v", err)
			}
			if got != want {
				t.Errorf("sha256 = %s, want %s", got, want)
			}
		})
	}
}

func TestTrailerHashErrors(t *testing.T) {
	good := snapshotBytes(4096, 4)
	flipped := append([]byte(nil), good...)
	flipped[100] ^= 1
	badTrailer := append([]byte(nil), good...)
	badTrailer[len(badTrailer)-1] ^= 0x80
	tests := []struct {
		name string
		data []byte
	}{
		{name: "empty", data: nil},
		{name: "shorter than a trailer", data: good[:20]},
		{name: "no trailer", data: good[:4096]},
		{name: "cut mid-way", data: good[:1000]},
		{name: "cut at sector plus 32", data: good[:512+32]},
		{name: "flipped data byte", data: flipped},
		{name: "flipped trailer byte", data: badTrailer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h trailerHash
			h.init()
			h.Write(tt.data)
			_, err := h.check(int64(len(tt.data)))
			if !errors.Is(err, ErrTrailer) {
				t.Fatalf("check error = %v, want ErrTrailer", err)
			}
		})
	}
}

func FuzzTrailerHash(f *testing.F) {
	f.Add([]byte("hello"), uint64(1))
	f.Add(snapshotBytes(512, 5), uint64(7))
	f.Add(snapshotBytes(1024, 6), uint64(31))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, seed))
		var h trailerHash
		h.init()
		for rest := data; len(rest) > 0; {
			n := min(1+r.IntN(70), len(rest))
			h.Write(rest[:n])
			rest = rest[n:]
		}
		got, err := h.check(int64(len(data)))
		valid := len(data) >= sha256.Size && len(data)%512 == sha256.Size
		if valid {
			sum := sha256.Sum256(data[:len(data)-sha256.Size])
			valid = string(sum[:]) == string(data[len(data)-sha256.Size:])
		}
		switch {
		case valid && err != nil:
			t.Fatalf("valid stream rejected: %v", err)
		case !valid && !errors.Is(err, ErrTrailer):
			t.Fatalf("invalid stream accepted (err %v)", err)
		case valid && got != hex.EncodeToString(data[len(data)-sha256.Size:]):
			t.Fatalf("sha256 = %s, want the trailer", got)
		}
	})
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
