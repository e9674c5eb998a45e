package snapshot_test

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// TestSessionDialsEachMemberOnce (issue 12, move 3): the steps of a backup
// (Members, Take, HashKV of another member, a second Take as a retry
// after a broken stream does) over one session dial each member once and
// log in once, on a 3-member cluster with user/password auth, with TLS
// client certificates and without (then even a status request needs the
// login). Turning auth off and on makes the token stale: the session logs
// in again, once, and the request succeeds.
func TestSessionDialsEachMemberOnce(t *testing.T) {
	for _, tls := range []bool{true, false} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) { testSessionDialsEachMemberOnce(t, tls) })
	}
}

func testSessionDialsEachMemberOnce(t *testing.T, tls bool) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, TLS: tls, Auth: true})
	fill(t, c, 10, 1000)
	cfg := configFor(c)
	var proxies []*etcdtest.Proxy
	cfg.Endpoints = nil
	for _, m := range c.Members {
		p := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{})
		proxies = append(proxies, p)
		cfg.Endpoints = append(cfg.Endpoints, p.URL)
	}
	counts := func() []int {
		var n []int
		for _, p := range proxies {
			n = append(n, p.Accepted())
		}
		return n
	}
	auths := etcdtest.Authentications(t)

	s := dial(t, cfg, nil)
	sts, err := s.Members(t.Context())
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	for _, st := range sts {
		if st.Err != nil {
			t.Errorf("member %s: %v", st.Endpoint, st.Err)
		}
		if st.Name == "" || st.ClusterSize != 3 {
			t.Errorf("member %s: name %q, cluster size %d; want the name from the member list and 3", st.Endpoint, st.Name, st.ClusterSize)
		}
	}
	info, err := s.Take(t.Context(), filepath.Join(t.TempDir(), "a.db"), nil, snapshot.Options{})
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	hm, same := snapshot.HashKVMember(sts, info.Endpoint)
	if same != "" {
		t.Fatalf("HashKVMember chose the snapshot's own member: %s", same)
	}
	if _, _, err := s.HashKV(t.Context(), hm.Endpoint, 0); err != nil {
		t.Fatalf("HashKV: %v", err)
	}
	if _, err := s.Members(t.Context()); err != nil {
		t.Fatalf("Members again: %v", err)
	}
	info2, err := s.Take(t.Context(), filepath.Join(t.TempDir(), "b.db"), nil, snapshot.Options{Skip: []string{info.Endpoint}})
	if err != nil {
		t.Fatalf("Take skipping %s: %v", info.Endpoint, err)
	}
	if info2.Endpoint == info.Endpoint {
		t.Errorf("second Take streamed from the skipped member %s", info.Endpoint)
	}
	t.Logf("connections per member %v, Authenticate calls %d", counts(), etcdtest.Authentications(t)-auths)
	for i, n := range counts() {
		if n != 1 {
			t.Errorf("member %s dialed %d times by one session, want once", c.Members[i].Name, n)
		}
	}
	if got := etcdtest.Authentications(t) - auths; got != 1 {
		t.Errorf("%d logins in one session, want 1", got)
	}

	// Turning auth off and on again drops every token etcd handed out:
	// the session's token is refused (ErrInvalidAuthToken) and renewed
	// once.
	admin := c.Client(t)
	if _, err := admin.AuthDisable(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(t.Context()); err != nil {
		t.Fatal(err)
	}
	auths = etcdtest.Authentications(t)
	hashes := etcdtest.Handled(t, "HashKV")
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The member may apply the change a moment after the leader: poll.
		_, _, err = s.HashKV(t.Context(), hm.Endpoint, 0)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("HashKV after an auth change: %v", err)
	}
	if got := etcdtest.Authentications(t) - auths; got != 1 {
		t.Errorf("%d logins for a stale token, want 1", got)
	}
	if got := etcdtest.Handled(t, "HashKV") - hashes; got != 2 {
		t.Errorf("%d HashKV requests for one HashKV with a stale token, want 2 (refused, then with the new token)", got)
	}
	for i, n := range counts() {
		if n != 1 {
			t.Errorf("member %s dialed %d times by one session, want once", c.Members[i].Name, n)
		}
	}
}

// TestSessionUnixSocket: an endpoint on a unix socket (unix://path, as
// etcd's --listen-client-urls allows) works through a session like a TCP
// one. An etcdtest.Proxy on the socket forwards to a real member.
func TestSessionUnixSocket(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	fill(t, c, 10, 1000)
	sock := filepath.Join(t.TempDir(), "etcd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	etcdtest.NewProxy(t, c.Members[0].ClientURL, etcdtest.ProxyOptions{Listener: l})
	for _, ep := range []string{"unix://" + sock, "unix:" + sock} {
		t.Run(ep, func(t *testing.T) {
			cfg := configFor(c)
			cfg.Endpoints = []string{ep}
			s := dial(t, cfg, nil)
			info, err := s.Take(t.Context(), filepath.Join(t.TempDir(), "snap.db"), nil, snapshot.Options{})
			if err != nil {
				t.Fatalf("Take over %s: %v", ep, err)
			}
			if info.Endpoint != ep {
				t.Errorf("Endpoint = %s, want %s", info.Endpoint, ep)
			}
			if _, _, err := s.HashKV(t.Context(), ep, 0); err != nil {
				t.Errorf("HashKV over %s: %v", ep, err)
			}
		})
	}
}

// TestSessionRefusedLogin: wrong credentials are refused once per session,
// not once per member, and the error says what to check without the
// password. Without client certificates etcd wants the user already for
// status, so every member asks for the login at the same time.
func TestSessionRefusedLogin(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, Auth: true})
	cfg := configFor(c)
	const wrong = "wrong-password-2468"
	cfg.Password = wrong
	auths := etcdtest.Authentications(t)
	s := dial(t, cfg, nil)
	_, err := s.Members(t.Context())
	checkErr(t, err, []string{`authentication failed for user "root"`, "--user/--password"}, wrong, c.Password)
	if _, err := s.Take(t.Context(), filepath.Join(t.TempDir(), "snap.db"), nil, snapshot.Options{}); err == nil {
		t.Error("Take with a refused login succeeded")
	}
	if got := etcdtest.Authentications(t) - auths; got != 1 {
		t.Errorf("%d logins with wrong credentials in one session, want 1", got)
	}
}
