package etcdtest_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/etcdtest"
)

// TestStartBinary: an etcd binary runs as a child on loopback, serves
// reads and writes, and is gone after Stop.
func TestStartBinary(t *testing.T) {
	t.Parallel()
	bin := etcdtest.NeedBinary(t, "ETCD_BIN", "etcd")
	p := etcdtest.StartBinary(t, bin)
	cli := p.Client(t)
	putGet(t, cli)
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
