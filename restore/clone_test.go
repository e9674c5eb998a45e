package restore_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap/snappb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestClonedMemberMatchesEtcdutl: the members Restore clones from the
// first (every member but the first of a cluster restored at once) are
// what etcdutl writes for each on its own: the same WAL and raft
// snapshot files, byte for byte, and a database with the same content,
// with and without a revision bump, and with a separate WAL directory.
func TestClonedMemberMatchesEtcdutl(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	f := fetchBackup(t, 200)
	cluster := "m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2381,m2=http://127.0.0.1:2382,m3=http://127.0.0.1:2383"
	for _, tc := range []struct {
		name string
		opts restore.RestoreOptions
	}{
		{"plain", restore.RestoreOptions{}},
		{"bumped and compacted", restore.RestoreOptions{RevisionBump: 1000, MarkCompacted: true}},
		{"wal dir", restore.RestoreOptions{WALDir: "wal-{name}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			o := tc.opts
			o.SnapshotPath, o.InitialCluster, o.InitialClusterToken = f.path, cluster, "clone-test"
			all := o
			all.DataDir = filepath.Join(root, "all", "{name}")
			if o.WALDir != "" {
				all.WALDir = filepath.Join(root, "all", o.WALDir)
			}
			res, err := restore.Restore(t.Context(), all)
			if err != nil {
				t.Fatalf("Restore of 4 members: %v", err)
			}
			if len(res.Members) != 4 {
				t.Fatalf("restored %d members", len(res.Members))
			}
			for _, m := range res.Members[1:] {
				one := o
				one.Name = m.Name
				one.DataDir = filepath.Join(root, "one", "{name}")
				if o.WALDir != "" {
					one.WALDir = filepath.Join(root, "one", o.WALDir)
				}
				ref, err := restore.Restore(t.Context(), one)
				if err != nil {
					t.Fatalf("etcdutl's restore of %s alone: %v", m.Name, err)
				}
				r := ref.Members[0]
				sameFiles(t, walDir(r), walDir(m))
				sameFiles(t, filepath.Join(r.DataDir, "member", "snap"), filepath.Join(m.DataDir, "member", "snap"))
				sameContent(t, filepath.Join(r.DataDir, "member", "snap", "db"), filepath.Join(m.DataDir, "member", "snap", "db"))
				if fi, err := os.Stat(filepath.Join(m.DataDir, "member", "snap", "db")); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("cloned db of %s: %v %v", m.Name, fi.Mode(), err)
				}
			}
		})
	}
}

func walDir(m restore.RestoredMember) string {
	if m.WALDir != "" {
		return m.WALDir
	}
	return filepath.Join(m.DataDir, "member", "wal")
}

// sameFiles: dirs want and got hold files of the same names and bytes,
// but for the databases (compared by sameContent).
func sameFiles(t *testing.T, want, got string) {
	t.Helper()
	names := func(dir string) []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if e.Name() != "db" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	w, g := names(want), names(got)
	if !slices.Equal(w, g) || len(w) == 0 {
		t.Fatalf("%s holds %v, etcdutl's %s holds %v", got, g, want, w)
	}
	for _, n := range w {
		a, err := os.ReadFile(filepath.Join(want, n))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(got, n))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(n, ".snap") {
			a, b = snapFacts(t, a), snapFacts(t, b)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from etcdutl's %s", filepath.Join(got, n), filepath.Join(want, n))
		}
	}
}

// snapFacts is what a raft snapshot file says: its metadata and the
// member list of its v2 store (each leaf's path and value). The store's
// indexes are left out: etcd builds it from a map, so their order is
// not the same from one run of etcdutl to the next.
func snapFacts(t *testing.T, file []byte) []byte {
	t.Helper()
	var sp snappb.Snapshot
	if err := proto.Unmarshal(file, &sp); err != nil {
		t.Fatal(err)
	}
	var rs raftpb.Snapshot
	if err := proto.Unmarshal(sp.GetData(), &rs); err != nil {
		t.Fatal(err)
	}
	var store struct{ Root v2node }
	if err := json.Unmarshal(rs.GetData(), &store); err != nil {
		t.Fatal(err)
	}
	leaves := map[string]string{}
	store.Root.leaves(leaves)
	if len(leaves) == 0 {
		t.Fatal("no members in the raft snapshot")
	}
	meta, err := protojson.Marshal(rs.GetMetadata())
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{"meta": string(meta), "members": leaves})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// v2node is a node of etcd's v2 store as a raft snapshot holds it.
type v2node struct {
	Path     string
	Value    string
	Children map[string]v2node
}

func (n v2node) leaves(into map[string]string) {
	if n.Children == nil {
		into[n.Path] = n.Value
	}
	for _, c := range n.Children {
		c.leaves(into)
	}
}

// sameContent: the bbolt files want and got hold the same buckets, keys
// and values.
func sameContent(t *testing.T, want, got string) {
	t.Helper()
	dump := func(path string) string {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var b strings.Builder
		err = db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
				return bk.ForEach(func(k, v []byte) error {
					b.WriteString(string(name) + "\x00" + string(k) + "\x00" + string(v) + "\n")
					return nil
				})
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if a, b := dump(want), dump(got); a != b || a == "" {
		t.Errorf("database %s (%d bytes of content) differs from etcdutl's %s (%d)", got, len(b), want, len(a))
	}
}
