package restore_test

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// source is a real etcd seeded with Kubernetes-like data.
type source struct {
	c    *etcdtest.Cluster
	seed seed.Result
}

func startSource(t testing.TB, objects int) *source {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	res, err := seed.Kubernetes(t.Context(), c.Client(t), seed.Options{Objects: objects, Compact: true, Seed: 3})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	return &source{c: c, seed: res}
}

// backup takes a backup of the source with the real pipeline.
func (s *source) backup(t testing.TB, b *repository.Repo, enc repository.Encoding) *repository.Manifest {
	t.Helper()
	m, err := backup.Run(t.Context(), backup.Job{
		Etcd:     snapshot.Config{Endpoints: s.c.Endpoints(), Member: "any"},
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

func dirBackups(t testing.TB, dir string) *repository.Repo {
	t.Helper()
	st, err := uploader.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &repository.Repo{Store: st, Cluster: "test"}
}

var bucketSeq atomic.Int64

// s3Backups returns backups in a fresh bucket of a real versitygw.
func s3Backups(t testing.TB, srv *s3test.Server) *repository.Repo {
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

func newIdentity(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func ageEncoding(id *age.X25519Identity) repository.Encoding {
	return repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}
}

// assertEmpty fails unless dir exists and holds nothing.
func assertEmpty(t testing.TB, dir string) {
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

// rewriteManifest edits a stored manifest as an attacker or a bug could.
func rewriteManifest(t testing.TB, b *repository.Repo, m *repository.Manifest, edit func(*repository.Manifest)) *repository.Manifest {
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

// copyTree copies a directory tree (a dir store) so each case damages its
// own copy.
func copyTree(t testing.TB, src, dst string) {
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
