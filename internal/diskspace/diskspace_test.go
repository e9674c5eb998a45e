package diskspace_test

import (
	"errors"
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
