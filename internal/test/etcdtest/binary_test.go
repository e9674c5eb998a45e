package etcdtest_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// TestStartBinary: an etcd binary runs as a child on loopback, serves
// reads and writes, and is gone after Stop.
func TestStartBinary(t *testing.T) {
	t.Parallel()
	bin := etcdtest.Current.Need(t)
	p := etcdtest.StartBinary(t, bin)
	cli := p.Client(t)
	putGet(t, cli)
	st, err := cli.Status(t.Context(), p.ClientURL)
	if err != nil {
		t.Fatalf("status of %s: %v", bin, err)
	}
	if !strings.HasPrefix(st.Version, etcdtest.Current.Minor+".") {
		t.Errorf("%s (Current) is etcd %s, want go.mod's %s", bin, st.Version, etcdtest.Current.Minor)
	}
	if _, err := os.Stat(filepath.Join(p.DataDir, "member")); err != nil {
		t.Errorf("data dir: %v", err)
	}
	p.Stop()
	p.Stop() // idempotent
	// Nothing listens on its port any more.
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.ClientURL, "http://"), time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Stop", p.ClientURL)
	}
}

func TestFindBinary(t *testing.T) {
	t.Setenv("ETCDTEST_NONE_BIN", "")
	if b := etcdtest.FindBinary(t, "ETCDTEST_NONE_BIN", "no-such-etcd"); b != "" {
		t.Errorf("FindBinary of a missing binary = %q, want empty", b)
	}
	t.Setenv("ETCDTEST_SOME_BIN", "/opt/etcd")
	if b := etcdtest.FindBinary(t, "ETCDTEST_SOME_BIN", "no-such-etcd"); b != "/opt/etcd" {
		t.Errorf("FindBinary with the variable set = %q, want /opt/etcd", b)
	}
}

// TestVersionsTable: the version tests' servers are distinct binaries, each
// Name within its Minor, and the last is Current.
func TestVersionsTable(t *testing.T) {
	vs := etcdtest.Versions
	if len(vs) == 0 || vs[len(vs)-1] != etcdtest.Current {
		t.Fatalf("Versions = %v, want Current (%v) last", vs, etcdtest.Current)
	}
	seen := map[string]bool{}
	for _, v := range vs {
		if v.Name != v.Minor && !strings.HasPrefix(v.Name, v.Minor+".") {
			t.Errorf("%+v: Name is not a release of Minor", v)
		}
		for _, k := range []string{v.Name, v.Env, v.Bin} {
			if k == "" || seen[k] {
				t.Errorf("%+v: %q is empty or used twice", v, k)
			}
			seen[k] = true
		}
	}
}
