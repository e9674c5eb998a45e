package inspect

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// ErrNotFound is returned by Get for a key that has no live value at the
// snapshot's revision.
var ErrNotFound = errors.New("not found")

// NotFoundError is ErrNotFound for one key at one revision.
type NotFoundError struct {
	Key      string
	Revision int64
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s: not found at revision %d", e.Key, e.Revision)
}

func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// Snapshot is one cached snapshot opened read-only: its index and its
// key bucket. It is not safe for concurrent use.
type Snapshot struct {
	// ID is the backup id, Revision the snapshot's revision.
	ID       string
	Revision int64
	path     string
	ix       *index
	keys     *verify.Keys
	enc      *Keys
}

// OpenSnapshot opens a raw snapshot file and its index (built by
// BuildIndex for the snapshot with this sha256).
func OpenSnapshot(ctx context.Context, id, dbPath, indexPath, sha string) (*Snapshot, error) {
	ix, err := openIndex(indexPath, sha)
	if err != nil {
		return nil, err
	}
	keys, err := verify.OpenKeys(ctx, dbPath)
	if err != nil {
		ix.close()
		return nil, err
	}
	return &Snapshot{ID: id, Revision: ix.revision, path: dbPath, ix: ix, keys: keys}, nil
}

// Path is the snapshot file (in the cache: copy it, never change it).
func (s *Snapshot) Path() string { return s.path }

// SetEncryptionKeys gives the keys that decrypt values encrypted at rest.
func (s *Snapshot) SetEncryptionKeys(k *Keys) { s.enc = k }

// Close closes the files.
func (s *Snapshot) Close() error {
	err := s.ix.close()
	if err2 := s.keys.Close(); err == nil {
		err = err2
	}
	return err
}

// Count is the number of live keys.
func (s *Snapshot) Count() int64 { return s.ix.count }

// List calls fn with the index entry of each live key under prefix, in
// key order, without reading the snapshot. The entry is reused.
func (s *Snapshot) List(prefix string, fn func(*Entry) error) error {
	if err := s.ix.scan(prefix, fn); err != nil {
		return fmt.Errorf("backup %s: list %q: %w", s.ID, prefix, err)
	}
	return nil
}

// Lookup returns the index entry of key; a missing key is a *NotFoundError.
func (s *Snapshot) Lookup(key string) (Entry, error) {
	e, ok, err := s.ix.get(key)
	if err != nil {
		return e, fmt.Errorf("backup %s: look up %q: %w", s.ID, key, err)
	}
	if !ok {
		return e, &NotFoundError{Key: key, Revision: s.Revision}
	}
	return e, nil
}

// Get returns the decoded value of key; a missing key is a *NotFoundError.
// A value that cannot be decrypted or decoded is returned with Value.Err
// set, not as an error.
func (s *Snapshot) Get(ctx context.Context, key string) (Value, error) {
	e, err := s.Lookup(key)
	if err != nil {
		return Value{}, err
	}
	return s.Value(ctx, e)
}

// Value reads and decodes the value of an entry from the snapshot: one
// path down the key bucket's tree.
func (s *Snapshot) Value(ctx context.Context, e Entry) (Value, error) {
	rec, err := s.keys.Get(ctx, e.revKey())
	if err != nil {
		return Value{}, fmt.Errorf("backup %s: read %q: %w", s.ID, e.Key, err)
	}
	if rec == nil {
		return Value{}, fmt.Errorf("backup %s: read %q: %w: the index names revision %d.%d, the snapshot has no such record",
			s.ID, e.Key, verify.ErrCorrupt, e.ModRevision, e.Sub)
	}
	var kv mvccpb.KeyValue
	if err := proto.Unmarshal(rec, &kv); err != nil {
		return Value{}, fmt.Errorf("backup %s: read %q: %w: %w", s.ID, e.Key, verify.ErrCorrupt, err)
	}
	if string(kv.Key) != e.Key {
		return Value{}, fmt.Errorf("backup %s: read %q: %w: the record at revision %d.%d holds key %q",
			s.ID, e.Key, verify.ErrCorrupt, e.ModRevision, e.Sub, kv.Key)
	}
	return decodeValue(e, kv.Value, s.enc), nil
}
