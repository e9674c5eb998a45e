package drill_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/corrupt"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

// TestDrillEtcdCrash drills a backup whose MVCC content makes etcd panic
// at boot. The drill's etcd runs in a child process: the drill fails with
// a verdict naming the crash and the end of etcd's output, and this test
// process (the caller, like the agent) survives it.
func TestDrillEtcdCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	src := restoretest.StartSource(t, 200)
	tests := []struct {
		name   string
		binary bool
	}{
		{name: "lifeboat's own etcd"},
		{name: "etcd binary", binary: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bin string
			if tt.binary {
				bin = etcdtest.Current.Need(t)
			}
			root := t.TempDir()
			b := restoretest.DirRepo(t, root)
			m := src.Backup(t, b, repository.Encoding{Compression: "none"})
			m = corrupt.Backup(t, b, root, m, corrupt.TombstoneAtPutRevision)
			scratch := t.TempDir()
			rep, err := drill.Run(t.Context(), drill.Options{Backups: b, Manifest: m, ScratchDir: scratch, EtcdBinary: bin, Version: "test"})
			restoretest.AssertEmpty(t, scratch)
			if !errors.Is(err, drill.ErrFailed) || !drill.Verdict(err) {
				t.Fatalf("Drill error %v, want a failed verdict (ErrFailed)\nreport %+v", err, rep)
			}
			if rep == nil || rep.Passed {
				t.Fatalf("report %+v", rep)
			}
			failed := rep.FailedChecks()
			if len(failed) == 0 || failed[0].Name != "etcd boot" {
				t.Fatalf("failed checks %+v, want first \"etcd boot\"", failed)
			}
			for _, want := range []string{"etcd exited", "unexpected smaller revision"} {
				if !strings.Contains(failed[0].Actual, want) {
					t.Errorf("etcd boot check does not name the crash (%q):\n%s", want, failed[0].Actual)
				}
			}
			if !strings.Contains(err.Error(), "unexpected smaller revision") {
				t.Errorf("error does not name the crash: %v", err)
			}
			// The verdict is stored, and list reads the backup as failed.
			if err := b.PutDrillReport(t.Context(), rep); err != nil {
				t.Fatal(err)
			}
			last, err := b.LastDrills(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got := last[m.ID]; got == nil || got.Passed {
				t.Errorf("LastDrills()[%s] = %+v, want a failed drill", m.ID, got)
			}
		})
	}
}

// TestDrillEtcdPrivate checks, while the drill's etcd serves the restored
// data, that it listens on no TCP port (none of its file descriptors is a
// listening TCP socket of /proc/net/tcp or tcp6) and that its unix sockets
// sit in a directory only lifeboat's user can enter.
func TestDrillEtcdPrivate(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc")
	}
	src := restoretest.StartSource(t, 100)
	b := restoretest.DirRepo(t, t.TempDir())
	m := src.Backup(t, b, repository.Encoding{Compression: "zstd"})
	for _, binary := range []bool{false, true} {
		name := "lifeboat's own etcd"
		if binary {
			name = "etcd binary"
		}
		t.Run(name, func(t *testing.T) {
			var bin string
			if binary {
				bin = etcdtest.Current.Need(t)
			}
			var inspected bool
			rep, err := drill.Run(t.Context(), drill.Options{
				Backups: b, Manifest: m, ScratchDir: t.TempDir(), EtcdBinary: bin,
				OnBoot: func(srv *child.Etcd) {
					inspected = true
					if !strings.HasPrefix(srv.ClientURL, "unix://") || !strings.HasPrefix(srv.PeerURL, "unix://") {
						t.Errorf("client URL %s, peer URL %s: want unix sockets", srv.ClientURL, srv.PeerURL)
					}
					fi, err := os.Stat(srv.SocketDir)
					if err != nil {
						t.Fatal(err)
					}
					if perm := fi.Mode().Perm(); perm != 0o700 {
						t.Errorf("socket directory %s has mode %o, want 700", srv.SocketDir, perm)
					}
					inodes := socketInodes(t, srv.Pid())
					if len(inodes) == 0 {
						t.Fatalf("etcd (pid %d) has no sockets: not the server process?", srv.Pid())
					}
					listening := tcpListeners(t)
					for ino := range inodes {
						if addr, ok := listening[ino]; ok {
							t.Errorf("etcd (pid %d) listens on TCP %s", srv.Pid(), addr)
						}
					}
					unix := unixSockets(t)
					var inDir int
					for ino := range inodes {
						// etcd binds them relative to its working
						// directory, the socket directory.
						p := unix[ino]
						if p != "" && !filepath.IsAbs(p) {
							p = filepath.Join(srv.SocketDir, p)
						}
						if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 && filepath.Dir(p) == srv.SocketDir {
							inDir++
						}
					}
					if inDir < 2 {
						t.Errorf("etcd (pid %d) listens on %d unix sockets in %s, want client and peer", srv.Pid(), inDir, srv.SocketDir)
					}
				},
			})
			if err != nil {
				t.Fatalf("Drill: %v\n%+v", err, rep)
			}
			if !inspected {
				t.Fatal("OnBoot was not called")
			}
		})
	}
}

// socketInodes returns the inodes of the sockets among pid's open files.
func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			out[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return out
}

// tcpListeners maps the inode of every listening TCP socket (IPv4 and
// IPv6) to its local address.
func tcpListeners(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		forLines(t, f, func(fields []string) {
			// sl local_address rem_address st ... uid timeout inode
			if len(fields) > 9 && fields[3] == "0A" {
				out[fields[9]] = fields[1]
			}
		})
	}
	return out
}

// unixSockets maps the inode of every bound unix socket to its path.
func unixSockets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	forLines(t, "/proc/net/unix", func(fields []string) {
		// Num RefCount Protocol Flags Type St Inode Path
		if len(fields) > 7 {
			out[fields[6]] = fields[7]
		}
	})
	return out
}

func forLines(t *testing.T, path string, f func([]string)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Scan() // header
	for sc.Scan() {
		f(strings.Fields(sc.Text()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestDrillComparesFileHashKV: the restored member's HashKV is compared
// with the file-computed HashKV of the manifest also when the live member
// could not be compared when the backup was taken.
func TestDrillComparesFileHashKV(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	src := restoretest.StartSource(t, 200)
	b := restoretest.DirRepo(t, t.TempDir())
	m := src.Backup(t, b, repository.Encoding{Compression: "zstd"})
	tests := []struct {
		name   string
		edit   func(m *repository.Manifest)
		passed bool
	}{
		{name: "live not comparable, file hash right", passed: true, edit: func(m *repository.Manifest) {
			m.HashKVStatus, m.HashKVLive = "not comparable: live HashKV: context deadline exceeded", 0
		}},
		{name: "live not comparable, file hash wrong", edit: func(m *repository.Manifest) {
			m.HashKVStatus, m.HashKVLive = "not comparable: live HashKV: context deadline exceeded", 0
			m.HashKV ^= 0x10
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mm := restoretest.RewriteManifest(t, b, m, tt.edit)
			rep, err := drill.Run(t.Context(), drill.Options{Backups: b, Manifest: mm, ScratchDir: t.TempDir()})
			if rep == nil {
				t.Fatalf("Drill: %v", err)
			}
			var hashkv *repository.Check
			for i, c := range rep.Checks {
				if c.Name == "hashkv" {
					hashkv = &rep.Checks[i]
				}
			}
			if hashkv == nil {
				t.Fatalf("no hashkv check (error %v): %+v", err, rep.Checks)
			}
			if strings.HasPrefix(hashkv.Actual, "not comparable") || hashkv.Actual != hexHash(sourceHashKV(t, src, m.Revision)) {
				t.Errorf("hashkv check %+v: want the restored member's HashKV %s", *hashkv, hexHash(sourceHashKV(t, src, m.Revision)))
			}
			if tt.passed {
				if err != nil || !hashkv.Passed {
					t.Errorf("Drill: %v, hashkv check %+v", err, *hashkv)
				}
				return
			}
			if !errors.Is(err, drill.ErrFailed) || hashkv.Passed {
				t.Errorf("Drill: %v, hashkv check %+v: want a failed verdict", err, *hashkv)
			}
		})
	}
}

// sourceHashKV is the source's HashKV at rev.
func sourceHashKV(t *testing.T, s *restoretest.Source, rev int64) uint32 {
	t.Helper()
	ep := s.C.Endpoints()[0]
	h, err := s.C.Client(t).HashKV(t.Context(), ep, rev)
	if err != nil {
		t.Fatal(err)
	}
	return h.Hash
}

func hexHash(v uint32) string { return fmt.Sprintf("0x%08x", v) }
