package restore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// TestRestoreInChild: a drill's restore runs in a child process of this
// binary (child.RestoreCommand, dispatched by TestMain), and a failure
// there comes back with exactly the text the same restore fails with in
// this process: etcdutl's error on a snapshot that is no database, and
// Restore's own refusal of a data directory in use.
func TestRestoreInChild(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a bbolt database\n", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	opts := func(snap, dataDir string) restore.RestoreOptions {
		return restore.RestoreOptions{
			SnapshotPath: snap, DataDir: dataDir, Name: "m", PeerURLs: []string{child.SocketPeerURL},
			InitialClusterToken: "t", SkipHashCheck: true,
		}
	}
	t.Run("refusal", func(t *testing.T) {
		_, want := restore.Restore(t.Context(), opts(garbage, full))
		if want == nil {
			t.Fatal("in-process restore into a non-empty data dir succeeded")
		}
		got := restore.RestoreInChild(t.Context(), opts(garbage, full))
		if got == nil || got.Error() != want.Error() {
			t.Errorf("child's error:\n%v\nwant the in-process text:\n%v", got, want)
		}
	})
	t.Run("etcdutl error", func(t *testing.T) {
		snap := fetchBackup(t, 10).path
		// A data dir whose parent is a file: etcdutl fails to create it.
		_, want := restore.Restore(t.Context(), opts(snap, filepath.Join(garbage, "here")))
		if want == nil {
			t.Fatal("in-process restore under a file succeeded")
		}
		got := restore.RestoreInChild(t.Context(), opts(snap, filepath.Join(garbage, "here")))
		if got == nil || got.Error() != want.Error() {
			t.Errorf("child's error:\n%v\nwant the in-process text:\n%v", got, want)
		}
	})
	t.Run("crash", func(t *testing.T) {
		// etcdutl panics on a file that is no bbolt database; in the child
		// that takes only the child down, and the panic is named.
		err := restore.RestoreInChild(t.Context(), opts(garbage, filepath.Join(dir, "crash")))
		if err == nil || !strings.Contains(err.Error(), "restore process crashed") || !strings.Contains(err.Error(), "panic") {
			t.Errorf("err = %v, want the child's crash with its panic", err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := restore.RestoreInChild(ctx, restore.RestoreOptions{
			SnapshotPath: garbage, DataDir: filepath.Join(dir, "cancelled"), Name: "m", PeerURLs: []string{child.SocketPeerURL},
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}

// TestRestoreChildSkipsSyncs: the drill's restore child is told to skip
// its syncs (the copy is deleted after the drill).
func TestRestoreChildSkipsSyncs(t *testing.T) {
	args, err := restore.RestoreChildArgs(restore.RestoreOptions{
		SnapshotPath: "s.db", DataDir: "d", Name: "m", PeerURLs: []string{child.SocketPeerURL}, InitialClusterToken: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--no-sync") {
		t.Fatalf("restore child's arguments %q lack --no-sync", args)
	}
}
