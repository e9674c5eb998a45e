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
	if code, out, errOut = cli("kit", "show", kitID[:12], "--identity-file", otherFile); code != 2 || !strings.Contains(out+errOut, "cannot decrypt") {
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

	// A file where a directory of the kit goes: the dry run shows it, the
	// restore refuses before writing anything, --force moves it aside.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "etc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blocked, "etc/kubernetes"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	inTheWay := "refuse  drwx------ " + fmt.Sprintf("%d:%d ", os.Geteuid(), os.Getegid()) + filepath.Join(blocked, "etc/kubernetes") + " (not a directory"
	for _, args := range [][]string{{"--dry-run"}, nil} {
		code, out, errOut = cli(append([]string{"kit", "restore", "--to", blocked, "--identity-file", idFile}, args...)...)
		if code != 1 || !strings.Contains(out, inTheWay) || !strings.Contains(errOut, "nothing was written") {
			t.Errorf("kit restore %v over a file in a directory's place: exit %d\n%s\n%s", args, code, out, errOut)
		}
		if entries, _ := os.ReadDir(filepath.Join(blocked, "etc")); len(entries) != 1 {
			t.Errorf("kit restore %v over a file in a directory's place wrote %v", args, entries)
		}
	}
	if code, out, errOut = cli("kit", "restore", "--to", blocked, "--force", "--identity-file", idFile); code != 0 || !strings.Contains(out, "etc/kubernetes.lifeboat-old-") {
		t.Errorf("kit restore --force over a file in a directory's place: exit %d\n%s\n%s", code, out, errOut)
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
		{"unknown preset", []string{"snapshot", "--kit-path", "kubeadmm", "--recipient", id.Recipient().String()}, 2, `(kit.paths): "kubeadmm": not a preset`},
		{"kit without recipients", []string{"snapshot", "--kit-path", "kubeadm"}, 2, "(kit.paths): a recovery kit holds the cluster's keys"},
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

// TestKitVerify: `kit verify` passes a good kit (exit 0, its pairs and
// first expiry) and fails (exit 1, naming what is wrong) a kit object
// with one byte changed, a kit whose certificate does not match the key
// beside it, and a wrong identity; without an identity it is a usage
// error (exit 2).
func TestKitVerify(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 20)
	dir := t.TempDir()
	now := time.Now()
	id, idFile := kittest.Identity(t, dir)
	_, otherFile := kittest.Identity(t, t.TempDir())
	// Two clusters in one store: a good kit and one with a mismatched pair.
	good, mismatched := filepath.Join(dir, "good"), filepath.Join(dir, "mismatched")
	tr := kittest.Kubeadm(t, good, now, now.Add(40*24*time.Hour))
	kittest.Kubeadm(t, mismatched, now, now.Add(40*24*time.Hour))
	other, err := os.ReadFile(filepath.Join(mismatched, "etc/kubernetes/pki/front-proxy-ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mismatched, "etc/kubernetes/pki/ca.key"), other, 0o600); err != nil {
		t.Fatal(err)
	}
	storeDir := filepath.Join(dir, "store")
	cli := func(cluster string, args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, nil, append(args, "--store", "file://"+storeDir, "--cluster", cluster, "--log-format", "json")...)
	}
	for cluster, root := range map[string]string{"good": good, "mismatched": mismatched} {
		if code, out, errOut := cli(cluster, "snapshot", "--endpoints", strings.Join(c.Endpoints(), ","), "--spool-dir", filepath.Join(dir, "spool"),
			"--kit-path", "kubeadm", "--kit-root", root, "--recipient", id.Recipient().String()); code != 0 {
			t.Fatalf("snapshot of %s: exit %d\n%s\n%s", cluster, code, out, errOut)
		}
	}

	code, out, errOut := cli("good", "kit", "verify", "--identity-file", idFile)
	if code != 0 || !strings.Contains(out, " is good") || !strings.Contains(out, fmt.Sprintf("%d pairs match", tr.Pairs)) ||
		!strings.Contains(out, "first expiry "+tr.EarliestExpiry.Format(time.RFC3339)) {
		t.Fatalf("kit verify of a good kit: exit %d\n%s\n%s", code, out, errOut)
	}
	objects, err := filepath.Glob(filepath.Join(storeDir, "good", "kits", "*.tar.zst.age"))
	if err != nil || len(objects) != 1 {
		t.Fatalf("kit objects of cluster good: %v, %v", objects, err)
	}

	for _, tc := range []struct {
		name    string
		cluster string
		args    []string
		damage  func(t *testing.T)
		code    int
		want    string
	}{
		{name: "wrong identity", cluster: "good", args: []string{"--identity-file", otherFile}, code: 2, want: "cannot decrypt"},
		{name: "no identity", cluster: "good", code: 2, want: "an age identity is needed"},
		{name: "mismatched pair", cluster: "mismatched", args: []string{"--identity-file", idFile}, code: 1,
			want: "/etc/kubernetes/pki/ca.*: the certificate (or public key) does not match the private key beside it"},
		{name: "unknown kit", cluster: "good", args: []string{"deadbeefdeadbeef", "--identity-file", idFile}, code: 1, want: "not found"},
		{name: "corrupted object", cluster: "good", args: []string{"--identity-file", idFile}, damage: func(t *testing.T) {
			b, err := os.ReadFile(objects[0])
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x01
			if err := os.WriteFile(objects[0], b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, code: 1, want: "its manifest says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.damage != nil {
				tc.damage(t)
			}
			code, out, errOut := cli(tc.cluster, append([]string{"kit", "verify"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("exit %d, want %d saying %q\n%s\n%s", code, tc.code, tc.want, out, errOut)
			}
			if code == 1 && !strings.Contains(errOut, "recovery kit failed verification") && tc.name != "unknown kit" {
				t.Errorf("stderr does not say the kit failed verification:\n%s", errOut)
			}
		})
	}
}
