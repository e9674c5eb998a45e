package kit_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/kit"
)

func TestRestore(t *testing.T) {
	src := t.TempDir()
	tr := kittest.Kubeadm(t, src, now, now.Add(time.Hour))
	k, err := kit.Collect(src, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "new-host")

	// A dry run writes nothing, not even the target directory.
	res, err := kit.Restore(to, k, kit.RestoreOptions{DryRun: true, Now: now})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if len(res.Planned) != len(k.Entries) || res.Planned[0].Action != kit.ActionCreate {
		t.Errorf("dry run planned %d entries (first %+v), want %d creates", len(res.Planned), res.Planned[0].Action, len(k.Entries))
	}
	if _, err := os.Stat(to); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a dry run created %s: %v", to, err)
	}

	if _, err := kit.Restore(to, k, kit.RestoreOptions{Now: now}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for _, p := range tr.Files {
		want, _ := os.ReadFile(filepath.Join(src, p))
		got, err := os.ReadFile(filepath.Join(to, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want the original's %d", p, len(got), err, len(want))
		}
		wfi, _ := os.Stat(filepath.Join(src, p))
		gfi, _ := os.Stat(filepath.Join(to, p))
		if gfi != nil && gfi.Mode() != wfi.Mode() {
			t.Errorf("%s: mode %v, the original's %v", p, gfi.Mode(), wfi.Mode())
		}
	}
	// Directories the kit does not hold are made 0700.
	if fi, err := os.Stat(filepath.Join(to, "etc/kubernetes/enc")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("etc/kubernetes/enc: %v, %v; want 0700", fi.Mode(), err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(to, "etc/kubernetes/pki/.*")); len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// Again: refused, nothing changed.
	ca := filepath.Join(to, "etc/kubernetes/pki/ca.crt")
	if err := os.WriteFile(ca, []byte("local"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = kit.Restore(to, k, kit.RestoreOptions{Now: now})
	if !errors.Is(err, kit.ErrExists) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("second Restore: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(ca); string(b) != "local" {
		t.Errorf("a refused restore changed ca.crt")
	}
	refused := 0
	for _, p := range res.Planned {
		if p.Action == kit.ActionRefuse {
			refused++
		}
	}
	if refused != len(tr.Files) {
		t.Errorf("refused %d entries, want every file (%d)", refused, len(tr.Files))
	}

	// --force moves each aside, then writes.
	res, err = kit.Restore(to, k, kit.RestoreOptions{Force: true, Now: now})
	if err != nil {
		t.Fatalf("forced Restore: %v", err)
	}
	aside := ca + ".lifeboat-old-20261201T120000Z"
	if b, err := os.ReadFile(aside); err != nil || string(b) != "local" {
		t.Errorf("moved aside: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(ca); string(b) == "local" {
		t.Errorf("ca.crt not restored")
	}
	for _, p := range res.Planned {
		if p.Path == "/etc/kubernetes/pki/ca.crt" && (p.Action != kit.ActionReplace || p.Aside != aside) {
			t.Errorf("ca.crt planned as %+v", p)
		}
	}
}

// archive builds a tar stream of headers (with data for regular files),
// as an attacker could.
func archive(t testing.TB, hs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func reg(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600} }

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		hs   []*tar.Header
		want string
	}{
		{"dot dot", []*tar.Header{reg("etc/../../x")}, "not clean"},
		{"dot dot first", []*tar.Header{reg("../x")}, "not clean"},
		{"absolute name", []*tar.Header{reg("/etc/x")}, "not clean"},
		{"absolute symlink", []*tar.Header{{Name: "etc/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}}, "not a relative path"},
		{"escaping symlink", []*tar.Header{{Name: "etc/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}}, "leaves the kit"},
		{"under a symlink", []*tar.Header{{Name: "etc/l", Typeflag: tar.TypeSymlink, Linkname: "d"}, reg("etc/l/x")}, "under the symlink"},
		{"device", []*tar.Header{{Name: "dev/sda", Typeflag: tar.TypeBlock}}, "not a file, directory or symlink"},
		{"hard link", []*tar.Header{{Name: "etc/h", Typeflag: tar.TypeLink, Linkname: "etc/shadow"}}, "not a file, directory or symlink"},
		{"duplicate", []*tar.Header{reg("etc/x"), reg("etc/x")}, "duplicated"},
		{"unsorted", []*tar.Header{reg("etc/y"), reg("etc/x")}, "not in path order"},
		{"root", []*tar.Header{{Name: "./", Typeflag: tar.TypeDir}}, "not clean"},
		{"big", []*tar.Header{{Name: "etc/x", Typeflag: tar.TypeReg, Size: kit.MaxFileBytes + 1}}, "size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kit.Parse(archive(t, tc.hs...))
			if !errors.Is(err, kit.ErrBadKit) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want ErrBadKit saying %q", err, tc.want)
			}
		})
	}
	if _, err := kit.Parse([]byte("not a tar archive at all, but long enough to have a header block")); !errors.Is(err, kit.ErrBadKit) {
		t.Errorf("Parse of junk: %v", err)
	}
}

// FuzzParse: Parse never panics; what it accepts archives back to the
// same bytes' kit, and restores only below the target directory.
func FuzzParse(f *testing.F) {
	src := f.TempDir()
	kittest.K3s(f, src, now)
	k, err := kit.Collect(src, []string{"k3s"})
	if err != nil {
		f.Fatal(err)
	}
	a, _ := k.Archive()
	f.Add(a)
	f.Add(archive(f, &tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "etc/l", Typeflag: tar.TypeSymlink, Linkname: "../etc/x"}, reg("etc/x")))
	f.Add(archive(f, &tar.Header{Name: "etc/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}))
	f.Add(archive(f, reg("a/../../b")))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := kit.Parse(b)
		if err != nil {
			if !errors.Is(err, kit.ErrBadKit) {
				t.Fatalf("Parse error %v does not wrap ErrBadKit", err)
			}
			return
		}
		again, err := k.Archive()
		if err != nil {
			t.Fatalf("Archive of a parsed kit: %v", err)
		}
		k2, err := kit.Parse(again)
		if err != nil {
			t.Fatalf("Parse of Archive: %v", err)
		}
		if diff := cmp.Diff(k2, k); diff != "" {
			t.Fatalf("round trip (-got +want):\n%s", diff)
		}
		parent := t.TempDir()
		to := filepath.Join(parent, "to")
		if _, err := kit.Restore(to, k, kit.RestoreOptions{Now: now}); err != nil {
			return // refused (e.g. a path through a symlink): fine, as long as nothing escaped
		}
		entries, _ := os.ReadDir(parent)
		if len(entries) != 1 {
			t.Fatalf("Restore wrote beside its directory: %v", entries)
		}
	})
}

// TestRestoreInPlaceThroughAbsoluteSymlink: `kit restore --to /` on a
// host where a directory on the way is an absolute symlink (k3s with
// /var/lib/rancher -> /data/rancher, /var/run -> /run) writes through it:
// nothing can be outside "/". Before, every write through an os.Root of
// "/" failed with "path escapes from parent". Below any other directory
// such a symlink is still refused.
func TestRestoreInPlaceThroughAbsoluteSymlink(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "data/rancher"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "data/rancher"), filepath.Join(base, "rancher")); err != nil {
		t.Fatal(err)
	}
	token := filepath.ToSlash(filepath.Join(base, "rancher/k3s/server/token"))
	k := &kit.Kit{Entries: []kit.Entry{{Path: token, Type: kit.TypeFile, Mode: 0o600, Data: []byte("K10"), Size: 3}}}
	if _, err := kit.Restore("/", k, kit.RestoreOptions{Now: now}); err != nil {
		t.Fatalf("Restore to /: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(base, "data/rancher/k3s/server/token")); err != nil || string(b) != "K10" {
		t.Errorf("token through the symlink: %q, %v", b, err)
	}

	// Below another directory the same link points outside it: refused.
	to := t.TempDir()
	if err := os.MkdirAll(filepath.Join(to, base), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "data/rancher"), filepath.Join(to, base, "rancher")); err != nil {
		t.Fatal(err)
	}
	k.Entries[0].Path = token + "2"
	if _, err := kit.Restore(to, k, kit.RestoreOptions{Now: now}); err == nil {
		t.Errorf("Restore below %s wrote through an absolute symlink out of it", to)
	}
	if _, err := os.Stat(filepath.Join(base, "data/rancher/k3s/server/token2")); err == nil {
		t.Errorf("a file was written outside %s", to)
	}
}

// TestRestoreFileInParentsPlace: a file (or a symlink to one) where a
// directory on the way to a kit entry should be is found before anything
// is written (issue 28, section 4, defect 3). Before, it was planned as
// create, the dry run showed that false plan, and the restore wrote the
// entries before it and then failed at "mkdirat ... file exists", with
// --force too. Now: refused naming the path, nothing written; with Force
// it is moved aside like any file in the way, and the plan shows it.
func TestRestoreFileInParentsPlace(t *testing.T) {
	k := &kit.Kit{Entries: []kit.Entry{
		{Path: "/etc/a/first", Type: kit.TypeFile, Mode: 0o600, Data: []byte("1"), Size: 1},
		{Path: "/etc/kubernetes/pki/ca.crt", Type: kit.TypeFile, Mode: 0o644, Data: []byte("ca"), Size: 2},
		{Path: "/etc/kubernetes/pki/ca.key", Type: kit.TypeFile, Mode: 0o600, Data: []byte("key"), Size: 3},
	}}
	file := func(t *testing.T, to string) { writeFile(t, filepath.Join(to, "etc/kubernetes")) }
	for _, tc := range []struct {
		name string
		// inTheWay makes what is at etc/kubernetes below to.
		inTheWay func(t *testing.T, to string)
		force    bool
		dryRun   bool
	}{
		{"file", file, false, false},
		{"file, dry run", file, false, true},
		{"file, force", file, true, false},
		{"file, force, dry run", file, true, true},
		{"symlink to a file", func(t *testing.T, to string) {
			writeFile(t, filepath.Join(to, "elsewhere"))
			if err := os.Symlink("../elsewhere", filepath.Join(to, "etc/kubernetes")); err != nil {
				t.Fatal(err)
			}
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := t.TempDir()
			if err := os.MkdirAll(filepath.Join(to, "etc"), 0o700); err != nil {
				t.Fatal(err)
			}
			tc.inTheWay(t, to)
			parent := filepath.Join(to, "etc/kubernetes")
			res, err := kit.Restore(to, k, kit.RestoreOptions{Force: tc.force, DryRun: tc.dryRun, Now: now})
			var planned *kit.Planned
			if res != nil {
				for i, p := range res.Planned {
					if p.Target == parent {
						planned = &res.Planned[i]
					}
				}
			}
			wantAction := kit.ActionRefuse
			if tc.force {
				wantAction = kit.ActionReplace
			}
			if planned == nil || planned.Action != wantAction {
				t.Errorf("plan for %s: %+v, want %s", parent, planned, wantAction)
			}
			if !tc.force {
				if !errors.Is(err, kit.ErrExists) || !strings.Contains(err.Error(), parent) || !strings.Contains(err.Error(), "nothing was written") {
					t.Errorf("Restore: %v, want ErrExists naming %s", err, parent)
				}
			} else if err != nil {
				t.Errorf("forced Restore: %v", err)
			}
			_, statErr := os.Stat(filepath.Join(to, "etc/a/first"))
			if written := statErr == nil; written != (tc.force && !tc.dryRun) {
				t.Errorf("etc/a/first written: %v, want %v", written, tc.force && !tc.dryRun)
			}
			if !tc.force || tc.dryRun {
				if fi, err := os.Lstat(parent); err != nil || fi.IsDir() {
					t.Errorf("what was in the way changed: %v, %v", fi, err)
				}
				return
			}
			if b, err := os.ReadFile(filepath.Join(to, "etc/kubernetes/pki/ca.key")); err != nil || string(b) != "key" {
				t.Errorf("ca.key: %q, %v", b, err)
			}
			aside := parent + ".lifeboat-old-20261201T120000Z"
			if b, err := os.ReadFile(aside); err != nil || string(b) != "in the way" {
				t.Errorf("moved aside: %q, %v", b, err)
			}
			if planned != nil && planned.Aside != aside {
				t.Errorf("planned aside %q, want %q", planned.Aside, aside)
			}
		})
	}
}

func writeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
}
