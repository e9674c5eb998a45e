package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
)

// TestRestoreKubeadmWithKit: restore --kubeadm --with-kit lays the
// backup's recovery kit back first: --dry-run lists the kit's files and
// changes nothing; without an identity that opens the kit it stops before
// anything of etcd is touched (no journal, manifests in place); --with-kit
// goes with --kubeadm and not with --rollback.
func TestRestoreKubeadmWithKit(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	root := t.TempDir()
	now := time.Now()
	tr := kittest.Kubeadm(t, root, now, now.Add(40*24*time.Hour))
	id, idFile := kittest.Identity(t, t.TempDir())
	if code, out, errOut := runCLI(t, nil, append([]string{"snapshot", "--kit-path", "kubeadm", "--kit-root", root, "--recipient", id.Recipient().String()}, e.args...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s\n%s", code, out, errOut)
	}
	writeKubeadmManifests(t, root, "cp1=https://10.0.0.11:2380") // after the kit: kittest's apiserver manifest names the encryption config
	gone := filepath.Join(root, kittest.EncryptionConfig)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	defer func(old string, oldEUID func() int) { kubeadmRoot, euid = old, oldEUID }(kubeadmRoot, euid)
	kubeadmRoot, euid = root, func() int { return 0 }
	untouched := func(what string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(root, "etc/kubernetes/lifeboat")); err == nil {
			t.Errorf("%s: etc/kubernetes/lifeboat was made", what)
		}
		if _, err := os.Stat(filepath.Join(root, "etc/kubernetes/manifests/etcd.yaml")); err != nil {
			t.Errorf("%s: etcd.yaml: %v", what, err)
		}
	}

	code, out, errOut := runCLI(t, nil, append([]string{"restore", "--kubeadm", "latest", "--with-kit", "--dry-run", "--identity-file", idFile}, e.args...)...)
	if code != 0 || !strings.Contains(out, "would restore kit") || !strings.Contains(out, kittest.EncryptionConfig) || !strings.Contains(out, "dry run: nothing was changed") {
		t.Errorf("--with-kit --dry-run: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(gone); err == nil {
		t.Errorf("--dry-run wrote %s", gone)
	}
	if len(tr.Files) == 0 {
		t.Fatal("kittest wrote no kit files")
	}
	untouched("--dry-run")

	code, out, errOut = runCLI(t, nil, append([]string{"restore", "--kubeadm", "latest", "--with-kit"}, e.args...)...)
	if code == 0 || !strings.Contains(errOut, "--with-kit") || !strings.Contains(errOut, "nothing of etcd was changed") {
		t.Errorf("--with-kit without an identity: exit %d, want an error naming --with-kit\n%s\n%s", code, out, errOut)
	}
	untouched("no identity")

	for _, args := range [][]string{{"restore", "latest", "--with-kit"}, {"restore", "--kubeadm", "--rollback", "--with-kit"}} {
		if code, out, errOut := runCLI(t, nil, append(args, e.args...)...); code != exitUsage || !strings.Contains(errOut, "--with-kit") {
			t.Errorf("%v: exit %d, want %d\n%s\n%s", args, code, exitUsage, out, errOut)
		}
	}
}
