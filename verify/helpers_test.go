package verify_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/etcdutl"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// asEtcdutl is st as etcdutl's snapshot status reports it. The revisions
// differ only when the key bucket ends below the compact revision (etcd
// before 3.5.16 removed a tombstone at the compact revision) or a scheduled
// one: etcdutl reports the newest record's revision (etcdutl), File the
// revision etcd's store starts at.
func asEtcdutl(st verify.Status, etcdutlRev int64) snapshot.Status {
	rev := st.Revision
	if etcdutlRev < rev && (rev == st.CompactRevision || !st.HashKVComparable) {
		rev = etcdutlRev
	}
	return snapshot.Status{Hash: st.BoltHash, Revision: rev, TotalKey: st.TotalKeys,
		TotalSize: st.Size, Version: st.StorageVersion}
}

// saveSnapshot streams a snapshot from the member at endpoint into a new
// file in dir, exactly as received (database and sha256 trailer).
func saveSnapshot(tb testing.TB, ctx context.Context, cfg clientv3.Config, endpoint, dir string) string {
	tb.Helper()
	cfg.Endpoints = []string{endpoint}
	cli, err := clientv3.New(cfg)
	if err != nil {
		tb.Fatalf("client for %s: %v", endpoint, err)
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		tb.Fatalf("snapshot from %s: %v", endpoint, err)
	}
	defer rc.Close()
	path := filepath.Join(dir, "snapshot.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		tb.Fatalf("snapshot from %s: %v", endpoint, err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// fileSHA256 is the hex sha256 of a whole file.
func fileSHA256(tb testing.TB, path string) string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// copyDB copies the first n bytes of src (the database without its
// trailer) to a new file in dir.
func copyDB(tb testing.TB, src string, n int64, dir string) string {
	tb.Helper()
	in, err := os.Open(src)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, "copy.db")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.CopyN(out, in, n); err != nil {
		out.Close()
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
	return dst
}

// mvccHashKV is etcdutl's `hashkv`: it opens a database file read-write
// with etcd's own mvcc store (which may change the file: use a copy) and
// returns HashKV at rev and the compact revision.
func mvccHashKV(tb testing.TB, path string, rev int64) (hash uint32, compactRev int64) {
	tb.Helper()
	b := backend.NewDefaultBackend(zap.NewNop(), path)
	defer b.Close()
	st := mvcc.NewStore(zap.NewNop(), b, &etcdutl.SimpleLessor{}, mvcc.StoreConfig{})
	defer st.Close()
	h, _, err := mvcc.NewHashStorage(zap.NewNop(), st).HashByRev(rev)
	if err != nil {
		tb.Fatalf("mvcc HashByRev(%d) of %s: %v", rev, path, err)
	}
	return h.Hash, h.CompactRevision
}

// history writes to etcd through cli, failing the test on errors.
type history struct {
	tb  testing.TB
	ctx context.Context
	cli *clientv3.Client
}

func (h history) put(key, val string, opts ...clientv3.OpOption) int64 {
	h.tb.Helper()
	resp, err := h.cli.Put(h.ctx, key, val, opts...)
	if err != nil {
		h.tb.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

func (h history) del(key string, opts ...clientv3.OpOption) int64 {
	h.tb.Helper()
	resp, err := h.cli.Delete(h.ctx, key, opts...)
	if err != nil {
		h.tb.Fatalf("delete %s: %v", key, err)
	}
	return resp.Header.Revision
}

// compact compacts at rev and waits until the compaction is physically done.
func (h history) compact(rev int64) {
	h.tb.Helper()
	if _, err := h.cli.Compact(h.ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		h.tb.Fatalf("compact %d: %v", rev, err)
	}
}

func (h history) rev() int64 {
	h.tb.Helper()
	resp, err := h.cli.Get(h.ctx, "probe")
	if err != nil {
		h.tb.Fatalf("get: %v", err)
	}
	return resp.Header.Revision
}

// puts writes n keys prefix0..prefix(n-1) with values of size bytes.
func (h history) puts(prefix string, n, size int) int64 {
	h.tb.Helper()
	var rev int64
	for i := range n {
		rev = h.put(fmt.Sprintf("%s%04d", prefix, i), value(i, size))
	}
	return rev
}

// value is a deterministic value of size bytes.
func value(i, size int) string {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte('a' + (i+j)%26)
	}
	return string(b)
}
