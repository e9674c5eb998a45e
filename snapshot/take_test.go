package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

func TestTakeSingleMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	fill(t, c, 50, 1000)
	spool := filepath.Join(t.TempDir(), "snap.db")
	var tee bytes.Buffer
	lg, logs := testLogger()
	info, err := take(t.Context(), configFor(c), spool, &tee, snapshot.Options{}, lg)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	data := checkSpool(t, spool, info.Size, info.SHA256)
	if !bytes.Equal(tee.Bytes(), data) {
		t.Errorf("tee got %d bytes that differ from the %d-byte spool file", tee.Len(), len(data))
	}
	m := c.Members[0]
	if info.Endpoint != m.ClientURL {
		t.Errorf("Endpoint = %q, want %q", info.Endpoint, m.ClientURL)
	}
	if got, want := info.MemberID, uint64(m.Etcd.Server.MemberID()); got != want {
		t.Errorf("MemberID = %x, want %x", got, want)
	}
	if got, want := info.ClusterID, uint64(m.Etcd.Server.Cluster().ID()); got != want {
		t.Errorf("ClusterID = %x, want %x", got, want)
	}
	if info.MemberName != m.Name {
		t.Errorf("MemberName = %q, want %q", info.MemberName, m.Name)
	}
	// StorageVersion stays empty until etcd has written its storage
	// version, which a freshly started member has not done yet.
	if info.EtcdVersion == "" {
		t.Errorf("EtcdVersion is empty")
	}
	if !strings.Contains(logs.String(), "snapshot taken") {
		t.Errorf("no success log line:\n%s", logs)
	}
	// Taking another snapshot into the same spool path is refused.
	_, err = take(t.Context(), configFor(c), spool, nil, snapshot.Options{}, nil)
	checkErr(t, err, []string{spool, "already exists"})
	if !errors.Is(err, os.ErrExist) {
		t.Errorf("error %v is not ErrExist", err)
	}
}

// leaderID returns the ID of the leader; it waits for the cluster to agree.
func leaderID(t *testing.T, c *etcdtest.Cluster) uint64 {
	t.Helper()
	return uint64(c.Leader(t).Etcd.Server.MemberID())
}

func TestTakeMemberChoice(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	fill(t, c, 20, 1000)
	tests := []struct {
		name   string
		member func() string
		check  func(t *testing.T, info snapshot.Info, leader uint64)
	}{
		{name: "default picks a follower", member: func() string { return "" },
			check: func(t *testing.T, info snapshot.Info, leader uint64) {
				if info.MemberID == leader {
					t.Errorf("snapshot taken from the leader %s, want a follower", info.Endpoint)
				}
			}},
		{name: "follower", member: func() string { return snapshot.MemberFollower },
			check: func(t *testing.T, info snapshot.Info, leader uint64) {
				if info.MemberID == leader {
					t.Errorf("snapshot taken from the leader %s, want a follower", info.Endpoint)
				}
			}},
		{name: "leader", member: func() string { return snapshot.MemberLeader },
			check: func(t *testing.T, info snapshot.Info, leader uint64) {
				if info.MemberID != leader {
					t.Errorf("snapshot taken from %s (%x), want the leader %x", info.Endpoint, info.MemberID, leader)
				}
			}},
		{name: "url", member: func() string { return c.Members[2].ClientURL },
			check: func(t *testing.T, info snapshot.Info, leader uint64) {
				if info.Endpoint != c.Members[2].ClientURL {
					t.Errorf("Endpoint = %s, want %s", info.Endpoint, c.Members[2].ClientURL)
				}
			}},
		{name: "any takes the first endpoint", member: func() string { return snapshot.MemberAny },
			check: func(t *testing.T, info snapshot.Info, leader uint64) {
				if info.Endpoint != c.Members[0].ClientURL {
					t.Errorf("Endpoint = %s, want %s", info.Endpoint, c.Members[0].ClientURL)
				}
			}},
	}
	t.Run("status", func(t *testing.T) { testMembersStatus(t, c) })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Leadership may move on a busy machine; retry when it did
			// during the attempt, so the check is about our choice.
			for attempt := 0; ; attempt++ {
				before := leaderID(t, c)
				cfg := configFor(c)
				cfg.Member = tt.member()
				spool := filepath.Join(t.TempDir(), "snap.db")
				info, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, nil)
				if err != nil {
					t.Fatalf("Take: %v", err)
				}
				checkSpool(t, spool, info.Size, info.SHA256)
				if after := leaderID(t, c); after != before && attempt < 3 {
					t.Logf("leader changed from %x to %x during the attempt; retrying", before, after)
					continue
				}
				tt.check(t, info, before)
				return
			}
		})
	}
}

func testMembersStatus(t *testing.T, c *etcdtest.Cluster) {
	sts, err := members(t.Context(), configFor(c))
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	if len(sts) != 3 {
		t.Fatalf("got %d statuses, want 3", len(sts))
	}
	leader := leaderID(t, c)
	leaders := 0
	for i, st := range sts {
		if st.Err != nil {
			t.Errorf("%s: %v", st.Endpoint, st.Err)
		}
		if st.Leader {
			leaders++
			if st.ID != leader {
				t.Errorf("%s reports itself leader, the cluster says %x", st.Endpoint, leader)
			}
		}
		if st.Name == "" || st.ID == 0 || st.ClusterID == 0 || st.Version == "" || st.DBSize == 0 || st.RaftIndex == 0 {
			t.Errorf("incomplete status: %+v", st)
		}
		if i < 2 && st.Leader {
			t.Errorf("leader %s ordered at %d, want last", st.Endpoint, i)
		}
	}
	if leaders != 1 {
		t.Errorf("%d members report being leader, want 1", leaders)
	}
}

func TestTakeFallback(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	stopped := c.Members[0]
	stopped.Stop()
	c.Leader(t) // the other two agree on a leader

	for _, member := range []string{snapshot.MemberAny, stopped.ClientURL} {
		t.Run("member="+member, func(t *testing.T) {
			cfg := configFor(c)
			cfg.Member = member
			spool := filepath.Join(t.TempDir(), "snap.db")
			lg, logs := testLogger()
			info, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, lg)
			if err != nil {
				t.Fatalf("Take: %v", err)
			}
			checkSpool(t, spool, info.Size, info.SHA256)
			if info.Endpoint == stopped.ClientURL {
				t.Fatalf("snapshot claims to come from the stopped member %s", info.Endpoint)
			}
			if info.Endpoint != c.Members[1].ClientURL && info.Endpoint != c.Members[2].ClientURL {
				t.Errorf("Endpoint = %s, want one of the running members", info.Endpoint)
			}
			out := logs.String()
			for _, want := range []string{"unreachable", stopped.ClientURL, "snapshot taken", info.Endpoint} {
				if !strings.Contains(out, want) {
					t.Errorf("log does not mention %q:\n%s", want, out)
				}
			}
		})
	}

	t.Run("all members down", func(t *testing.T) {
		for _, m := range c.Members {
			m.Stop()
		}
		spool := filepath.Join(t.TempDir(), "snap.db")
		_, err := take(t.Context(), configFor(c), spool, nil, snapshot.Options{}, nil)
		checkErr(t, err, []string{"no etcd member reachable", c.Members[0].ClientURL, "check --endpoints"})
		checkNoSpool(t, spool)
	})
}

func TestTakeTLSAuth(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: true, Auth: true})
	otherCA, otherCert, otherKey := etcdtest.OtherCA(t)

	// A user without the root role may read but not snapshot.
	admin := c.Client(t)
	const limitedPassword = "limited-pass-1234"
	if _, err := admin.UserAdd(t.Context(), "reader", limitedPassword); err != nil {
		t.Fatalf("add user: %v", err)
	}

	const wrongPassword = "wrong-password-5678"
	tests := []struct {
		name    string
		mod     func(cfg *snapshot.Config)
		wantErr []string // nil: success
	}{
		{name: "right material", mod: func(*snapshot.Config) {}},
		{name: "wrong CA", mod: func(cfg *snapshot.Config) { cfg.CACert = otherCA },
			wantErr: []string{"not signed by the CA in " + otherCA, "--cacert"}},
		{name: "client cert from another CA", mod: func(cfg *snapshot.Config) { cfg.Cert, cfg.Key = otherCert, otherKey },
			wantErr: []string{"--cert/--key"}},
		{name: "no client cert", mod: func(cfg *snapshot.Config) { cfg.Cert, cfg.Key = "", "" },
			wantErr: []string{"--cert"}},
		{name: "wrong password", mod: func(cfg *snapshot.Config) { cfg.Password = wrongPassword },
			wantErr: []string{`authentication failed for user "root"`, "--user/--password"}},
		{name: "unknown user", mod: func(cfg *snapshot.Config) { cfg.User = "nobody" },
			wantErr: []string{`authentication failed for user "nobody"`}},
		{name: "no credentials", mod: func(cfg *snapshot.Config) { cfg.User, cfg.Password = "", "" },
			wantErr: []string{"--user"}},
		{name: "user without root role", mod: func(cfg *snapshot.Config) { cfg.User, cfg.Password = "reader", limitedPassword },
			wantErr: []string{`user "reader" may not take snapshots`, "root role"}},
		{name: "unreachable endpoint", mod: func(cfg *snapshot.Config) { cfg.Endpoints = []string{"https://127.0.0.1:1"} },
			wantErr: []string{"no etcd member reachable at [https://127.0.0.1:1]", "connection refused", "check --endpoints"}},
		{name: "plain http to a TLS member", mod: func(cfg *snapshot.Config) {
			cfg.Endpoints = []string{strings.Replace(c.Members[0].ClientURL, "https://", "http://", 1)}
			cfg.CACert, cfg.Cert, cfg.Key = "", "", ""
		}, wantErr: []string{"https://"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := configFor(c)
			tt.mod(&cfg)
			spool := filepath.Join(t.TempDir(), "snap.db")
			lg, logs := testLogger()
			info, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, lg)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Take: %v", err)
				}
				checkSpool(t, spool, info.Size, info.SHA256)
				return
			}
			t.Logf("error: %v", err)
			checkErr(t, err, tt.wantErr, c.Password, wrongPassword, limitedPassword)
			checkNoSpool(t, spool)
			for _, s := range []string{c.Password, wrongPassword, limitedPassword} {
				if strings.Contains(logs.String(), s) {
					t.Errorf("log reveals a password:\n%s", logs)
				}
			}
		})
	}
}

func TestThreeMembersTLSAuth(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, TLS: true, Auth: true})
	t.Run("stream refused on every member", func(t *testing.T) {
		// Status works for any user, the snapshot needs the root role:
		// every member is tried in turn, and the error names them all.
		const pw = "reader-password-42"
		if _, err := c.Client(t).UserAdd(t.Context(), "reader3", pw); err != nil {
			t.Fatal(err)
		}
		cfg := configFor(c)
		cfg.User, cfg.Password = "reader3", pw
		spool := filepath.Join(t.TempDir(), "snap.db")
		lg, logs := testLogger()
		_, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, lg)
		t.Logf("error: %v", err)
		checkErr(t, err, append([]string{"failed on every reachable member", "root role"}, c.Endpoints()...), pw)
		checkNoSpool(t, spool)
		if got := strings.Count(logs.String(), "trying the next member"); got != 3 {
			t.Errorf("%d fallback log lines, want 3:\n%s", got, logs)
		}
	})
	t.Run("hashkv", func(t *testing.T) { testLiveHashKV(t, c) })
}

func testLiveHashKV(t *testing.T, c *etcdtest.Cluster) {
	fill(t, c, 10, 100)
	cli := c.Client(t)
	resp, err := cli.Get(t.Context(), "/fill/", nil...)
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	cfg := configFor(c)
	var hashes []uint32
	for _, m := range c.Members {
		// A follower may trail the write by a moment: poll.
		var h uint32
		var compact int64
		deadline := time.Now().Add(30 * time.Second)
		for {
			h, compact, err = liveHashKV(t.Context(), cfg, m.ClientURL, rev)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("LiveHashKV(%s): %v", m.ClientURL, err)
		}
		if compact != -1 {
			t.Errorf("compact revision %d, want -1 (never compacted)", compact)
		}
		hashes = append(hashes, h)
	}
	if hashes[0] == 0 || hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Errorf("hashes at revision %d differ between members: %v", rev, hashes)
	}

	// A future revision is an error naming the endpoint.
	_, _, err = liveHashKV(t.Context(), cfg, c.Members[0].ClientURL, rev+1000)
	checkErr(t, err, []string{c.Members[0].ClientURL}, c.Password)

	// A compacted member reports its compact revision.
	if _, err := cli.Compact(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	_, compact, err := liveHashKV(t.Context(), cfg, c.Members[0].ClientURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if compact != rev {
		t.Errorf("compact revision %d, want %d", compact, rev)
	}
}
