package restore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
)

// A restore in place turns a fetched snapshot file into a member's
// database where it lies, instead of copying it (etcdutl's restore copies
// the file, then opens the copy three times): the file is moved into the
// member's snap directory, its trailer cut, and the database steps
// etcdutl makes (the member lists trimmed, the new cluster's members
// added, the consistent index set to the raft log's last entry) are
// written in one bbolt transaction; the member's WAL and raft snapshot are
// the clones' (writeMemberLog). TestInPlaceMatchesEtcdutl compares the
// result with etcdutl's restore of the same snapshot.
//
// It is the drill's: the structural check of the file (verify.File,
// read-only) runs while the child opens the database (bbolt's walk of
// every page, etcd keeps no free list on disk) and writes the raft log;
// the child writes the database only when told to commit, after the check
// ended, so the file never changes under the check, and never when the
// check failed.

// inPlaceCommit is the line the parent writes on the in-place child's
// stdin to let it write the database; anything else, or the end of
// stdin, ends the child without writing it.
const inPlaceCommit = "commit"

// ErrInPlaceAborted is the in-place restore's error when its parent
// ended it before the database was written (a failed check of the file).
var ErrInPlaceAborted = errors.New("restore in place: ended before the database was written")

// InPlace is a restore in place running in a child process: the
// database is opened and the raft log written, the database's own
// steps wait for Commit.
type InPlace struct {
	c   *child.Process
	ctx context.Context
}

// MoveIntoMember moves the fetched snapshot file spool (etcd's sha256
// trailer, when there, is cut first) into the snap directory of the
// member whose data directory is dataDir, created 0700, and returns the
// database's path. spool and dataDir must be on one file system.
func MoveIntoMember(spool, dataDir string) (string, error) {
	if err := cutTrailer(spool); err != nil {
		return "", err
	}
	snapDir := filepath.Join(dataDir, "member", "snap")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		return "", err
	}
	db := filepath.Join(snapDir, "db")
	if err := os.Rename(spool, db); err != nil {
		return "", fmt.Errorf("move the snapshot into the member's directory: %w", err)
	}
	return db, nil
}

// cutTrailer truncates etcd's 32-byte sha256 trailer from the snapshot
// at path, as etcdutl does to its copy: a file of whole 512-byte
// sectors has none.
func cutTrailer(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size()%512 == 32 {
		return os.Truncate(path, fi.Size()-32)
	}
	return nil
}

// StartInPlace starts the restore in place of the single member o names
// (Name, DataDir, PeerURLs[0], InitialClusterToken; its database already
// at DataDir/member/snap/db, see MoveIntoMember) in a child process of
// this program. The child opens the database and writes the member's raft
// log at once; the database is written only after Commit.
func StartInPlace(ctx context.Context, o RestoreOptions) (*InPlace, error) {
	if o.RevisionBump > 0 || o.MarkCompacted {
		return nil, errors.New("restore in place: no revision bump")
	}
	o.SkipHashCheck = true
	args, err := restoreChildArgs(o)
	if err != nil {
		return nil, err
	}
	c, err := child.Start(ctx, "restore", append(args, "--in-place"), true)
	if err != nil {
		return nil, err
	}
	return &InPlace{c: c, ctx: ctx}, nil
}

// Commit lets the child write the database and waits for it to end.
func (p *InPlace) Commit() error {
	// A child that already ended says why in Wait.
	_, _ = io.WriteString(p.c.Stdin, inPlaceCommit+"\n")
	p.c.Stdin.Close()
	return p.wait()
}

// Abort ends the child without writing the database and waits for it.
func (p *InPlace) Abort() {
	p.c.Stdin.Close()
	_ = p.wait()
}

func (p *InPlace) wait() error {
	return p.c.Wait(p.ctx, map[string]error{restoreErrorPrefix: nil})
}

// restoreInPlace is the child's side of StartInPlace: o's member, its
// database at DataDir/member/snap/db (o.SnapshotPath), made a member
// (writeInPlace) once in says commit.
func restoreInPlace(o RestoreOptions, in io.Reader) error {
	p, err := o.plan()
	if err != nil {
		return err
	}
	if len(p.members) != 1 {
		return badOptions("a restore in place is of one member")
	}
	m := p.members[0]
	dbPath := filepath.Join(m.DataDir, "member", "snap", "db")
	if abs, err := filepath.Abs(o.SnapshotPath); err != nil || abs != dbPath {
		return badOptions("a restore in place needs the snapshot at %s, not %s", dbPath, o.SnapshotPath)
	}
	err = writeInPlace(p, m, func() bool {
		line, _ := bufio.NewReader(in).ReadString('\n')
		return strings.TrimSpace(line) == inPlaceCommit
	})
	if err == nil {
		dropCache(dbPath)
	}
	return err
}

// writeInPlace makes the database at m's DataDir/member/snap/db member
// m's of plan p: it opens the database (etcd keeps no free list on disk:
// bbolt walks every page), writes m's raft log (writeMemberLog), and,
// when proceed says so (else ErrInPlaceAborted, the database untouched),
// the database's steps in one transaction (memberSteps), synced.
func writeInPlace(p *plan, m RestoredMember, proceed func() bool) error {
	snapDir := filepath.Join(m.DataDir, "member", "snap")
	dbPath := filepath.Join(snapDir, "db")
	walDir := m.WALDir
	if walDir == "" {
		walDir = filepath.Join(m.DataDir, "member", "wal")
	}
	if _, err := os.Stat(walDir); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wal-dir %q exists", walDir)
	}
	// etcd's backend opens its file so: no free list on disk (it is
	// rebuilt from the pages at each open), the map free list.
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("open the database %s: %w", dbPath, err)
	}
	defer db.Close()
	if err := writeMemberLog(p, m.Name, snapDir, walDir); err != nil {
		return fmt.Errorf("write the raft log: %w", err)
	}
	if !proceed() {
		return ErrInPlaceAborted
	}
	cl, err := restoredCluster(p)
	if err != nil {
		return err
	}
	// bbolt's commit syncs the file (every page of it not yet on disk).
	if err := db.Update(func(tx *bolt.Tx) error { return memberSteps(tx, cl) }); err != nil {
		return fmt.Errorf("write the database %s: %w", dbPath, err)
	}
	if err := db.Close(); err != nil {
		return err
	}
	return writeback.SyncDir(snapDir)
}

// restoreFirstInPlace restores member m, the first of plan p, from the
// snapshot at o.SnapshotPath where it lies (o.MoveSnapshot): the file is
// moved into m's directory and made its database (writeInPlace), then m's
// directories handed to o.Owner. It reports false, having changed
// nothing, when the snapshot is on another file system than m's data
// directory: then etcdutl copies it.
func restoreFirstInPlace(o RestoreOptions, p *plan, m RestoredMember) (bool, error) {
	snapDir := filepath.Join(m.DataDir, "member", "snap")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		return false, fmt.Errorf("member %s: %w", m.Name, err)
	}
	err := os.Rename(o.SnapshotPath, filepath.Join(snapDir, "db"))
	if errors.Is(err, syscall.EXDEV) {
		// etcdutl wants the data directory as it found it.
		return false, os.RemoveAll(filepath.Join(m.DataDir, "member"))
	}
	if err != nil {
		return false, fmt.Errorf("member %s: move the snapshot into its directory: %w", m.Name, err)
	}
	if err := cutTrailer(filepath.Join(snapDir, "db")); err != nil {
		return true, fmt.Errorf("member %s: %w", m.Name, err)
	}
	if err := writeInPlace(p, m, func() bool { return true }); err != nil {
		return true, fmt.Errorf("restore member %s into %s: %w", m.Name, m.DataDir, err)
	}
	return true, chownMember(o, m)
}

// restoredCluster is the plan's cluster, as etcdutl builds it.
func restoredCluster(p *plan) (*membership.RaftCluster, error) {
	urls, err := types.NewURLsMap(p.cluster)
	if err != nil {
		return nil, err
	}
	return membership.NewClusterFromURLsMap(zap.NewNop(), p.token, urls)
}

// memberSteps writes into tx what etcdutl's restore writes into the
// database of a member of cluster cl: the old member lists trimmed, cl's
// members saved (schema's MustSaveMemberToBackend: the member's ID as
// key, its JSON as value), and the consistent index and term of the raft
// log's last entry (one configuration change per member, term 1).
func memberSteps(tx *bolt.Tx, cl *membership.RaftCluster) error {
	w := &boltWriter{tx: tx}
	for _, b := range []backend.Bucket{schema.Members, schema.MembersRemoved} {
		var keys [][]byte
		if err := w.UnsafeForEach(b, func(k, _ []byte) error {
			keys = append(keys, k)
			return nil
		}); err != nil {
			return err
		}
		for _, k := range keys {
			w.UnsafeDelete(b, k)
		}
	}
	members := cl.Members()
	for _, m := range members {
		v, err := json.Marshal(m)
		if err != nil {
			return err
		}
		w.UnsafePut(schema.Members, schema.BackendMemberKey(m.ID), v)
	}
	schema.UnsafeUpdateConsistentIndexForce(w, uint64(len(members)), 1)
	return w.err
}

// boltWriter is etcd's backend.UnsafeReadWriter on one bbolt
// transaction, for schema's helpers. Its first error (a missing bucket,
// a failed write) is kept in err: the helpers return nothing.
type boltWriter struct {
	tx  *bolt.Tx
	err error
}

func (w *boltWriter) fail(err error) {
	if w.err == nil && err != nil {
		w.err = err
	}
}

func (w *boltWriter) bucket(b backend.Bucket) *bolt.Bucket {
	bk := w.tx.Bucket(b.Name())
	if bk == nil {
		w.fail(fmt.Errorf("the database has no %s bucket", b.Name()))
	}
	return bk
}

func (w *boltWriter) UnsafeRange(b backend.Bucket, key, end []byte, limit int64) (keys, vals [][]byte) {
	bk := w.bucket(b)
	if bk == nil {
		return nil, nil
	}
	if end == nil {
		if v := bk.Get(key); v != nil {
			return [][]byte{key}, [][]byte{v}
		}
		return nil, nil
	}
	c := bk.Cursor()
	for k, v := c.Seek(key); k != nil && string(k) < string(end); k, v = c.Next() {
		if limit > 0 && int64(len(keys)) >= limit {
			break
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals
}

func (w *boltWriter) UnsafeForEach(b backend.Bucket, visit func(k, v []byte) error) error {
	bk := w.tx.Bucket(b.Name())
	if bk == nil {
		// etcd's backend visits nothing in a missing bucket.
		return nil
	}
	return bk.ForEach(visit)
}

func (w *boltWriter) UnsafeCreateBucket(b backend.Bucket) {
	_, err := w.tx.CreateBucketIfNotExists(b.Name())
	w.fail(err)
}

func (w *boltWriter) UnsafeDeleteBucket(b backend.Bucket) {
	if err := w.tx.DeleteBucket(b.Name()); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
		w.fail(err)
	}
}

func (w *boltWriter) UnsafePut(b backend.Bucket, key, value []byte) {
	if bk := w.bucket(b); bk != nil {
		w.fail(bk.Put(key, value))
	}
}

// UnsafeSeqPut is UnsafePut: bbolt's fill percent is a layout choice,
// not content.
func (w *boltWriter) UnsafeSeqPut(b backend.Bucket, key, value []byte) { w.UnsafePut(b, key, value) }

func (w *boltWriter) UnsafeDelete(b backend.Bucket, key []byte) {
	if bk := w.bucket(b); bk != nil {
		w.fail(bk.Delete(key))
	}
}
