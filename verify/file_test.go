package verify_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// scenario builds a history on a cluster before the snapshot.
type scenario struct {
	name    string
	members int
	write   func(h history)
	// wantNoLiveKeys marks histories that leave no key alive (etcd then
	// hashes every record at or below the compact revision).
	wantNoLiveKeys bool
	// compactedAtEnd marks histories that end with a compaction at the
	// current revision: the member then answers HashKV at that revision
	// with the hash it computed while compacting (over the records before
	// compaction, reported with the previous compact revision), which
	// CompareHashKV must call not comparable.
	compactedAtEnd bool
	// empty marks histories without any record: Revision is 0 and File
	// calls the HashKV not comparable.
	empty bool
}

var scenarios = []scenario{
	{name: "empty", write: func(h history) {}, wantNoLiveKeys: true, empty: true},
	{name: "fresh puts", write: func(h history) { h.puts("/registry/pods/default/p", 50, 200) }},
	{name: "overwrites", write: func(h history) {
		for v := range 5 {
			h.puts("/registry/configmaps/kube-system/c", 20, 100+v*50)
		}
	}},
	{name: "deletes", write: func(h history) {
		h.puts("/registry/pods/a/p", 30, 150)
		h.puts("/registry/pods/b/p", 30, 150)
		h.del("/registry/pods/a/", clientv3.WithPrefix())
		h.del("/registry/pods/b/p0003")
		h.put("/registry/pods/a/p0001", "again")
	}},
	{name: "large values", write: func(h history) {
		h.puts("/registry/secrets/s", 10, 9000)
		h.puts("/registry/secrets/s", 5, 20000)
		h.del("/registry/secrets/s0002")
	}},
	{name: "compacted at current revision", write: func(h history) {
		h.puts("/k/", 20, 100)
		h.puts("/k/", 10, 120)
		h.compact(h.rev())
	}, compactedAtEnd: true},
	{name: "compacted then more writes", write: func(h history) {
		h.puts("/k/", 40, 100)
		mid := h.puts("/j/", 10, 100)
		h.puts("/k/", 10, 130) // overwrite keys alive at the compact revision
		h.compact(mid)
		h.puts("/k/", 5, 140) // overwritten again after the compaction
		h.del("/k/0030")      // deleted after the compaction
		h.del("/j/", clientv3.WithPrefix())
		h.puts("/n/", 10, 100) // new keys
	}},
	{name: "compacted at a tombstone", write: func(h history) {
		h.puts("/k/", 20, 100)
		rev := h.del("/k/0007")
		h.compact(rev)
		h.puts("/k/", 3, 90)
	}},
	{name: "compacted at a tombstone at the current revision", write: func(h history) {
		h.puts("/k/", 20, 100)
		h.compact(h.del("/k/0007"))
	}, compactedAtEnd: true},
	{name: "compacted at a multi-key delete", write: func(h history) {
		h.puts("/k/", 20, 100)
		h.compact(h.del("/k/001", clientv3.WithPrefix()))
		h.put("/k/0011", "back")
	}},
	{name: "every key deleted after compaction", write: func(h history) {
		h.puts("/k/", 20, 100)
		h.compact(h.rev())
		h.del("/k/", clientv3.WithPrefix())
	}, wantNoLiveKeys: true},
	{name: "deleted and recreated across compactions", write: func(h history) {
		h.put("/a", "1")
		h.del("/a")
		h.compact(h.put("/a", "2"))
		h.del("/a")
		h.put("/a", "3")
		h.puts("/k/", 5, 10)
		h.compact(h.rev() - 2)
		h.put("/a", "4")
	}},
	{name: "transactions", write: func(h history) {
		h.puts("/k/", 10, 50)
		resp, err := h.cli.Txn(h.ctx).Then(
			clientv3.OpPut("/t/1", "x"), clientv3.OpPut("/t/2", "y"), clientv3.OpDelete("/k/0001"),
		).Commit()
		if err != nil {
			h.tb.Fatal(err)
		}
		h.compact(resp.Header.Revision)
		h.put("/t/1", "z")
	}},
	{name: "leases", write: func(h history) {
		lease, err := h.cli.Grant(h.ctx, 600)
		if err != nil {
			h.tb.Fatal(err)
		}
		h.put("/leased/1", "a", clientv3.WithLease(lease.ID))
		h.put("/leased/2", "b", clientv3.WithLease(lease.ID))
		h.puts("/k/", 5, 10)
		if _, err := h.cli.Revoke(h.ctx, lease.ID); err != nil {
			h.tb.Fatal(err)
		}
		h.compact(h.rev())
		h.put("/k/0001", "after")
	}},
	{name: "three members, snapshot from a follower", members: 3, write: func(h history) {
		h.puts("/k/", 30, 300)
		mid := h.puts("/k/", 10, 100)
		h.del("/k/0004")
		h.compact(mid)
		h.puts("/k/", 3, 100)
	}},
}

// seeded writes Kubernetes-like data with internal/seed.
func seeded(opts seed.Options) func(h history) {
	return func(h history) {
		h.tb.Helper()
		if _, err := seed.Kubernetes(h.ctx, h.cli, opts); err != nil {
			h.tb.Fatalf("seed: %v", err)
		}
	}
}

var seededScenarios = []scenario{
	{name: "seeded", write: seeded(seed.Options{Objects: 1500, Seed: 1})},
	{name: "seeded compacted", write: seeded(seed.Options{Objects: 1500, Compact: true, Seed: 2})},
	{name: "seeded many overwrites and deletes, compacted", write: seeded(seed.Options{
		Objects: 1000, Overwrites: 3000, Deletes: 400, Compact: true, Seed: 3})},
	{name: "seeded large values, compacted", write: seeded(seed.Options{
		Objects: 200, MinValue: 8 << 10, MaxValue: 64 << 10, BatchSize: 8, Compact: true, Seed: 4})},
}

// TestFileMatchesEtcd checks File against three references on snapshots of
// real etcd: etcdutl's snapshot status, the live member's HashKV at the
// snapshot revision, and etcd's own mvcc store opened on a copy of the file
// (what `etcdutl hashkv` does).
func TestFileMatchesEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd clusters")
	}
	for _, sc := range append(scenarios, seededScenarios...) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := etcdtest.Start(t, etcdtest.Options{Members: sc.members})
			cli := c.Client(t)
			sc.write(history{tb: t, ctx: ctx, cli: cli})

			ep := c.Members[0].ClientURL
			if sc.members == 3 {
				leader := c.Leader(t)
				for _, m := range c.Members {
					if m != leader {
						ep = m.ClientURL
						break
					}
				}
			}
			dir := t.TempDir()
			path := saveSnapshot(t, ctx, c.ClientConfig(), ep, dir)
			if rev, err := verify.Revision(ctx, path); err != nil {
				t.Errorf("Revision: %v", err)
			} else if st, err := verify.File(ctx, path); err == nil && rev != st.Revision {
				t.Errorf("Revision = %d, File says %d", rev, st.Revision)
			}
			if sc.empty {
				st, err := verify.File(ctx, path)
				if err != nil || st.Revision != 0 || st.HashKVComparable || st.HashKVReason == "" {
					t.Errorf("File on an empty keyspace = %+v, %v; want revision 0, not comparable", st, err)
				}
				return
			}
			got := checkAgainstEtcdutl(t, path)
			// The key bucket walked in two halves gives the same status.
			for _, minPages := range []uint64{0, 1} {
				if st, err := verify.FileSplit(ctx, path, minPages); err != nil || st != got {
					t.Errorf("FileSplit(%d) = %+v, %v; File gave %+v", minPages, st, err, got)
				}
			}
			if noLive := got.TotalKeys == 0; noLive != sc.wantNoLiveKeys {
				t.Errorf("TotalKeys = %d, want no live keys: %v", got.TotalKeys, sc.wantNoLiveKeys)
			}

			// The live member.
			resp, err := cli.HashKV(ctx, ep, got.Revision)
			if err != nil {
				t.Fatalf("HashKV(%s, %d): %v", ep, got.Revision, err)
			}
			if wantCompact := max(resp.CompactRevision, 0); !sc.compactedAtEnd && got.CompactRevision != wantCompact {
				t.Errorf("CompactRevision = %d, member says %d", got.CompactRevision, resp.CompactRevision)
			}
			verdict, err := verify.CompareHashKV(got, resp.Hash, resp.CompactRevision)
			switch {
			case sc.compactedAtEnd:
				if err != nil || !strings.HasPrefix(verdict, "not comparable: ") {
					t.Errorf("CompareHashKV with the member's compaction hash = %q, %v; want not comparable", verdict, err)
				}
			case err != nil || verdict != "match":
				t.Errorf("CompareHashKV with the member at revision %d = %q, %v; want match (status %+v)",
					got.Revision, verdict, err, got)
			}

			checkAgainstMVCC(t, path, got)

			// The trailer of a snapshot as streamed.
			digest, err := verify.Trailer(ctx, path)
			if err != nil {
				t.Errorf("Trailer: %v", err)
			} else if len(digest) != 64 {
				t.Errorf("Trailer digest %q", digest)
			}
		})
	}
}

// checkAgainstEtcdutl runs File on path, checks that the file did not
// change and that the status equals etcdutl's, and returns it.
func checkAgainstEtcdutl(t *testing.T, path string) verify.Status {
	t.Helper()
	before := fileSHA256(t, path)
	got, err := verify.File(t.Context(), path)
	if err != nil {
		t.Fatalf("File: %v", err)
	}
	if after := fileSHA256(t, path); after != before {
		t.Errorf("File changed the snapshot: sha256 %s, was %s", after, before)
	}
	es, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		t.Fatalf("etcdutl status: %v", err)
	}
	gotStatus := asEtcdutl(got, es.Revision)
	if diff := cmp.Diff(gotStatus, es); diff != "" {
		t.Errorf("File disagrees with etcdutl snapshot status (-File +etcdutl):\n%s", diff)
	}
	if !got.HashKVComparable {
		t.Fatalf("HashKV not comparable: %s", got.HashKVReason)
	}
	return got
}

// checkAgainstMVCC compares st with etcd's mvcc store opened on a copy of
// the database at path.
func checkAgainstMVCC(t *testing.T, path string, st verify.Status) {
	t.Helper()
	hash, compactRev := mvccHashKV(t, copyDB(t, path, st.Size, t.TempDir()), st.Revision)
	if hash != st.HashKV || max(compactRev, 0) != st.CompactRevision {
		t.Errorf("mvcc store on a copy: hash %#x compact %d; File: hash %#x compact %d",
			hash, compactRev, st.HashKV, st.CompactRevision)
	}
}

func TestFileCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := verify.File(ctx, fixture(t, "small.db"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("File with a cancelled context: %v, want context.Canceled", err)
	}
}
