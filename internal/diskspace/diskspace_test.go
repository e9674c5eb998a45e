package diskspace_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-dev/lifeboat/internal/diskspace"
)

func free(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// TestCheck: needs are summed per file system, a directory not made yet
// counts on its parent's, and the refusal names the directories, what
// they are for and the free space.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	f := free(t, dir)
	half := f/2 + f/8 // each fits, both do not
	a, b := filepath.Join(dir, "a", "not", "yet"), filepath.Join(dir, "b")
	if err := diskspace.Check([]diskspace.Need{{Dir: a, Bytes: half, What: "the spool"}}); err != nil {
		t.Fatalf("one need that fits: %v", err)
	}
	err := diskspace.Check([]diskspace.Need{{Dir: a, Bytes: half, What: "the spool"}, {Dir: b, Bytes: half, What: "member m1"}})
	if !errors.Is(err, diskspace.ErrNoSpace) {
		t.Fatalf("two needs over the free space together: %v, want ErrNoSpace", err)
	}
	for _, want := range []string{a, b, "the spool", "member m1", "free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	if err := diskspace.Check([]diskspace.Need{{Dir: a, Bytes: 0}, {Dir: b, Bytes: 1 << 20, What: "x"}}); err != nil {
		t.Errorf("small needs: %v", err)
	}
}

// TestSameFileSystem: two directories of one file system (one not made
// yet) are; a tmpfs mounted beside them is not.
func TestSameFileSystem(t *testing.T) {
	dir := t.TempDir()
	if !diskspace.SameFileSystem(filepath.Join(dir, "spool"), filepath.Join(dir, "data", "m0")) {
		t.Error("two directories of one file system are not on one file system")
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Skipf("mount tmpfs: %v; run as root or set CI=true to make this fail", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, 0) })
	if diskspace.SameFileSystem(dir, filepath.Join(mnt, "m0")) {
		t.Error("a tmpfs and the disk are on one file system")
	}
}
