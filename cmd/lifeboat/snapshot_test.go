package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// runCLI runs the lifeboat command line in-process and returns exit code,
// stdout and stderr.
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	for k, v := range env {
		t.Setenv(k, v)
	}
	code := run(t.Context(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func seedCluster(t *testing.T, c *etcdtest.Cluster, objects int) seed.Result {
	t.Helper()
	res, err := seed.Kubernetes(t.Context(), c.Client(t), seed.Options{Objects: objects, Compact: true, Seed: 7})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	return res
}

// storeFiles lists every file under dir, relative.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func TestSnapshotListVerify(t *testing.T) {
	tests := []struct {
		name string
		opts etcdtest.Options
	}{
		{name: "one member", opts: etcdtest.Options{Members: 1}},
		{name: "three members over TLS with auth", opts: etcdtest.Options{Members: 3, TLS: true, Auth: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := etcdtest.Start(t, tt.opts)
			res := seedCluster(t, c, 800)
			dir := t.TempDir()
			store, spool := filepath.Join(dir, "store"), filepath.Join(dir, "spool")
			args := []string{"--store", "file://" + store, "--spool-dir", spool, "--cluster", "test", "--log-format", "json",
				"--endpoints", strings.Join(c.Endpoints(), ",")}
			env := map[string]string{}
			if tt.opts.TLS {
				args = append(args, "--cacert", c.CAFile, "--cert", c.CertFile, "--key", c.KeyFile)
			}
			if tt.opts.Auth {
				env["ETCDCTL_USER"] = c.User
				env["ETCDCTL_PASSWORD"] = c.Password
			}
			code, out, errOut := runCLI(t, env, append([]string{"snapshot"}, args...)...)
			if code != 0 {
				t.Fatalf("snapshot exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			if c.Password != "" && strings.Contains(out+errOut, c.Password) {
				t.Error("the etcd password appears in the output")
			}
			if tt.opts.Members == 3 {
				leader := c.Leader(t)
				if strings.Contains(out, leader.ClientURL+" ") {
					t.Errorf("snapshot came from the leader %s by default:\n%s", leader.ClientURL, out)
				}
			}
			if entries, _ := os.ReadDir(spool); len(entries) != 0 {
				t.Errorf("spool not empty: %v", entries)
			}
			for _, f := range storeFiles(t, store) {
				st, _ := os.Stat(filepath.Join(store, f))
				if st.Mode().Perm() != 0o600 {
					t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
				}
			}

			code, out, errOut = runCLI(t, env, append([]string{"list", "-o", "json"}, args...)...)
			if code != 0 {
				t.Fatalf("list exit %d: %s", code, errOut)
			}
			var l listOutput
			if err := json.Unmarshal([]byte(out), &l); err != nil {
				t.Fatalf("list json: %v\n%s", err, out)
			}
			if len(l.Backups) != 1 {
				t.Fatalf("list shows %d backups, want 1", len(l.Backups))
			}
			m := l.Backups[0].Manifest
			if got, want := m.TotalKeys, res.Keys; got != want {
				t.Errorf("manifest total_keys = %d, want %d", got, want)
			}
			if m.Revision < res.Revision {
				t.Errorf("manifest revision %d < seeded revision %d", m.Revision, res.Revision)
			}
			if got, want := m.HashKVStatus, "match"; got != want {
				t.Errorf("hash_kv_status = %q, want %q", got, want)
			}
			if m.Compression != "zstd" || m.ObjectSize >= m.DBSize {
				t.Errorf("object not compressed: %s, %d of %d bytes", m.Compression, m.ObjectSize, m.DBSize)
			}

			code, out, errOut = runCLI(t, env, append([]string{"list"}, args...)...)
			if code != 0 || !strings.Contains(out, m.ID) {
				t.Errorf("list table exit %d, missing %s:\n%s%s", code, m.ID, out, errOut)
			}
			code, out, errOut = runCLI(t, env, append([]string{"verify", "latest"}, args...)...)
			if code != 0 || !strings.Contains(out, "is good") {
				t.Errorf("verify latest exit %d:\n%s%s", code, out, errOut)
			}
		})
	}
}

func TestSnapshotBadInput(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: true, Auth: true})
	seedCluster(t, c, 200)
	otherCA, otherCert, otherKey := etcdtest.OtherCA(t)
	ep := c.Endpoints()[0]
	good := []string{"--endpoints", ep, "--cacert", c.CAFile, "--cert", c.CertFile, "--key", c.KeyFile, "--user", c.User}
	goodEnv := map[string]string{"ETCDCTL_PASSWORD": c.Password}

	notADir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notADir, []byte("x"), 0o600)

	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		spool    func(t *testing.T) string // overrides the spool dir
		wantCode int
		wantErr  string
	}{
		{name: "unreachable endpoint", args: []string{"--endpoints", "https://127.0.0.1:1", "--dial-timeout", "1s", "--cacert", c.CAFile, "--cert", c.CertFile, "--key", c.KeyFile}, wantCode: 1, wantErr: "127.0.0.1:1"},
		{name: "wrong CA", args: []string{"--endpoints", ep, "--dial-timeout", "2s", "--cacert", otherCA, "--cert", c.CertFile, "--key", c.KeyFile, "--user", c.User}, env: goodEnv, wantCode: 1, wantErr: "cacert"},
		{name: "wrong client certificate", args: []string{"--endpoints", ep, "--dial-timeout", "2s", "--cacert", c.CAFile, "--cert", otherCert, "--key", otherKey, "--user", c.User}, env: goodEnv, wantCode: 1, wantErr: "cert"},
		{name: "wrong password", args: good, env: map[string]string{"ETCDCTL_PASSWORD": "not-the-password"}, wantCode: 1, wantErr: "password"},
		{name: "missing CA file", args: []string{"--endpoints", ep, "--cacert", "/nonexistent/ca.pem"}, wantCode: 1, wantErr: "/nonexistent/ca.pem"},
		{name: "spool dir not writable", args: good, env: goodEnv, spool: func(*testing.T) string { return filepath.Join(notADir, "spool") }, wantCode: 1, wantErr: "spool"},
		{name: "spool disk full", args: good, env: goodEnv, spool: smallTmpfs, wantCode: 1, wantErr: "not enough free space"},
		{name: "invalid config", args: []string{"--endpoints", "ftp://localhost:2379"}, wantCode: 2, wantErr: "etcd.endpoints"},
		{name: "bad flag", args: []string{"--no-such-flag"}, wantCode: 2, wantErr: "no-such-flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			store := filepath.Join(dir, "store")
			spool := filepath.Join(dir, "spool")
			if tt.spool != nil {
				spool = tt.spool(t)
			}
			args := append([]string{"snapshot", "--store", "file://" + store, "--spool-dir", spool, "--log-level", "error"}, tt.args...)
			code, out, errOut := runCLI(t, tt.env, args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, out, errOut)
			}
			if !strings.Contains(strings.ToLower(errOut), strings.ToLower(tt.wantErr)) {
				t.Errorf("stderr does not mention %q:\n%s", tt.wantErr, errOut)
			}
			if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; lines != 1 {
				t.Errorf("want one error line, got %d:\n%s", lines, errOut)
			}
			if strings.Contains(errOut, c.Password) {
				t.Error("the password appears in the error")
			}
			if files := storeFiles(t, store); len(files) != 0 {
				t.Errorf("store holds files after a failure: %v", files)
			}
			if entries, err := os.ReadDir(spool); err == nil && len(entries) != 0 {
				t.Errorf("spool not empty: %v", entries)
			}
		})
	}
}

func TestEveryMemberDown(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	eps := c.Endpoints()
	for _, m := range c.Members {
		m.Stop()
	}
	dir := t.TempDir()
	code, _, errOut := runCLI(t, nil, "snapshot", "--store", "file://"+filepath.Join(dir, "store"), "--spool-dir", filepath.Join(dir, "spool"),
		"--endpoints", strings.Join(eps, ","), "--dial-timeout", "1s", "--log-level", "error")
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errOut)
	}
	if !strings.Contains(errOut, "no etcd member reachable") {
		t.Errorf("error does not say no member is reachable:\n%s", errOut)
	}
	if files := storeFiles(t, filepath.Join(dir, "store")); len(files) != 0 {
		t.Errorf("store holds files: %v", files)
	}
}

// smallTmpfs mounts a 256 KiB tmpfs (root is needed; CI runs as root) so a
// spool write runs out of space.
func smallTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a small tmpfs for the disk-full case: %v: %s", err, out)
		}
		t.Skipf("cannot mount a small tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// TestSnapshotSkipUnchanged: lifeboat snapshot --skip-unchanged stores
// nothing when the cluster is unchanged since its newest backup, and says
// so (exit 0); without the flag a snapshot is stored (issue 29).
func TestSnapshotSkipUnchanged(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 20)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	args := []string{"--store", "file://" + store, "--spool-dir", filepath.Join(dir, "spool"), "--cluster", "test",
		"--endpoints", strings.Join(c.Endpoints(), ",")}
	code, out, errOut := runCLI(t, nil, append([]string{"snapshot"}, args...)...)
	if code != 0 || !strings.Contains(out, "stored") {
		t.Fatalf("snapshot exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, nil, append([]string{"snapshot", "--skip-unchanged"}, args...)...)
	if code != 0 || !strings.Contains(out, "cluster unchanged since backup") || strings.Contains(out, "stored\n") {
		t.Fatalf("snapshot --skip-unchanged exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if n := len(storeFiles(t, filepath.Join(store, "test", "snapshots"))); n != 2 {
		t.Errorf("%d files in the snapshot area, want 2 (one backup)", n)
	}
}
