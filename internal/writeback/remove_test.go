package writeback

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// recordTruncates replaces truncate for the test and returns the sizes
// it was called with.
func recordTruncates(t *testing.T) *[]int64 {
	t.Helper()
	var sizes []int64
	orig := truncate
	truncate = func(f *os.File, size int64) error {
		sizes = append(sizes, size)
		return orig(f, size)
	}
	t.Cleanup(func() { truncate = orig })
	return &sizes
}

// sparse creates a sparse file of size bytes (no blocks: the test writes
// nothing) with one byte at its start.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte{'x'}); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// TestShrinkSteps: a large file is freed ShrinkStep bytes at a time, from
// its end, down to zero; a small one in one truncate.
func TestShrinkSteps(t *testing.T) {
	for _, tt := range []struct {
		name string
		size int64
		want []int64
	}{
		{"three steps and a rest", 3*ShrinkStep + 5, []int64{2*ShrinkStep + 5, ShrinkStep + 5, 5, 0}},
		{"exactly two steps", 2 * ShrinkStep, []int64{ShrinkStep, 0}},
		{"one step", ShrinkStep, []int64{0}},
		{"small", 4096, []int64{0}},
		{"empty", 0, []int64{0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sizes := recordTruncates(t)
			path := filepath.Join(t.TempDir(), "f")
			sparse(t, path, tt.size)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := Shrink(f); err != nil {
				t.Fatal(err)
			}
			if fi, err := f.Stat(); err != nil || fi.Size() != 0 {
				t.Fatalf("after Shrink: %v, %v; want size 0", fi, err)
			}
			if len(*sizes) != len(tt.want) {
				t.Fatalf("truncates %v, want %v", *sizes, tt.want)
			}
			for i := range tt.want {
				if (*sizes)[i] != tt.want[i] {
					t.Fatalf("truncates %v, want %v", *sizes, tt.want)
				}
			}
		})
	}
}

// TestShrinkUnnamed: the backup's spool has no name (O_TMPFILE or
// unlinked): Shrink works on the open file alone.
func TestShrinkUnnamed(t *testing.T) {
	sizes := recordTruncates(t)
	path := filepath.Join(t.TempDir(), "f")
	sparse(t, path, 2*ShrinkStep+1)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Shrink(f); err != nil {
		t.Fatal(err)
	}
	if len(*sizes) != 3 {
		t.Fatalf("truncates %v, want 3 steps", *sizes)
	}
}

// TestRemoveAll: large files of one link are shrunk in steps and
// everything is removed; a hard link and a symbolic link to files outside
// the directory leave those files whole.
func TestRemoveAll(t *testing.T) {
	sizes := recordTruncates(t)
	outside := t.TempDir()
	linked := filepath.Join(outside, "linked")
	sparse(t, linked, 2*ShrinkStep+7)
	pointed := filepath.Join(outside, "pointed")
	sparse(t, pointed, 2*ShrinkStep+9)

	dir := filepath.Join(t.TempDir(), "scratch")
	if err := os.MkdirAll(filepath.Join(dir, "etcd", "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	sparse(t, filepath.Join(dir, "etcd", "member", "snap", "db"), 2*ShrinkStep+3)
	if err := os.WriteFile(filepath.Join(dir, "small"), []byte("small"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(linked, filepath.Join(dir, "hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pointed, filepath.Join(dir, "symlink")); err != nil {
		t.Fatal(err)
	}

	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("dir still there: %v", err)
	}
	// Only the db was shrunk: two steps and the last truncate.
	if want := []int64{ShrinkStep + 3, 3, 0}; len(*sizes) != len(want) || (*sizes)[0] != want[0] || (*sizes)[2] != 0 {
		t.Fatalf("truncates %v, want %v", *sizes, want)
	}
	for _, p := range []string{linked, pointed} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		f, _ := os.Open(p)
		f.Read(b)
		f.Close()
		if fi.Size() < 2*ShrinkStep || !bytes.Equal(b, []byte{'x'}) {
			t.Fatalf("%s changed: size %d, first byte %q", p, fi.Size(), b)
		}
	}
}

// TestRemoveGone: removing what is not there is not an error (the caller
// cleans up on every path).
func TestRemoveGone(t *testing.T) {
	if err := Remove(filepath.Join(t.TempDir(), "nothing")); err != nil {
		t.Fatal(err)
	}
}
