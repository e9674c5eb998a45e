// Package restoretest holds the fixtures of the restore and drill tests:
// a seeded real etcd and its backups (Source), stores in a directory or
// a real S3 bucket, age identities, and a captured generation with a
// random workload, a compaction and a later snapshot (PITRSource). It is
// for tests only.
package restoretest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"go.uber.org/goleak"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Source is a real etcd seeded with Kubernetes-like data.
type Source struct {
	C    *etcdtest.Cluster
	Seed seed.Result
}

// StartSource starts a real etcd seeded with objects Kubernetes-like
// objects.
func StartSource(t testing.TB, objects int) *Source {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	res, err := seed.Kubernetes(t.Context(), c.Client(t), seed.Options{Objects: objects, Compact: true, Seed: 3})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	return &Source{C: c, Seed: res}
}

// Backup takes a backup of the source with the real pipeline.
func (s *Source) Backup(t testing.TB, b *repository.Repo, enc repository.Encoding) *repository.Manifest {
	t.Helper()
	m, err := backup.Run(t.Context(), backup.Job{
		Etcd:     snapshot.Config{Endpoints: s.C.Endpoints(), Member: "any"},
		SpoolDir: t.TempDir(),
		Backups:  b,
		Encoding: enc,
		Version:  "test",
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return m
}

// DirRepo is a repository in a directory store at dir.
func DirRepo(t testing.TB, dir string) *repository.Repo {
	t.Helper()
	st, err := uploader.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &repository.Repo{Store: st, Cluster: "test"}
}

var bucketSeq atomic.Int64

// S3Repo returns backups in a fresh bucket of a real versitygw.
func S3Repo(t testing.TB, srv *s3test.Server) *repository.Repo {
	t.Helper()
	srv.Env(t)
	bucket := fmt.Sprintf("lifeboat-restore-%d", bucketSeq.Add(1))
	srv.CreateBucket(t, bucket, false)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{
		Bucket: bucket, Prefix: "backups", Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
		PartSize: uploader.MinS3PartSize, Concurrency: 3, MaxAttempts: 4, MaxBackoff: 200 * time.Millisecond, ReadTimeout: 10 * time.Second,
	}, nil)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return &repository.Repo{Store: st, Cluster: "test"}
}

// NewIdentity is a fresh age identity.
func NewIdentity(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// AgeEncoding is zstd and age encryption to id.
func AgeEncoding(id *age.X25519Identity) repository.Encoding {
	return repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}
}

// AssertEmpty fails unless dir exists and holds nothing.
func AssertEmpty(t testing.TB, dir string) {
	t.Helper()
	var left []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			left = append(left, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	if len(left) > 0 {
		t.Errorf("%s is not empty afterwards: %v", dir, left)
	}
}

// RewriteManifest edits a stored manifest as an attacker or a bug could.
func RewriteManifest(t testing.TB, b *repository.Repo, m *repository.Manifest, edit func(*repository.Manifest)) *repository.Manifest {
	t.Helper()
	c := *m
	edit(&c)
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Stores never replace an object: delete it first.
	if err := b.Store.Delete(context.Background(), b.ManifestKey(c.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.Put(context.Background(), b.ManifestKey(c.ID), strings.NewReader(string(data)), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := b.Manifest(t.Context(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// CopyTree copies a directory tree (a dir store) so each case damages its
// own copy.
func CopyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// OnChildStarted has f called with each drill child process (restore,
// replay, etcd) right after it started, until the test ends. Tests
// that use it must not run in parallel with other drills.
func OnChildStarted(t testing.TB, f func(*exec.Cmd)) { t.Cleanup(child.OnStart(f)) }

// CopyFile copies the file src to dst (0600).
func CopyFile(b testing.TB, src, dst string) {
	b.Helper()
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}

// Main is the TestMain of a test binary that drills or starts a
// throwaway etcd: started as one of a drill's children (a drill, and
// child.StartEtcd, run their own executable with a hidden command, as
// the lifeboat binary's are), it is that child (child.Main with
// restore.ChildWork); otherwise it runs the tests, then after (the
// fixtures' cleanup), then checks for leaked goroutines (goleak) when
// they passed, and exits.
func Main(m *testing.M, after ...func()) {
	if ran, code := child.Main(os.Args, os.Stderr, restore.ChildWork()); ran {
		os.Exit(code)
	}
	code := m.Run()
	for _, f := range after {
		f()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
