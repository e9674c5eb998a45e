package jobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Cluster is the cluster name the fixtures store backups under.
const Cluster = "prod"

// Logger logs at debug level to a buffer that is printed when the test
// fails.
func Logger(t *testing.T) (*slog.Logger, *syncbuf.Buffer) {
	t.Helper()
	buf := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// Fixture is a real single-member etcd with Kubernetes-like data and a
// store for its backups (a caching repository.New).
type Fixture struct {
	Etcd    *etcdtest.Cluster
	Backups *repository.Repo
	// Spool and Scratch are paths (not yet created) for a backup's spool
	// and a drill's scratch space.
	Spool   string
	Scratch string
}

// NewFixture starts etcd, seeds it with objects Kubernetes-like objects
// and compacts it; st is the store (nil: a directory store in a temporary
// directory).
func NewFixture(t *testing.T, st uploader.Store, objects int) *Fixture {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	if _, err := seed.Kubernetes(t.Context(), c.Client(t), seed.Options{Objects: objects, Compact: true, Seed: 3}); err != nil {
		t.Fatalf("seed: %v", err)
	}
	if st == nil {
		d, err := uploader.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		st = d
	}
	dir := t.TempDir()
	return &Fixture{
		Etcd: c, Backups: repository.New(st, Cluster),
		Spool: filepath.Join(dir, "spool"), Scratch: filepath.Join(dir, "scratch"),
	}
}

// EtcdConfig is how to reach the fixture's etcd.
func (f *Fixture) EtcdConfig() snapshot.Config {
	return snapshot.Config{Endpoints: f.Etcd.Endpoints()}
}

// Manifests lists the ids of the committed backups, sorted.
func Manifests(t *testing.T, b *repository.Repo) []string {
	t.Helper()
	l, err := b.List(context.Background())
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var ids []string
	for _, e := range l.Backups {
		ids = append(ids, e.Manifest.ID)
	}
	sort.Strings(ids)
	return ids
}

// Listed returns the ids of the listed backups (newest first) and the
// keys of the orphans.
func Listed(t *testing.T, b *repository.Repo) (ids, orphans []string) {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, e := range l.Backups {
		ids = append(ids, e.Manifest.ID)
	}
	for _, o := range l.Orphans {
		orphans = append(orphans, o.Key)
	}
	return ids, orphans
}

// AllKeys returns every key of the store under Cluster.
func AllKeys(t *testing.T, st uploader.Store) []string {
	t.Helper()
	var keys []string
	if err := st.List(t.Context(), Cluster+"/", func(o uploader.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatalf("List: %v", err)
	}
	return keys
}

// DirEntries returns the names in dir (none when it does not exist).
func DirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

var bucketSeq atomic.Int64

// NewS3Store creates a bucket on srv and opens an S3 store on it under
// the prefix "team"; it returns the store and the bucket's name.
func NewS3Store(t testing.TB, srv *s3test.Server, objectLock bool) (*uploader.S3, string) {
	t.Helper()
	s3test.Env(t, srv.AccessKey, srv.SecretKey)
	bucket := fmt.Sprintf("prune-test-%d", bucketSeq.Add(1))
	srv.CreateBucket(t, bucket, objectLock)
	s, err := uploader.NewS3(t.Context(), uploader.S3Config{
		Bucket: bucket, Prefix: "team", Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
	}, nil)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return s, bucket
}

var revSeq atomic.Int64

// PutBackup stores a synthetic backup taken at at: a data object, then its
// manifest. lock is applied to the data object; when inManifest is set the
// manifest records it too (as lifeboat snapshot does).
func PutBackup(t testing.TB, b *repository.Repo, at time.Time, lock uploader.PutOptions, inManifest bool) *repository.Manifest {
	t.Helper()
	m := PutObject(t, b, at, lock)
	if inManifest {
		m.LockMode, m.LegalHold = lock.LockMode, lock.LegalHold
		if lock.LockMode != "" {
			until := lock.RetainUntil
			m.RetainUntil = &until
		}
	}
	if err := b.PutManifest(t.Context(), m); err != nil {
		t.Fatalf("PutManifest %s: %v", m.ID, err)
	}
	return m
}

// PutObject stores only the data object of a synthetic backup (an orphan)
// and returns the manifest that would commit it.
func PutObject(t testing.TB, b *repository.Repo, at time.Time, lock uploader.PutOptions) *repository.Manifest {
	t.Helper()
	rev := 1000 + revSeq.Add(1)
	id := repository.NewID(at, rev)
	data := bytes.Repeat([]byte(id), 1+int(rev%7))
	key := b.ObjectKey(id, repository.Encoding{Compression: "none"})
	info, err := b.Store.Put(t.Context(), key, bytes.NewReader(data), lock)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	sum := sha256.Sum256(data)
	return &repository.Manifest{
		Format: repository.ManifestFormat, ID: id, Cluster: b.Cluster,
		EtcdClusterID: "cdf818194e3a8c32", EtcdMemberID: "8e9e05c52164694d", Endpoint: "http://127.0.0.1:2379",
		EtcdVersion: "3.7.3", CreatedAt: at, Revision: rev, TotalKeys: 10, DBSize: int64(len(data)),
		SnapshotSHA256: hex.EncodeToString(sum[:]), HashKVStatus: "match",
		Object: key, ObjectSize: info.Size, ObjectSHA256: info.SHA256,
		Compression: "none", Encryption: "none", AgentVersion: "test",
	}
}

// HoldStore is a real store whose Puts of manifests wait until Release is
// closed: the window between a backup's data object and its manifest, held
// open. The key of the first held manifest is sent on Reached (when
// nobody waits there, it is dropped).
type HoldStore struct {
	uploader.Store
	Reached chan<- string
	Release <-chan struct{}
}

// Put holds manifests until Release, then stores.
func (h HoldStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if strings.Contains(key, "/snapshots/") && strings.HasSuffix(key, ".json") {
		select {
		case h.Reached <- key:
		default:
		}
		select {
		case <-h.Release:
		case <-ctx.Done():
			return uploader.ObjectInfo{}, ctx.Err()
		}
	}
	return h.Store.Put(ctx, key, r, opts)
}

// ClearHWM resets the process's peak resident set size (VmHWM) where the
// kernel allows it, so that what a benchmark did before (seeding) is not
// counted.
func ClearHWM() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// VmHWM reads the process's peak resident set size in bytes.
func VmHWM() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
