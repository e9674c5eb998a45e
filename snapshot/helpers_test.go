package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// configFor returns a snapshot configuration with all of c's connection
// material. The dial timeout is short so that tests with dead endpoints do
// not wait long.
func configFor(c *etcdtest.Cluster) snapshot.Config {
	return snapshot.Config{
		Endpoints:   c.Endpoints(),
		CACert:      c.CAFile,
		Cert:        c.CertFile,
		Key:         c.KeyFile,
		User:        c.User,
		Password:    snapshot.Secret(c.Password),
		DialTimeout: 3 * time.Second,
	}
}

// checkSpool checks that the spool file holds a complete snapshot matching
// info: size, trailer and sha256, mode 0600.
func checkSpool(t *testing.T, path string, size int64, sha string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read spool file: %v", err)
	}
	if int64(len(data)) != size {
		t.Errorf("spool file has %d bytes, info says %d", len(data), size)
	}
	if len(data) < sha256.Size || len(data)%512 != sha256.Size {
		t.Fatalf("spool file size %d is not a database plus trailer", len(data))
	}
	sum := sha256.Sum256(data[:len(data)-sha256.Size])
	if got, want := hex.EncodeToString(sum[:]), hex.EncodeToString(data[len(data)-sha256.Size:]); got != want {
		t.Errorf("spool file sha256 %s does not match its trailer %s", got, want)
	}
	if got := hex.EncodeToString(sum[:]); got != sha {
		t.Errorf("spool file sha256 %s, info says %s", got, sha)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("spool file mode %v, want 0600", got)
	}
	return data
}

// checkNoSpool fails if the spool file (or anything else) was left in its
// directory.
func checkNoSpool(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spool file %s left behind (stat error %v)", path, err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("unexpected file %s left in the spool dir", e.Name())
	}
}

// checkErr fails unless err's text contains every want and none of the
// secrets.
func checkErr(t *testing.T, err error, wants []string, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("error = nil, want one containing %q", wants)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error reveals a secret: %q", err)
		}
	}
}

func testLogger() (*slog.Logger, *syncbuf.Buffer) {
	var buf syncbuf.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

// fill writes n values of size bytes so the database grows.
func fill(t testing.TB, c *etcdtest.Cluster, n, size int) {
	t.Helper()
	cli := c.Client(t)
	val := strings.Repeat("v", size)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("/fill/%06d", i), val); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
}

// mountTmpfs mounts a fresh tmpfs with the given options (e.g. "size=1m",
// "ro") on a temp dir and unmounts it at cleanup. Without the privilege to
// mount it skips, except under CI=true where it fails.
func mountTmpfs(t *testing.T, flags uintptr, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, opts); err != nil {
		msg := fmt.Sprintf("mount tmpfs (%s) on %s: %v", opts, dir, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; run as root or set CI=true to make this fail")
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// dial opens a session with cfg, closed at test cleanup.
func dial(t testing.TB, cfg snapshot.Config, lg *slog.Logger) *snapshot.Session {
	t.Helper()
	s, err := snapshot.Dial(t.Context(), cfg, lg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// take is one job of its own: a session for cfg, one Take, Close.
func take(ctx context.Context, cfg snapshot.Config, spool string, tee io.Writer, opts snapshot.Options, lg *slog.Logger) (snapshot.Info, error) {
	s, err := snapshot.Dial(ctx, cfg, lg)
	if err != nil {
		return snapshot.Info{}, err
	}
	defer s.Close()
	return s.Take(ctx, spool, tee, opts)
}

// members is a session for cfg, one Members call, Close.
func members(ctx context.Context, cfg snapshot.Config) ([]snapshot.MemberStatus, error) {
	s, err := snapshot.Dial(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Members(ctx)
}

// liveHashKV is a session for cfg, one HashKV of endpoint, Close.
func liveHashKV(ctx context.Context, cfg snapshot.Config, endpoint string, rev int64) (uint32, int64, error) {
	s, err := snapshot.Dial(ctx, cfg, nil)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	return s.HashKV(ctx, endpoint, rev)
}
