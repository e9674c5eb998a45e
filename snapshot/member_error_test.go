package snapshot_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// TestTakeMemberDiesMidStream: a stream that breaks off after data is a
// *MemberError naming the member, Take does not go on to another member
// itself (the spool already holds bytes), and Options.Skip keeps Take away
// from a member that failed.
func TestTakeMemberDiesMidStream(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	fill(t, c, 64, 64<<10)
	cut := etcdtest.NewProxy(t, c.Members[0].ClientURL, etcdtest.ProxyOptions{CutAfter: 1 << 20}).URL
	cfg := configFor(c)
	cfg.Endpoints = []string{cut, c.Members[1].ClientURL, c.Members[2].ClientURL}
	cfg.Member = snapshot.MemberAny

	spool := filepath.Join(t.TempDir(), "snap.db")
	_, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, nil)
	var me *snapshot.MemberError
	if !errors.As(err, &me) || me.Endpoint != cut || me.Member != c.Members[0].Name {
		t.Fatalf("Take = %v, want a MemberError for %s (%s)", err, cut, c.Members[0].Name)
	}
	checkErr(t, err, []string{"snapshot stream from " + cut + " broke off", "the member stopped"})
	checkNoSpool(t, spool)

	info, err := take(t.Context(), cfg, spool, nil, snapshot.Options{Skip: []string{cut}}, nil)
	if err != nil {
		t.Fatalf("Take skipping %s: %v", cut, err)
	}
	if info.Endpoint != c.Members[1].ClientURL {
		t.Errorf("Endpoint = %s, want the next member %s", info.Endpoint, c.Members[1].ClientURL)
	}
	checkSpool(t, spool, info.Size, info.SHA256)

	spool2 := filepath.Join(t.TempDir(), "snap.db")
	_, err = take(t.Context(), cfg, spool2, nil, snapshot.Options{Skip: cfg.Endpoints}, nil)
	checkErr(t, err, []string{"no etcd member left to stream from"})
	checkNoSpool(t, spool2)
}
