package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRestoreCommand(t *testing.T) {
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
	restoreArgs := func(extra ...string) []string {
		return append(append([]string{"restore"}, extra...), e.args...)
	}

	// A data dir whose file system cannot hold the member is refused
	// before the download, naming it and the free space (issue 31: not a
	// full disk after minutes of fetching).
	t.Run("no room for the member", func(t *testing.T) {
		dir := filepath.Join(smallTmpfs(t), "etcd")
		code, out, errOut := runCLI(t, nil, restoreArgs("latest", "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380")...)
		if code != 1 || !strings.Contains(errOut, "not enough free space") || !strings.Contains(errOut, dir) {
			t.Fatalf("restore into a full file system: exit %d\n%s\n%s", code, out, errOut)
		}
		if strings.Contains(out, "fetched") {
			t.Errorf("the backup was fetched before the refusal:\n%s", out)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the refused data dir was made: %v", err)
		}
	})

	t.Run("one member", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		code, out, errOut := runCLI(t, nil, restoreArgs("latest", "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380")...)
		if code != 0 {
			t.Fatalf("restore exit %d\n%s\n%s", code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "member", "snap", "db")); err != nil {
			t.Errorf("no restored db: %v", err)
		}
		want := "etcd --name m1 --data-dir " + dir + " --initial-advertise-peer-urls http://10.0.0.1:2380 --listen-peer-urls http://10.0.0.1:2380 --initial-cluster m1=http://10.0.0.1:2380 --initial-cluster-token lifeboat-" + m.ID + " --initial-cluster-state new"
		if !strings.Contains(out, want) {
			t.Errorf("output lacks the etcd flags %q:\n%s", want, out)
		}
		spool, _ := os.ReadDir(e.args[3])
		if len(spool) != 0 {
			t.Errorf("spool dir not emptied: %v", spool)
		}

		// Again: refused, nothing changed.
		before := storeFiles(t, dir)
		code, _, errOut = runCLI(t, nil, restoreArgs(m.ID, "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380")...)
		if code != 1 || !strings.Contains(errOut, "not empty") || !strings.Contains(errOut, "--force") {
			t.Errorf("restore into a non-empty dir: exit %d, %s", code, errOut)
		}
		if after := storeFiles(t, dir); strings.Join(after, ",") != strings.Join(before, ",") {
			t.Errorf("refused restore changed the dir: %v -> %v", before, after)
		}

		// --force keeps the old one aside.
		code, out, errOut = runCLI(t, nil, restoreArgs(m.ID, "--force", "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380")...)
		if code != 0 {
			t.Fatalf("restore --force exit %d\n%s\n%s", code, out, errOut)
		}
		asides, _ := filepath.Glob(dir + ".lifeboat-old-*")
		if len(asides) != 1 || !strings.Contains(out, "the old data dir is kept at "+asides[0]) {
			t.Fatalf("old dir aside: %v\n%s", asides, out)
		}
		if _, err := os.Stat(filepath.Join(asides[0], "member", "snap", "db")); err != nil {
			t.Errorf("old data not kept: %v", err)
		}
	})

	t.Run("whole cluster from one download", func(t *testing.T) {
		root := t.TempDir()
		cluster := "a=http://127.0.0.1:12380,b=http://127.0.0.1:22380,c=http://127.0.0.1:32380"
		code, out, errOut := runCLI(t, nil, restoreArgs("latest", "--data-dir", filepath.Join(root, "{name}"), "--initial-cluster", cluster,
			"--bump-revision", "1000000000", "--mark-compacted")...)
		if code != 0 {
			t.Fatalf("restore exit %d\n%s\n%s", code, out, errOut)
		}
		for _, n := range []string{"a", "b", "c"} {
			if _, err := os.Stat(filepath.Join(root, n, "member", "snap", "db")); err != nil {
				t.Errorf("member %s: %v", n, err)
			}
			if !strings.Contains(out, "etcd --name "+n+" --data-dir "+filepath.Join(root, n)) {
				t.Errorf("no flags for member %s:\n%s", n, out)
			}
		}
		if !strings.Contains(out, "raised by 1000000000 and marked compacted") {
			t.Errorf("output does not mention the revision bump:\n%s", out)
		}
	})

	t.Run("dry run changes nothing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		code, out, errOut := runCLI(t, nil, restoreArgs("latest", "--dry-run", "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380", "--bump-revision", "1000", "--mark-compacted")...)
		if code != 0 {
			t.Fatalf("restore --dry-run exit %d\n%s\n%s", code, out, errOut)
		}
		if !strings.Contains(out, "PASSED") || !strings.Contains(out, "would restore member m1 into "+dir) {
			t.Errorf("output:\n%s", out)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dry run created %s: %v", dir, err)
		}
		assertEmptyDir(t, e.scratch)
		if last, err := e.backups(t).LastDrills(t.Context()); err != nil || last[m.ID] != nil {
			t.Errorf("dry run stored a drill report: %v %v", last[m.ID], err)
		}
	})

	t.Run("before", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		one := []string{"--data-dir", dir, "--initial-cluster", "m1=http://10.0.0.1:2380"}
		code, _, errOut := runCLI(t, nil, restoreArgs(append([]string{"--before", "2000-01-01"}, one...)...)...)
		if code != 1 || !strings.Contains(errOut, "no backups") {
			t.Errorf("restore --before 2000: exit %d %s", code, errOut)
		}
		code, out, errOut := runCLI(t, nil, restoreArgs(append([]string{"--before", m.RevisionTime().Add(time.Second).Format(time.RFC3339)}, one...)...)...)
		if code != 0 || !strings.Contains(out, "backup "+m.ID) {
			t.Errorf("restore --before just after the backup: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("owner", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chown needs root")
		}
		dir := filepath.Join(t.TempDir(), "etcd")
		code, out, errOut := runCLI(t, nil, restoreArgs("latest", "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380", "--owner", "4242:4343")...)
		if code != 0 {
			t.Fatalf("restore --owner exit %d\n%s\n%s", code, out, errOut)
		}
		fi, err := os.Stat(filepath.Join(dir, "member", "snap", "db"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4343 {
			t.Errorf("restored db owned by %d:%d, want 4242:4343", st.Uid, st.Gid)
		}
	})

	t.Run("no silent default member", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		code, _, errOut := runCLI(t, nil, restoreArgs("latest", "--data-dir", dir)...)
		if code != 2 || !strings.Contains(errOut, "--name is required") {
			t.Errorf("restore without --name: exit %d, want 2 saying --name is required: %s", code, errOut)
		}
		code, _, errOut = runCLI(t, nil, restoreArgs("latest", "--data-dir", dir, "--name", "m1")...)
		if code != 2 || !strings.Contains(errOut, "--initial-advertise-peer-urls") {
			t.Errorf("restore without peer URLs: exit %d, want 2 naming the flags: %s", code, errOut)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refused restore created %s: %v", dir, err)
		}
	})

	t.Run("usage", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		for _, args := range [][]string{
			{"latest", "--data-dir", dir, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380", "--owner", "no-such-user-lifeboat"},
			{"--data-dir", dir},
			{"latest"},
			{"latest", "--data-dir", dir, "--mark-compacted"},
			{m.ID, "--before", "1h", "--data-dir", dir},
			{"latest", "--before", "sometime", "--data-dir", dir},
			{"latest", "--data-dir", dir, "--initial-cluster", "a=http://h:1,b=http://h:2"},
			{"not-an-id", "--data-dir", dir},
		} {
			if code, _, errOut := runCLI(t, nil, restoreArgs(args...)...); code != 2 {
				t.Errorf("restore %v: exit %d, want 2: %s", args, code, errOut)
			}
		}
	})
}

func TestParseBefore(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2026-11-30T11:00:00Z", time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)},
		{"2026-11-30T11:00:00+01:00", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},
		{"2026-11-30 11:30", time.Date(2026, 11, 30, 11, 30, 0, 0, time.UTC)},
		{"2026-11-29", time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)},
		{"90m", now.Add(-90 * time.Minute)},
		{"3d", now.Add(-72 * time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseBefore(tt.in, now)
			if err != nil || !got.Equal(tt.want) {
				t.Errorf("parseBefore(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "yesterday", "-1h", "3x", "2026-13-01"} {
		if _, err := parseBefore(bad, now); err == nil {
			t.Errorf("parseBefore(%q) accepted", bad)
		}
	}
}
