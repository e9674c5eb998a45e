// Package corrupt makes backups that are structurally valid but logically
// bad, as a backup taken of data that was already damaged would be: the
// cases drills exist to catch. It is imported only by tests.
package corrupt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// Backup rewrites an uncompressed, unencrypted backup of a dir store
// at root: its database is changed by edit, the sha256 trailer recomputed,
// verify.File must still accept it, and the manifest is rewritten to match
// the new file (as a backup taken of data that was already bad would be).
func Backup(t *testing.T, b *repository.Repo, root string, m *repository.Manifest, edit func(tx *bolt.Tx) error) *repository.Manifest {
	t.Helper()
	if m.Compression != "none" || m.Encryption != "none" {
		t.Fatalf("corrupt.Backup needs a plain backup, got %s/%s", m.Compression, m.Encryption)
	}
	obj := filepath.Join(root, filepath.FromSlash(m.Object))
	raw, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(db, raw[:len(raw)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(edit); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	data = append(data, sum[:]...)
	snap := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(snap, data, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := verify.File(t.Context(), snap)
	if err != nil {
		t.Fatalf("the crafted snapshot must pass verify.File: %v", err)
	}
	if err := os.Remove(obj); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obj, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c := *m
	c.Revision, c.CompactRevision, c.TotalKeys, c.DBSize = st.Revision, st.CompactRevision, st.TotalKeys, st.Size
	c.BoltHash, c.HashKV, c.HashKVStatus = st.BoltHash, st.HashKV, "match"
	c.SnapshotSHA256 = hex.EncodeToString(sum[:])
	c.ObjectSize = int64(len(data))
	objSum := sha256.Sum256(data)
	c.ObjectSHA256 = hex.EncodeToString(objSum[:])
	js, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	mpath := filepath.Join(root, filepath.FromSlash(b.ManifestKey(c.ID)))
	if err := os.Remove(mpath); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mpath, js, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := b.Manifest(t.Context(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TombstoneAtPutRevision adds, for the newest put in the key bucket, a
// deletion of the same key at the same revision: structurally a valid
// record (verify.File accepts it), logically impossible, and etcd v3.7.3
// panics on it while it rebuilds its index at boot ("'put' with an
// unexpected smaller revision").
func TombstoneAtPutRevision(tx *bolt.Tx) error {
	kb := tx.Bucket([]byte("key"))
	if kb == nil {
		return errors.New("no key bucket")
	}
	c := kb.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		if len(k) == 17 {
			tomb := append(bytes.Clone(k), 't')
			return kb.Put(tomb, bytes.Clone(v))
		}
	}
	return errors.New("no put record")
}
