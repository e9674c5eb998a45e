package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
)

// TestKitCommands: `snapshot` with kit.paths stores the kit and names it;
// `kit list`, `kit show` (decrypting and checking with an identity) and
// `kit restore` lay the PKI out below a new root; a second restore is
// refused (exit 1, nothing written) until --force, which moves aside;
// --dry-run writes nothing; bad input is a clear error.
func TestKitCommands(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 50)
	dir := t.TempDir()
	root := filepath.Join(dir, "host")
	now := time.Now()
	tr := kittest.Kubeadm(t, root, now, now.Add(40*24*time.Hour))
	id, idFile := kittest.Identity(t, dir)
	_, otherFile := kittest.Identity(t, t.TempDir())
	store := "file://" + filepath.Join(dir, "store")
	common := []string{"--store", store, "--cluster", "prod", "--log-format", "json"}
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, nil, append(args, common...)...)
	}
	code, out, errOut := cli("snapshot", "--endpoints", strings.Join(c.Endpoints(), ","), "--spool-dir", filepath.Join(dir, "spool"),
		"--kit-path", "kubeadm", "--kit-root", root, "--recipient", id.Recipient().String())
	if code != 0 {
		t.Fatalf("snapshot exit %d\n%s\n%s", code, out, errOut)
	}

	code, out, errOut = cli("kit", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("kit list exit %d: %s", code, errOut)
	}
	var kits []listedKit
	if err := json.Unmarshal([]byte(out), &kits); err != nil || len(kits) != 1 || len(kits[0].Backups) != 1 {
		t.Fatalf("kit list: %v, %s", err, out)
	}
	kitID := kits[0].ID

	code, out, errOut = cli("kit", "show", "latest", "--identity-file", idFile)
	if code != 0 || !strings.Contains(out, "kit "+kitID) || !strings.Contains(out, fmt.Sprintf("%d pairs match", tr.Pairs)) || !strings.Contains(out, "/etc/kubernetes/pki/apiserver.crt") {
		t.Fatalf("kit show exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut = cli("kit", "show", kitID[:12], "--identity-file", otherFile); code != 1 || !strings.Contains(out+errOut, "cannot decrypt") {
		t.Errorf("kit show with the wrong identity: exit %d\n%s\n%s", code, out, errOut)
	}

	to := filepath.Join(dir, "newhost")
	if code, out, errOut = cli("kit", "restore", "--to", to, "--dry-run", "--identity-file", idFile); code != 0 || !strings.Contains(out, "would restore") {
		t.Fatalf("kit restore --dry-run exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(to); err == nil {
		t.Fatalf("--dry-run created %s", to)
	}
	if code, out, errOut = cli("kit", "restore", "latest", "--to", to, "--identity-file", idFile); code != 0 {
		t.Fatalf("kit restore exit %d\n%s\n%s", code, out, errOut)
	}
	for _, p := range tr.Files {
		want, _ := os.ReadFile(filepath.Join(root, p))
		got, err := os.ReadFile(filepath.Join(to, p))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s not restored: %v", p, err)
		}
	}
	if code, out, errOut = cli("kit", "restore", "--to", to, "--identity-file", idFile); code != 1 || !strings.Contains(errOut, "already exists: nothing was written") {
		t.Errorf("second kit restore: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut = cli("kit", "restore", "--to", to, "--force", "--identity-file", idFile); code != 0 || !strings.Contains(out, "lifeboat-old-") {
		t.Errorf("kit restore --force: exit %d\n%s\n%s", code, out, errOut)
	}

	// A restore of the backup says where its kit is.
	code, out, errOut = cli("restore", "latest", "--data-dir", filepath.Join(dir, "etcd-data"), "--name", "cp1",
		"--initial-advertise-peer-urls", "https://127.0.0.1:2380", "--identity-file", idFile, "--spool-dir", filepath.Join(dir, "spool"), "--scratch-dir", filepath.Join(dir, "scratch"))
	if code != 0 || !strings.Contains(out, "lifeboat kit restore "+kits[0].Backups[0]+" --to /") {
		t.Errorf("restore exit %d: no kit hint\n%s\n%s", code, out, errOut)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no --to", []string{"kit", "restore", "--identity-file", idFile}, 2, "--to DIR is required"},
		{"no identity", []string{"kit", "restore", "--to", t.TempDir()}, 2, "an age identity is needed"},
		{"unknown kit", []string{"kit", "show", "deadbeefdeadbeef"}, 1, "not found"},
		{"unknown preset", []string{"snapshot", "--kit-path", "kubeadmm", "--recipient", id.Recipient().String()}, 2, `kit.paths: "kubeadmm": not a preset`},
		{"kit without recipients", []string{"snapshot", "--kit-path", "kubeadm"}, 2, "kit.paths: a recovery kit holds the cluster's keys"},
		{"relative root", []string{"snapshot", "--kit-path", "k3s", "--kit-root", "host", "--recipient", id.Recipient().String()}, 2, "kit.root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, want %d saying %q\n%s\n%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}
