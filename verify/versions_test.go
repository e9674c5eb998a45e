package verify_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestFileMatchesEtcdVersions runs the single-member scenarios of
// TestFileMatchesEtcd against etcd servers of every version in
// HashKVVersions, each its own binary: File's HashKV must equal what that
// server answers at the snapshot revision, and its status etcdutl's.
func TestFileMatchesEtcdVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd servers")
	}
	var tested []string
	for _, v := range etcdtest.Versions {
		if !slices.Contains(tested, v.Minor) {
			tested = append(tested, v.Minor)
		}
	}
	if !slices.Equal(tested, verify.HashKVVersions) {
		t.Fatalf("versions tested %v, HashKVVersions %v: every known version needs its server here", tested, verify.HashKVVersions)
	}
	var scs []scenario
	for _, sc := range scenarios {
		if sc.members <= 1 {
			scs = append(scs, sc)
		}
	}
	scs = append(scs, scenario{name: "seeded many overwrites and deletes, compacted", write: seeded(seed.Options{
		Objects: 600, Overwrites: 1500, Deletes: 200, Compact: true, Seed: 3})})
	for _, v := range etcdtest.Versions {
		t.Run("etcd "+v.Name, func(t *testing.T) {
			bin := v.Need(t)
			for _, sc := range scs {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					ctx := t.Context()
					p := etcdtest.StartBinary(t, bin)
					cli := p.Client(t)
					ms, err := cli.Status(ctx, p.ClientURL)
					if err != nil {
						t.Fatalf("status of %s: %v", bin, err)
					}
					if minor, _ := verify.HashKVRules(ms.Version); minor != v.Minor || v.Name != v.Minor && ms.Version != v.Name {
						t.Fatalf("%s is etcd %s, want %s", bin, ms.Version, v.Name)
					}
					sc.write(history{tb: t, ctx: ctx, cli: cli})
					path := saveSnapshot(t, ctx, p.ClientConfig(), p.ClientURL, t.TempDir())
					if sc.empty {
						st, err := verify.File(ctx, path)
						if err != nil || st.HashKVComparable {
							t.Errorf("File on an empty keyspace = %+v, %v; want not comparable", st, err)
						}
						return
					}
					got := checkAgainstEtcdutl(t, path)
					resp, err := cli.HashKV(ctx, p.ClientURL, got.Revision)
					if err != nil {
						t.Fatalf("HashKV(%d): %v", got.Revision, err)
					}
					// Nothing was written since the snapshot: File's revision
					// is the member's.
					if got.Revision != resp.Header.Revision {
						t.Errorf("File's revision %d, etcd %s is at %d", got.Revision, ms.Version, resp.Header.Revision)
					}
					verdict, err := verify.CompareMemberHashKV(got, ms.Version, resp.Hash, resp.CompactRevision)
					switch {
					case sc.compactedAtEnd:
						if err != nil || !strings.HasPrefix(verdict, "not comparable: ") {
							t.Errorf("CompareMemberHashKV with etcd %s's compaction hash = %q, %v; want not comparable", ms.Version, verdict, err)
						}
					case err != nil || verdict != "match":
						t.Errorf("etcd %s at revision %d: CompareMemberHashKV = %q, %v; want match (File %+v, member hash %#x compact %d)",
							ms.Version, got.Revision, verdict, err, got, resp.Hash, resp.CompactRevision)
					}
				})
			}
		})
	}
}
