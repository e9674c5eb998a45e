package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
)

// TestIdentityErrors (issue 29): the keys given cannot decrypt the
// backup: exit 2 everywhere, and the error says what is wrong: a wrong
// identity names the recipients the backup is encrypted to, a public key
// given as the identity file says so.
func TestIdentityErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	right, _ := age.GenerateX25519Identity()
	wrong, _ := age.GenerateX25519Identity()
	if code, out, errOut := runCLI(t, nil, append([]string{"snapshot", "--recipient", right.Recipient().String()}, e.args...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s\n%s", code, out, errOut)
	}
	dir := t.TempDir()
	wrongFile := filepath.Join(dir, "wrong.txt")
	publicFile := filepath.Join(dir, "public.txt")
	os.WriteFile(wrongFile, []byte(wrong.String()+"\n"), 0o600)
	os.WriteFile(publicFile, []byte(right.Recipient().String()+"\n"), 0o600)
	for _, cmd := range [][]string{
		{"verify", "latest"},
		{"fetch", "latest", filepath.Join(dir, "snap.db")},
		{"restore", "latest", "--data-dir", filepath.Join(dir, "data"), "--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"},
	} {
		t.Run(cmd[0]+" wrong identity", func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, append(append(cmd, "--identity-file", wrongFile), e.args...)...)
			if code != 2 || !strings.Contains(errOut, right.Recipient().String()) {
				t.Errorf("exit %d, want 2 naming the recipient %s\n%s\n%s", code, right.Recipient(), out, errOut)
			}
			if !strings.Contains(errOut, "1 X25519 recipient") || !strings.Contains(errOut, "none of the identities in "+wrongFile+" matches") {
				t.Errorf("the error does not say what the object wants and whose identities failed:\n%s", errOut)
			}
			if strings.Count(errOut, "backup "+strings.Fields(strings.SplitN(errOut, "backup ", 2)[1])[0]) > 1 {
				t.Errorf("the backup is named more than once (repeated prefixes):\n%s", errOut)
			}
		})
		t.Run(cmd[0]+" public key as identity", func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, append(append(cmd, "--identity-file", publicFile), e.args...)...)
			if code != 2 || !strings.Contains(errOut, "public key") {
				t.Errorf("exit %d, want 2 saying the file holds a public key\n%s\n%s", code, out, errOut)
			}
		})
	}
}

// TestCorruptLatestSuggestsPrevious (issue 29): when latest is damaged,
// verify, fetch and restore of latest name the backup before it and
// latest-proven, the way out at 3 a.m.
func TestCorruptLatestSuggestsPrevious(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	nextSecond()
	e.snapshot(t)
	l, err := e.backups(t).List(t.Context())
	if err != nil || len(l.Backups) != 2 {
		t.Fatalf("backups: %v %v", l, err)
	}
	newest, older := l.Backups[0].Manifest, l.Backups[1].Manifest
	path := filepath.Join(e.store, filepath.FromSlash(newest.Object))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, cmd := range [][]string{
		{"verify", "latest"},
		{"fetch", "latest", filepath.Join(dir, "snap.db")},
		{"restore", "latest", "--data-dir", filepath.Join(dir, "data"), "--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"},
	} {
		code, out, errOut := runCLI(t, nil, append(cmd, e.args...)...)
		if code != 1 || !strings.Contains(errOut, older.ID) || !strings.Contains(errOut, "latest-proven") {
			t.Errorf("%s of a damaged latest: exit %d, want 1 naming %s and latest-proven\n%s\n%s", cmd[0], code, older.ID, out, errOut)
		}
		if n := strings.Count(errOut, "does not match its manifest"); n != 1 {
			t.Errorf("%s of a damaged latest says the mismatch %d times, want once:\n%s", cmd[0], n, errOut)
		}
	}
}

// TestRestoreOptionErrorsFirst (issue 29): a mistake in restore's options
// is reported before the store is read (here the store does not even
// exist): the user fixes the command line first.
func TestRestoreOptionErrorsFirst(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI(t, nil, "restore", "latest", "--store", "file://"+filepath.Join(dir, "nostore"), "--cluster", "c",
		"--spool-dir", filepath.Join(dir, "spool"), "--data-dir", filepath.Join(dir, "data"))
	if code != 2 || !strings.Contains(errOut, "--name is required") {
		t.Errorf("restore without --name: exit %d, want 2 saying --name is required\n%s\n%s", code, out, errOut)
	}
}
