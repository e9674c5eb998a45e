package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// trustEnv is one store and cluster name, a signing key and the
// arguments that point a command at them.
type trustEnv struct {
	dir, store, key, pub string
	base                 []string // store, spool, scratch, cluster, log format
}

func newTrustEnv(t *testing.T) *trustEnv {
	t.Helper()
	dir := t.TempDir()
	e := &trustEnv{dir: dir, store: filepath.Join(dir, "store"), key: filepath.Join(dir, "signing.key")}
	code, out, errOut := runCLI(t, nil, "keygen", "-o", e.key)
	if code != 0 {
		t.Fatalf("keygen exit %d: %s", code, errOut)
	}
	e.pub = strings.TrimSpace(out)
	e.base = []string{"--store", "file://" + e.store, "--spool-dir", filepath.Join(dir, "spool"), "--cluster", "prod",
		"--log-format", "json", "--scratch-dir", filepath.Join(dir, "scratch")}
	return e
}

// cli runs lifeboat with the env's store arguments after args.
func (e *trustEnv) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, nil, append(args, e.base...)...)
}

func (e *trustEnv) manifests(t *testing.T) []*repository.Manifest {
	t.Helper()
	code, out, errOut := e.cli(t, "list", "-o", "json", "--trusted-key", e.pub)
	if code != 0 {
		t.Fatalf("list exit %d: %s", code, errOut)
	}
	var res struct {
		Backups []struct {
			ID       string               `json:"id"`
			State    string               `json:"state"`
			Lineage  string               `json:"lineage"`
			Manifest *repository.Manifest `json:"manifest"`
		} `json:"backups"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	var ms []*repository.Manifest
	for _, b := range res.Backups {
		ms = append(ms, b.Manifest)
	}
	return ms
}

// TestTrustAndLineage, as an operator and an attacker would meet it:
// a signed cluster's backups; a second, unrelated etcd cluster refused
// under the same name (exit 2, both IDs, the way out); an attacker with
// the store's credentials but not the signing key planting a newer
// backup (even with --adopt-cluster): listed untrusted, skipped by
// restore latest and drill, refused by id; then the real cluster restored
// by lifeboat, and by fetch + etcdutl with the documented token, going on
// under the same name; and --adopt-cluster starting a new lineage on
// purpose.
func TestTrustAndLineage(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	etcdBin := etcdtest.NeedBinary(t, "ETCD_BIN", "etcd")
	e := newTrustEnv(t)
	a := etcdtest.Start(t, etcdtest.Options{})
	seedCluster(t, a, 100)
	b := etcdtest.Start(t, etcdtest.Options{})
	seedCluster(t, b, 50)
	at := []string{"--endpoints", strings.Join(a.Endpoints(), ",")}
	bt := []string{"--endpoints", strings.Join(b.Endpoints(), ",")}
	signed := []string{"--signing-key", e.key}
	trusted := []string{"--trusted-key", e.pub}

	if code, out, errOut := e.cli(t, append(append([]string{"snapshot"}, at...), signed...)...); code != 0 {
		t.Fatalf("snapshot of a: exit %d\n%s\n%s", code, out, errOut)
	}
	good := e.manifests(t)[0]

	t.Run("another cluster is refused", func(t *testing.T) {
		code, _, errOut := e.cli(t, append(append([]string{"snapshot"}, bt...), signed...)...)
		if code != 2 {
			t.Fatalf("snapshot of b into a's name: exit %d, want 2\n%s", code, errOut)
		}
		for _, want := range []string{good.EtcdClusterID, "--adopt-cluster", `"prod"`, e.store} {
			if !strings.Contains(errOut, want) {
				t.Errorf("refusal does not name %q:\n%s", want, errOut)
			}
		}
		if n := len(e.manifests(t)); n != 1 {
			t.Errorf("%d backups after the refusal, want 1", n)
		}
	})

	// The attacker: the store's credentials, lifeboat, no signing key.
	// Its backup is to be the newest: ids sort by the second first.
	nextSecond()
	var bID string
	t.Run("a planted backup is untrusted", func(t *testing.T) {
		code, _, errOut := e.cli(t, append([]string{"snapshot"}, bt...)...)
		if code != 2 {
			t.Fatalf("unsigned snapshot of b without adopting: exit %d\n%s", code, errOut)
		}
		// The refusal names b's cluster ID; with it the attacker adopts.
		i := strings.Index(errOut, "--adopt-cluster ")
		bID = strings.Fields(errOut[i+len("--adopt-cluster "):])[0]
		if code, out, errOut := e.cli(t, append(append([]string{"snapshot"}, bt...), "--adopt-cluster", bID)...); code != 0 {
			t.Fatalf("planted snapshot: exit %d\n%s\n%s", code, out, errOut)
		}
		code, out, _ := e.cli(t, append([]string{"list"}, trusted...)...)
		if code != 0 || !strings.Contains(out, "untrusted: not signed") || !strings.Contains(out, "1 untrusted backup(s)") {
			t.Errorf("list with the trusted key: exit %d\n%s", code, out)
		}
		dir := filepath.Join(e.dir, "restored-latest")
		code, out, errOut = e.cli(t, append([]string{"restore", "latest", "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"}, trusted...)...)
		if code != 0 || !strings.Contains(out, good.ID) || !strings.Contains(errOut, "skipping an untrusted backup") {
			t.Errorf("restore latest: exit %d, want %s restored and the planted one named as skipped\n%s\n%s", code, good.ID, out, errOut)
		}
		planted := e.manifests(t)[0]
		if planted.ID == good.ID {
			t.Fatalf("the planted backup is not the newest listed:\n%s", out)
		}
		code, _, errOut = e.cli(t, append([]string{"restore", planted.ID, "--data-dir", filepath.Join(e.dir, "x"), "--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"}, trusted...)...)
		if code != 2 || !strings.Contains(errOut, "untrusted") {
			t.Errorf("restore of the planted id: exit %d, want 2 and untrusted\n%s", code, errOut)
		}
		code, out, errOut = e.cli(t, append([]string{"drill"}, trusted...)...)
		if code != 0 || !strings.Contains(out, "drill of backup "+good.ID+": PASSED") {
			t.Errorf("drill latest: exit %d, want %s drilled\n%s\n%s", code, good.ID, out, errOut)
		}
		// Without a trusted key configured nothing is checked: the
		// adopted lineage wins (what lifeboat did before signing).
		code, out, _ = e.cli(t, "restore", "latest", "--dry-run", "--data-dir", filepath.Join(e.dir, "y"), "--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380")
		if code != 0 || !strings.Contains(out, planted.ID) {
			t.Errorf("without trust, latest: exit %d, want the planted %s\n%s", code, planted.ID, out)
		}
	})

	t.Run("a cluster restored by lifeboat continues the lineage", func(t *testing.T) {
		dir := filepath.Join(e.dir, "restored-a")
		peer := fmt.Sprintf("http://127.0.0.1:%d", freeTCPPort(t))
		code, out, errOut := e.cli(t, append([]string{"restore", good.ID, "--data-dir", dir, "--name", "r1", "--initial-advertise-peer-urls", peer}, trusted...)...)
		if code != 0 {
			t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
		}
		p := etcdtest.StartRestored(t, etcdBin, restoredFlags(t, out))
		nextSecond() // a backup id is its second and revision: the restored cluster is at the backup's
		code, out, errOut = e.cli(t, append([]string{"snapshot", "--endpoints", p.ClientURL}, signed...)...)
		if code != 0 {
			t.Fatalf("snapshot of the restored cluster: exit %d\n%s\n%s", code, out, errOut)
		}
		m := e.manifests(t)[0]
		if m.RestoredFrom != good.ID || m.Lineage != good.EtcdClusterID || m.EtcdClusterID == good.EtcdClusterID {
			t.Errorf("restored cluster's backup: restored_from %q lineage %q cluster %q, want %s, %s and a new cluster ID", m.RestoredFrom, m.Lineage, m.EtcdClusterID, good.ID, good.EtcdClusterID)
		}
	})

	t.Run("a cluster restored with fetch and etcdutl continues the lineage", func(t *testing.T) {
		etcdutl := etcdtest.NeedBinary(t, "ETCDUTL_BIN", "etcdutl")
		snap := filepath.Join(e.dir, "snap.db")
		if code, _, errOut := e.cli(t, append([]string{"fetch", good.ID, snap}, trusted...)...); code != 0 {
			t.Fatalf("fetch: exit %d\n%s", code, errOut)
		}
		dir := filepath.Join(e.dir, "restored-etcdutl")
		peer := fmt.Sprintf("http://127.0.0.1:%d", freeTCPPort(t))
		cmd := exec.Command(etcdutl, "snapshot", "restore", snap, "--data-dir", dir, "--name", "u1",
			"--initial-cluster", "u1="+peer, "--initial-advertise-peer-urls", peer, "--initial-cluster-token", repository.RestoreToken(good.ID))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
		}
		p := etcdtest.StartRestored(t, etcdBin, []string{"--name", "u1", "--data-dir", dir, "--initial-advertise-peer-urls", peer, "--listen-peer-urls", peer})
		nextSecond() // the other restored cluster's backup may be of this second and revision
		code, out, errOut := e.cli(t, append([]string{"snapshot", "--endpoints", p.ClientURL}, signed...)...)
		if code != 0 {
			t.Fatalf("snapshot of the etcdutl-restored cluster: exit %d\n%s\n%s", code, out, errOut)
		}
		if m := e.manifests(t)[0]; m.RestoredFrom != good.ID || m.Lineage != good.EtcdClusterID {
			t.Errorf("restored_from %q lineage %q, want %s and %s", m.RestoredFrom, m.Lineage, good.ID, good.EtcdClusterID)
		}
	})

	t.Run("adopt-cluster starts a new lineage on purpose", func(t *testing.T) {
		nextSecond()
		code, out, errOut := e.cli(t, append(append(append([]string{"snapshot"}, bt...), signed...), "--adopt-cluster", bID)...)
		if code != 0 {
			t.Fatalf("adopting snapshot: exit %d\n%s\n%s", code, out, errOut)
		}
		ms := e.manifests(t)
		if ms[0].Lineage != bID || len(ms[0].Supersedes) != 1 || ms[0].Supersedes[0] != good.EtcdClusterID {
			t.Errorf("adopted backup: lineage %q supersedes %v, want %s over %s", ms[0].Lineage, ms[0].Supersedes, bID, good.EtcdClusterID)
		}
		code, out, _ = e.cli(t, append([]string{"list"}, trusted...)...)
		if code != 0 || !strings.Contains(out, "lineage "+bID+" (etcd cluster "+bID+"), current:") || !strings.Contains(out, "lineage "+good.EtcdClusterID) || !strings.Contains(out, "superseded") {
			t.Errorf("list of two lineages:\n%s", out)
		}
		// The old lineage stays restorable when named.
		code, out, errOut = e.cli(t, append([]string{"restore", "latest", "--dry-run", "--lineage", good.EtcdClusterID, "--data-dir", filepath.Join(e.dir, "z"), "--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"}, trusted...)...)
		if code != 0 || strings.Contains(out, ms[0].ID) {
			t.Errorf("restore latest --lineage old: exit %d\n%s\n%s", code, out, errOut)
		}
	})
}

// nextSecond waits for the wall clock's next second: backup ids sort by
// the second first, and a backup meant to be the newest must be.
func nextSecond() {
	for now := time.Now().Truncate(time.Second); time.Now().Truncate(time.Second).Equal(now); {
		time.Sleep(10 * time.Millisecond)
	}
}

// restoredFlags returns the etcd flags `lifeboat restore` printed.
func restoredFlags(t *testing.T, out string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "etcd --name ") {
			return strings.Fields(line)[1:]
		}
	}
	t.Fatalf("restore printed no etcd command:\n%s", out)
	return nil
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
