package restore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// TestRestoreNeedsAnExplicitMember (item 17): without --initial-cluster a
// restore used to create member "default" at http://localhost:2380.
func TestRestoreNeedsAnExplicitMember(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "s.db")
	if err := os.WriteFile(snap, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    restore.RestoreOptions
		wantErr string
	}{
		{name: "nothing", opts: restore.RestoreOptions{DataDir: "/d"}, wantErr: "--name is required"},
		{name: "peer URLs without a name", opts: restore.RestoreOptions{DataDir: "/d", PeerURLs: []string{"http://10.0.0.1:2380"}}, wantErr: "--name is required"},
		{name: "name without peers", opts: restore.RestoreOptions{DataDir: "/d", Name: "m1"}, wantErr: "--initial-cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.SnapshotPath = snap
			if _, err := restore.Restore(t.Context(), tt.opts); !errors.Is(err, restore.ErrOptions) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Restore error %v, want ErrOptions with %q", err, tt.wantErr)
			}
			if _, err := restore.Plan(tt.opts); !errors.Is(err, restore.ErrOptions) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Plan error %v, want ErrOptions with %q", err, tt.wantErr)
			}
		})
	}
	// The explicit forms are accepted.
	for _, o := range []restore.RestoreOptions{
		{DataDir: "/d", Name: "m1", PeerURLs: []string{"http://10.0.0.1:2380"}},
		{DataDir: "/d", Name: "m1", InitialCluster: "m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380"},
		{DataDir: "/d", InitialCluster: "m1=http://10.0.0.1:2380"},
		{DataDir: "/r/{name}", InitialCluster: "m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380"},
	} {
		if _, err := restore.Plan(o); err != nil {
			t.Errorf("Plan(%+v): %v", o, err)
		}
	}
}

// TestRestoreRefusesARunningEtcd (item 16): a data dir whose etcd still
// runs is refused, even with Force, and the error names the process.
func TestRestoreRefusesARunningEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	bin := etcdtest.Current.Need(t)
	f := fetchBackup(t, 50)
	peer, err := child.FreeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "etcd")
	opts := restore.RestoreOptions{SnapshotPath: f.path, DataDir: dir, Name: "m1", PeerURLs: []string{peer}}
	res, err := restore.Restore(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	client, err := child.FreeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	args := append(res.Members[0].EtcdFlags(), "--listen-client-urls", client, "--advertise-client-urls", client, "--log-level", "error")
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	waitHashKV(ctx, t, cli, client, 0)

	opts.Force = true
	_, err = restore.Restore(t.Context(), opts)
	if !errors.Is(err, restore.ErrDataDirInUse) {
		t.Fatalf("Restore into the dir of a running etcd: %v, want ErrDataDirInUse\netcd output:\n%s", err, out.String())
	}
	if want := "pid " + strconv.Itoa(cmd.Process.Pid) + " (etcd)"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the process %q", err, want)
	}
	if _, err := restore.Plan(opts); !errors.Is(err, restore.ErrDataDirInUse) {
		t.Errorf("Plan: %v, want ErrDataDirInUse", err)
	}
	if asides, _ := filepath.Glob(dir + ".lifeboat-old-*"); len(asides) != 0 {
		t.Errorf("the running member's dir was moved aside: %v", asides)
	}

	// Stopped: the same restore goes through.
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := restore.Restore(t.Context(), opts); err != nil {
		t.Errorf("Restore after etcd stopped: %v", err)
	}
}

// TestRestoreOwner (item 18): --owner chowns everything restored.
func TestRestoreOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	f := fetchBackup(t, 50)
	root := t.TempDir()
	owner, err := restore.ParseOwner("4242:4343")
	if err != nil {
		t.Fatal(err)
	}
	_, err = restore.Restore(t.Context(), restore.RestoreOptions{
		SnapshotPath: f.path, DataDir: filepath.Join(root, "data"), WALDir: filepath.Join(root, "wal"),
		Name: "m1", PeerURLs: []string{"http://10.0.0.1:2380"}, Owner: &owner,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range []string{"data", "wal"} {
		err := filepath.Walk(filepath.Join(root, d), func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != 4242 || st.Gid != 4343 {
				t.Errorf("%s owned by %d:%d, want 4242:4343", p, st.Uid, st.Gid)
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 4 {
		t.Errorf("only %d files checked", n)
	}
}

func TestParseOwner(t *testing.T) {
	root, err := user.LookupId("0")
	if err != nil {
		t.Skipf("no user 0: %v", err)
	}
	tests := []struct {
		in       string
		uid, gid int
	}{
		{"4242", 4242, -1},
		{"4242:4343", 4242, 4343},
		{root.Username, 0, 0},
		{root.Username + ":4343", 0, 4343},
		{"0:" + mustGroupName(t, "0"), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := restore.ParseOwner(tt.in)
			if err != nil || got.UID != tt.uid || got.GID != tt.gid {
				t.Errorf("ParseOwner(%q) = %+v, %v; want %d:%d", tt.in, got, err, tt.uid, tt.gid)
			}
		})
	}
	for _, bad := range []string{"", ":", "no-such-user-lifeboat", "0:no-such-group-lifeboat", "-1", "1:-2", "a:b:c"} {
		if _, err := restore.ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q) accepted", bad)
		}
	}
	if _, err := restore.ParseOwner("no-such-user-lifeboat"); err == nil || !strings.Contains(err.Error(), "unknown user") {
		t.Errorf("unknown user error: %v", err)
	}
}

func mustGroupName(t *testing.T, gid string) string {
	t.Helper()
	g, err := user.LookupGroupId(gid)
	if err != nil {
		t.Skipf("no group %s: %v", gid, err)
	}
	return g.Name
}

func FuzzParseOwner(f *testing.F) {
	for _, s := range []string{"etcd", "etcd:etcd", "0:0", "4242", ":", "a:b:c", "-1", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := restore.ParseOwner(s)
		if err == nil && (o.UID < 0 || o.GID < -1) {
			t.Errorf("ParseOwner(%q) = %+v", s, o)
		}
	})
}
