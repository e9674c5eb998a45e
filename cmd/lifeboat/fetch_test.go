package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// etcdutlBinary returns .bin/etcdutl (ETCDUTL_BIN), "" when there is none.
func etcdutlBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("ETCDUTL_BIN"); b != "" {
		return b
	}
	if b, err := filepath.Abs("../../.bin/etcdutl"); err == nil {
		if _, err := os.Stat(b); err == nil {
			return b
		}
	}
	return ""
}

// TestFetchCommand (item 20): fetch writes a plain, checked etcd snapshot
// that etcdutl restores; it never overwrites without --force, leaves
// nothing behind on failure, and streams to stdout with FILE -. It also
// covers latest-proven (item 19) from the command line.
func TestFetchCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	key := writeFile(t, "key.txt", id.String()+"\n")
	e.args = append(e.args, "--recipient", id.Recipient().String(), "--identity-file", key)
	e.snapshot(t)
	l, err := e.backups(t).List(t.Context())
	if err != nil || len(l.Backups) != 1 {
		t.Fatalf("backups: %v %v", l, err)
	}
	m := l.Backups[0].Manifest
	args := func(extra ...string) []string { return append(append([]string{"fetch"}, extra...), e.args...) }
	outDir := t.TempDir()
	file := filepath.Join(outDir, "snap.db")

	t.Run("latest-proven before any drill", func(t *testing.T) {
		code, _, errOut := runCLI(t, nil, args("latest-proven", file)...)
		if code != 1 || !strings.Contains(errOut, "no proven backup") || !strings.Contains(errOut, "lifeboat drill") {
			t.Errorf("fetch latest-proven without drills: exit %d, %s", code, errOut)
		}
		if _, err := os.Stat(file); err == nil {
			t.Errorf("%s written", file)
		}
	})

	t.Run("to a file", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, args("latest", file)...)
		if code != 0 {
			t.Fatalf("fetch exit %d\n%s\n%s", code, out, errOut)
		}
		fi, err := os.Stat(file)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("fetched file %v %v, want mode 0600", fi, err)
		}
		digest, err := verify.Trailer(t.Context(), file)
		if err != nil || digest != m.SnapshotSHA256 {
			t.Errorf("trailer %s %v, manifest %s", digest, err, m.SnapshotSHA256)
		}
		if !strings.Contains(out, "etcdutl snapshot restore") {
			t.Errorf("output does not say how to restore:\n%s", out)
		}
		if bin := etcdutlBinary(t); bin != "" {
			data := filepath.Join(t.TempDir(), "data")
			cmd := exec.Command(bin, "snapshot", "restore", file, "--data-dir", data)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("etcdutl snapshot restore of the fetched file: %v\n%s", err, b)
			}
		} else if os.Getenv("CI") == "true" {
			t.Error("no etcdutl: run make tools (builds .bin/etcdutl) or set ETCDUTL_BIN")
		}
	})

	t.Run("never overwrites without --force", func(t *testing.T) {
		if err := os.WriteFile(file, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(t, nil, args(m.ID, file)...)
		if code != 1 || !strings.Contains(errOut, "exists") || !strings.Contains(errOut, "--force") {
			t.Errorf("fetch onto an existing file: exit %d, %s", code, errOut)
		}
		if b, _ := os.ReadFile(file); string(b) != "precious" {
			t.Errorf("existing file changed")
		}
		if code, out, errOut := runCLI(t, nil, args(m.ID, file, "--force")...); code != 0 {
			t.Fatalf("fetch --force exit %d\n%s\n%s", code, out, errOut)
		}
		if d, err := verify.Trailer(t.Context(), file); err != nil || d != m.SnapshotSHA256 {
			t.Errorf("after --force: %s %v", d, err)
		}
		assertOnly(t, outDir, "snap.db")
	})

	t.Run("to stdout", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, args("latest", "-")...)
		if code != 0 {
			t.Fatalf("fetch -o - exit %d\n%s", code, errOut)
		}
		want, _ := os.ReadFile(file)
		if !bytes.Equal([]byte(out), want) {
			t.Errorf("stdout: %d bytes, the file has %d", len(out), len(want))
		}
	})

	t.Run("latest-proven after a drill", func(t *testing.T) {
		if code, out, errOut := runCLI(t, nil, append([]string{"drill", "latest"}, e.args...)...); code != 0 {
			t.Fatalf("drill exit %d\n%s\n%s", code, out, errOut)
		}
		f2 := filepath.Join(t.TempDir(), "proven.db")
		code, out, errOut := runCLI(t, nil, args("latest-proven", f2)...)
		if code != 0 || !strings.Contains(out, m.ID) {
			t.Fatalf("fetch latest-proven exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("the leftover of a killed fetch is swept", func(t *testing.T) {
		dir := t.TempDir()
		// A process that is gone: the pid of a finished child.
		child := exec.Command("true")
		if err := child.Run(); err != nil {
			t.Fatal(err)
		}
		dead := filepath.Join(dir, ".snap.db.lifeboat-tmp-"+strconv.Itoa(child.Process.Pid))
		alive := filepath.Join(dir, ".snap.db.lifeboat-tmp-1") // init: a live process
		for _, p := range []string{dead, alive} {
			if err := os.WriteFile(p, []byte("half a snapshot"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if code, out, errOut := runCLI(t, nil, args("latest", filepath.Join(dir, "snap.db"))...); code != 0 {
			t.Fatalf("fetch exit %d\n%s\n%s", code, out, errOut)
		}
		assertOnly(t, dir, filepath.Base(alive), "snap.db")
	})

	t.Run("a damaged object leaves nothing", func(t *testing.T) {
		obj := filepath.Join(e.store, m.Object)
		b, err := os.ReadFile(obj)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(obj, b, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		code, _, errOut := runCLI(t, nil, args("latest", filepath.Join(dir, "snap.db"))...)
		if code != 1 || !strings.Contains(errOut, "does not match its manifest") {
			t.Errorf("fetch of a damaged object: exit %d, %s", code, errOut)
		}
		assertOnly(t, dir)
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) == m.ObjectSHA256 {
			t.Fatal("object not damaged")
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, a := range [][]string{{"latest"}, {file}, {"not-an-id", file}} {
			if code, _, errOut := runCLI(t, nil, args(a...)...); code != 2 {
				t.Errorf("fetch %v: exit %d, want 2: %s", a, code, errOut)
			}
		}
	})
}

// assertOnly fails unless dir holds exactly the named entries.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

// TestFetchOutputConventions (issue 29 §3): -o is the output format, as in
// every command (table or json); the file is the second argument or
// --output-file. The old -o FILE still works for one release, with a
// warning: a value of -o that is not a format name is a file.
func TestFetchOutputConventions(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	l, err := e.backups(t).List(t.Context())
	if err != nil || len(l.Backups) != 1 {
		t.Fatalf("backups: %v %v", l, err)
	}
	m := l.Backups[0].Manifest
	args := func(extra ...string) []string { return append(append([]string{"fetch"}, extra...), e.args...) }
	dir := t.TempDir()
	written := func(t *testing.T, file string) {
		t.Helper()
		if d, err := verify.Trailer(t.Context(), file); err != nil || d != m.SnapshotSHA256 {
			t.Errorf("%s: trailer %s %v, manifest %s", file, d, err, m.SnapshotSHA256)
		}
	}
	const deprecated = "-o FILE is deprecated"

	t.Run("positional file", func(t *testing.T) {
		f := filepath.Join(dir, "pos.db")
		code, out, errOut := runCLI(t, nil, args("latest", f)...)
		if code != 0 || strings.Contains(errOut, deprecated) {
			t.Fatalf("fetch latest FILE: exit %d\n%s\n%s", code, out, errOut)
		}
		written(t, f)
		if !strings.Contains(out, "written to "+f) {
			t.Errorf("table output does not name the file:\n%s", out)
		}
	})
	t.Run("--output-file", func(t *testing.T) {
		f := filepath.Join(dir, "flag.db")
		code, out, errOut := runCLI(t, nil, args("latest", "--output-file", f)...)
		if code != 0 || strings.Contains(errOut, deprecated) {
			t.Fatalf("fetch --output-file: exit %d\n%s\n%s", code, out, errOut)
		}
		written(t, f)
	})
	t.Run("-o json", func(t *testing.T) {
		f := filepath.Join(dir, "json.db")
		code, out, errOut := runCLI(t, nil, args("latest", f, "-o", "json")...)
		if code != 0 {
			t.Fatalf("fetch -o json: exit %d\n%s\n%s", code, out, errOut)
		}
		written(t, f)
		var got struct {
			BackupID       string `json:"backup_id"`
			Revision       int64  `json:"revision"`
			File           string `json:"file"`
			Bytes          int64  `json:"bytes"`
			SnapshotSHA256 string `json:"snapshot_sha256"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("-o json output is not JSON: %v\n%s", err, out)
		}
		if got.BackupID != m.ID || got.File != f || got.Revision != m.Revision || got.SnapshotSHA256 != m.SnapshotSHA256 || got.Bytes <= 0 {
			t.Errorf("-o json: %+v, backup %s revision %d", got, m.ID, m.Revision)
		}
	})
	t.Run("the old -o FILE, with a warning", func(t *testing.T) {
		f := filepath.Join(dir, "old.db")
		code, out, errOut := runCLI(t, nil, args("latest", "-o", f)...)
		if code != 0 || !strings.Contains(errOut, deprecated) || !strings.Contains(errOut, "--output-file") {
			t.Fatalf("fetch -o FILE: exit %d, want 0 with a warning\n%s\n%s", code, out, errOut)
		}
		written(t, f)
	})
	t.Run("the old -o - (stdout), with a warning", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, args("latest", "-o", "-")...)
		if code != 0 || !strings.Contains(errOut, deprecated) {
			t.Fatalf("fetch -o -: exit %d\n%s", code, errOut)
		}
		if want, _ := os.ReadFile(filepath.Join(dir, "pos.db")); !bytes.Equal([]byte(out), want) {
			t.Errorf("stdout: %d bytes, the file has %d", len(out), len(want))
		}
	})
	t.Run("- for stdout", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, args("latest", "-")...)
		if code != 0 || strings.Contains(errOut, deprecated) {
			t.Fatalf("fetch latest -: exit %d\n%s", code, errOut)
		}
		if want, _ := os.ReadFile(filepath.Join(dir, "pos.db")); !bytes.Equal([]byte(out), want) {
			t.Errorf("stdout: %d bytes, the file has %d", len(out), len(want))
		}
	})
	t.Run("usage errors", func(t *testing.T) {
		f := filepath.Join(dir, "usage.db")
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"latest", "-o", "json"}, "give the file"},
			{[]string{"latest", f, "--output-file", f + "2"}, "either"},
			{[]string{"latest", f, "-o", f + "2"}, "either"},
			{[]string{"latest", "-", "-o", "json"}, "stdout"},
		} {
			code, _, errOut := runCLI(t, nil, args(tt.args...)...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("fetch %v: exit %d, want 2 and %q: %s", tt.args, code, tt.want, errOut)
			}
		}
		assertOnly(t, dir, "flag.db", "json.db", "old.db", "pos.db")
	})
}
