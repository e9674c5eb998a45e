package repository

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"
	"sync"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Repo is the backup repository of one cluster inside a Store:
//
//	<cluster>/snapshots/<id>.db[.zst][.age]   data object
//	<cluster>/snapshots/<id>.json              manifest, written last
//	<cluster>/drills/<id>/<time>.json          drill reports
//	<cluster>/changes/<generation>/<first>-<last>.seg[.zst][.age]   change segments
//
// A Repo made by New caches the manifests and drill reports it has read
// (they are immutable once written), so that listing again costs the
// store's listing requests plus one read per object it has not seen; a
// Repo literal reads every object each time. Either is safe for
// concurrent use; copies of a Repo share its cache.
type Repo struct {
	Store   uploader.Store
	Cluster string
	// Lock is the Object Lock every write of this Repo requests
	// (manifests, drill reports, segments, markers); the zero LockPolicy
	// locks nothing. See lock.go.
	Lock LockPolicy

	// Signer, when set, signs every manifest, drill report and progress
	// marker this Repo writes.
	Signer *signing.Key
	// Trust is the readers' policy: with trusted keys, what is not signed
	// by one of them is untrusted (see trust.go). nil checks nothing.
	Trust *signing.Trust
	// Lineage, when set, is the lineage (an etcd cluster ID in hex) that
	// latest, random, latest-proven and a backup before a time are chosen
	// from; empty: the store's current lineage (CurrentLineage).
	Lineage string
	// Log, when set, receives the warnings of a resolution (untrusted
	// backups skipped, unsigned ones accepted).
	Log *slog.Logger

	cache *cache // nil: nothing cached
}

// New returns the repository of cluster in st, caching what it reads.
func New(st uploader.Store, cluster string) *Repo {
	return &Repo{Store: st, Cluster: cluster, cache: newCache()}
}

// Backup state values reported by List.
const (
	StateOK     = "ok"     // manifest and data object present
	StateBroken = "broken" // manifest present, data object missing or of the wrong size
	// StateUntrusted: the manifest is not signed by a trusted key. It is
	// never restored, drilled, copied or counted as a backup by prune.
	StateUntrusted = "untrusted"
)

// Entry is one backup as listed.
type Entry struct {
	Manifest *Manifest
	// State is StateOK or StateBroken.
	State string
	// Problem says what is wrong when State is StateBroken.
	Problem string
	// Object is the stored data object as listed (zero when missing).
	Object uploader.ObjectInfo
	// Damage is the damage record that makes the backup broken (its data
	// object is present, of its size, and proven damaged), nil otherwise.
	// Such a backup is still what latest names: a restore of it fails
	// loudly instead of quietly taking an older one.
	Damage *Damage
}

// Listing is the content of a cluster's snapshot area.
type Listing struct {
	// Backups, newest first.
	Backups []Entry
	// Orphans are data objects without a manifest (unfinished or pruned
	// half-way); they are never backups.
	Orphans []uploader.ObjectInfo
	// Unreadable are manifests that could not be parsed: damaged,
	// truncated, or of a format this build does not read. Their data
	// objects stay in Orphans (never deleted: see UnreadableManifestOf).
	Unreadable []uploader.ObjectInfo
	// UnreadableWhy says why each of Unreadable could not be read, by key.
	UnreadableWhy map[string]string
	// Damage is the cluster's damage records (damage.go): objects a
	// reader proved damaged, backups' and change segments' alike.
	Damage *DamageRecords
}

func (b *Repo) dir() string { return path.Join(b.Cluster, "snapshots") + "/" }

// ManifestKey returns the key of backup id's manifest.
func (b *Repo) ManifestKey(id string) string { return b.dir() + id + ".json" }

// ObjectKey returns the key of backup id's data object for an encoding.
func (b *Repo) ObjectKey(id string, e Encoding) string { return b.dir() + id + e.Suffix() }

// ErrNoBackups is wrapped when the store holds no backup of the cluster.
var ErrNoBackups = errors.New("no backups")

// List reads the snapshot area: every manifest (parsed), with the state of
// its data object, and the orphans.
func (b *Repo) List(ctx context.Context) (*Listing, error) {
	objects := map[string]uploader.ObjectInfo{}
	var manifests []uploader.ObjectInfo
	err := b.Store.List(ctx, b.dir(), func(o uploader.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".json") {
			manifests = append(manifests, o)
		} else {
			objects[o.Key] = o
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	l := &Listing{UnreadableWhy: map[string]string{}}
	if l.Damage, err = b.ReadDamage(ctx); err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	parsed, errs := b.readManifests(ctx, manifests)
	for i, mo := range manifests {
		m, err := parsed[i], errs[i]
		if err != nil {
			switch {
			case errors.Is(err, uploader.ErrNotFound):
				continue // deleted while listing
			case errors.Is(err, ErrBadManifest):
				l.Unreadable = append(l.Unreadable, mo)
				l.UnreadableWhy[mo.Key] = err.Error()
				continue
			default:
				// A store error is not a verdict on the manifest: fail
				// rather than list fewer backups than there are.
				return nil, err
			}
		}
		e := Entry{Manifest: m, State: StateOK}
		o, ok := objects[m.Object]
		switch {
		case m.Untrusted() != nil:
			e.State, e.Problem = StateUntrusted, m.Untrusted().(*UntrustedError).Err.Error()
		case !ok:
			e.State, e.Problem = StateBroken, "data object "+m.Object+" is missing"
		case o.Size != m.ObjectSize:
			e.State, e.Problem = StateBroken, fmt.Sprintf("data object %s has %d bytes, manifest says %d", m.Object, o.Size, m.ObjectSize)
		case l.trustedDamage(m.Object) != nil:
			e.Damage = l.trustedDamage(m.Object)
			e.State, e.Problem = StateBroken, e.Damage.String()
		}
		e.Object = o
		claimed[m.Object] = true
		l.Backups = append(l.Backups, e)
	}
	for k, o := range objects {
		if !claimed[k] {
			l.Orphans = append(l.Orphans, o)
		}
	}
	sort.Slice(l.Backups, func(i, j int) bool { return l.Backups[i].Manifest.ID > l.Backups[j].Manifest.ID })
	sort.Slice(l.Orphans, func(i, j int) bool { return l.Orphans[i].Key < l.Orphans[j].Key })
	return l, nil
}

// manifestReaders bounds the manifests read at once: on S3 each is a GET,
// so a store with thousands of backups lists in seconds, not minutes.
const manifestReaders = 8

// readManifests reads the manifests concurrently; results are in order.
// Manifests in the cache under the same key, size and time are not read
// again; the cache then holds exactly the manifests of objs that parsed.
func (b *Repo) readManifests(ctx context.Context, objs []uploader.ObjectInfo) ([]*Manifest, []error) {
	ms, errs := readDocuments(ctx, objs, manifestReaders, b.cache.manifest, b.readManifest)
	b.cache.keepManifests(objs, ms, errs)
	for i, m := range ms {
		if m != nil {
			c := *m // callers may edit theirs; the cached one stays as read
			ms[i] = &c
		}
	}
	return ms, errs
}

// readManifest reads and parses the manifest at key and checks its
// signature: an untrusted manifest is returned (listings show it) with
// its Untrusted reason set.
func (b *Repo) readManifest(ctx context.Context, key string) (*Manifest, error) {
	return readDocument(ctx, b.Store, key, "manifest", func(data []byte) (*Manifest, error) {
		m, err := ParseManifest(data)
		if err != nil {
			return nil, err
		}
		m.note.unsigned, m.note.untrusted = b.check(kindManifest, key, data)
		return m, nil
	})
}

// readDocuments reads the documents at objs' keys with at most workers
// reads at a time; results and errors are in the order of objs. An object
// for which cached returns a document (the cache holds one under the same
// key, size and time) is not read again.
func readDocuments[T any](ctx context.Context, objs []uploader.ObjectInfo, workers int, cached func(uploader.ObjectInfo) *T, read func(context.Context, string) (*T, error)) ([]*T, []error) {
	docs := make([]*T, len(objs))
	errs := make([]error, len(objs))
	var todo []int
	for i, o := range objs {
		if d := cached(o); d != nil {
			docs[i] = d
			continue
		}
		todo = append(todo, i)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(todo)) {
		wg.Go(func() {
			for i := range next {
				docs[i], errs[i] = read(ctx, objs[i].Key)
			}
		})
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	return docs, errs
}

// readDocument reads a small JSON document (a manifest, a drill report) of
// at most 1 MiB at key and parses it; errors name what and where.
func readDocument[T any](ctx context.Context, st uploader.Store, key, what string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	rc, err := st.Get(ctx, key)
	if err != nil {
		return zero, fmt.Errorf("read %s %s: %w", what, key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return zero, fmt.Errorf("read %s %s: %w", what, key, err)
	}
	v, err := parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s %s: %w", what, key, err)
	}
	return v, nil
}

// Manifest reads backup id's manifest. An untrusted one is an error
// wrapping ErrUntrusted: a backup named explicitly is refused, not
// skipped.
func (b *Repo) Manifest(ctx context.Context, id string) (*Manifest, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("%q is not a backup id (like 20261130T113800Z-r250001) nor \"latest\"", id)
	}
	m, err := b.readManifest(ctx, b.ManifestKey(id))
	if errors.Is(err, uploader.ErrNotFound) {
		return nil, fmt.Errorf("backup %s not found in %s (cluster %q): %w", id, b.Store, b.Cluster, uploader.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if u := m.Untrusted(); u != nil {
		return nil, fmt.Errorf("backup %s: %w", id, u)
	}
	b.warnUnsigned(m)
	return m, nil
}

// Resolve returns the manifest for ref: a backup id or "latest" (the
// newest backup whose data object is present).
func (b *Repo) Resolve(ctx context.Context, ref string) (*Manifest, error) {
	if ref != "latest" {
		return b.Manifest(ctx, ref)
	}
	c, err := b.Candidates(ctx)
	if err != nil {
		return nil, err
	}
	if len(c) == 0 {
		return nil, b.noBackups(ctx, "")
	}
	return c[0], nil
}

// PutManifest writes m's manifest: the commit point of a backup.
func (b *Repo) PutManifest(ctx context.Context, m *Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	data, err := m.Marshal()
	if err != nil {
		return err
	}
	if data, err = b.sign(kindManifest, b.ManifestKey(m.ID), data); err != nil {
		return err
	}
	_, err = b.Store.Put(ctx, b.ManifestKey(m.ID), strings.NewReader(string(data)), b.Lock.Options("application/json"))
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// ErrObjectMismatch is wrapped when a stored object's bytes do not match
// its manifest (size or sha256).
var ErrObjectMismatch = errors.New("stored object does not match its manifest")

// Open returns a reader of backup m's raw snapshot (decrypted with ids and
// decompressed). The stored bytes are hashed as they stream; at the end
// the reader returns an error wrapping ErrObjectMismatch instead of io.EOF
// if their size or sha256 differ from the manifest's, within a
// *DamageError naming the object (damage.go).
func (b *Repo) Open(ctx context.Context, m *Manifest, ids []age.Identity) (io.ReadCloser, error) {
	rc, err := b.Store.Get(ctx, m.Object)
	if err != nil {
		return nil, err
	}
	cr := &checkedReader{r: rc, h: sha256.New(), m: m}
	dec, err := NewDecoder(cr, m.Compression, m.Encryption, ids)
	if err != nil {
		defer rc.Close()
		if errors.Is(err, ErrDecrypt) {
			// The caller names the backup; this says whom it wants.
			if len(m.Recipients) == 0 {
				return nil, fmt.Errorf("%w; give an identity of a recipient it was encrypted to (--identity-file)", err)
			}
			return nil, fmt.Errorf("%w (the manifest names %s); give an identity of one of them (--identity-file)", err, strings.Join(m.Recipients, ", "))
		}
		if errors.Is(err, ErrNoIdentity) {
			return nil, err
		}
		// A header that does not decode: the sha256 says whether the
		// stored bytes are damaged.
		if _, derr := io.Copy(io.Discard, cr); derr == nil {
			if cerr := cr.check(); cerr != nil {
				return nil, damaged(m.Object, fmt.Errorf("%w (decoding failed: %v)", cerr, err))
			}
		}
		return nil, fmt.Errorf("backup %s: %w", m.ID, err)
	}
	return &openReader{dec: dec, cr: cr, rc: rc}, nil
}

type openReader struct {
	dec io.ReadCloser
	cr  *checkedReader
	rc  io.Closer
}

func (o *openReader) Read(p []byte) (int, error) {
	n, err := o.read(p)
	return n, damaged(o.cr.m.Object, err)
}

func (o *openReader) read(p []byte) (int, error) {
	n, err := o.dec.Read(p)
	if err != nil {
		// The decoder's read-ahead, if any, reads cr in a goroutine:
		// stop it before reading cr here.
		if s, ok := o.dec.(interface{ stopReadAhead() }); ok {
			s.stopReadAhead()
		}
	}
	if err == io.EOF {
		// The decoder may stop before the object's end (e.g. trailing
		// bytes): drain so the whole object is hashed and checked.
		if _, derr := io.Copy(io.Discard, o.cr); derr != nil {
			return n, derr
		}
		if cerr := o.cr.check(); cerr != nil {
			return n, cerr
		}
	} else if err != nil {
		// A decoding error usually means the stored bytes are damaged:
		// read the rest so the sha256 can say so precisely.
		if !o.cr.eof {
			io.Copy(io.Discard, o.cr)
		}
		if cerr := o.cr.check(); cerr != nil {
			if errors.Is(err, ErrObjectMismatch) {
				return n, cerr // the decoder read the mismatch itself: say it once
			}
			return n, fmt.Errorf("%w (decoding failed: %v)", cerr, err)
		}
		return n, fmt.Errorf("decode backup %s: %w", o.cr.m.ID, err)
	}
	return n, err
}

func (o *openReader) Close() error {
	// The store's reader first: a read-ahead blocked reading it returns.
	err := o.rc.Close()
	o.dec.Close()
	return err
}

type checkedReader struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	m   *Manifest
	eof bool
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if err == io.EOF {
		c.eof = true
		if cerr := c.check(); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

func (c *checkedReader) check() error {
	if !c.eof {
		return nil
	}
	return checkObject(c.m, c.n, c.h)
}

// checkObject checks the stored object's size n and sha256 h against
// backup m's manifest (ErrObjectMismatch).
func checkObject(m *Manifest, n int64, h hash.Hash) error {
	if n != m.ObjectSize {
		return fmt.Errorf("%w: %s has %d bytes, manifest says %d", ErrObjectMismatch, m.Object, n, m.ObjectSize)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.ObjectSHA256 {
		return fmt.Errorf("%w: %s sha256 %s, manifest says %s", ErrObjectMismatch, m.Object, got, m.ObjectSHA256)
	}
	return nil
}

// UnreadableManifestOf returns the unreadable manifest of the backup
// whose data object is at objectKey, and why it is unreadable; ok is
// false when its manifest is not among Unreadable. Such an object is no
// unfinished upload: its backup's manifest is damaged, truncated or of a
// newer format, and the object is kept.
func (l *Listing) UnreadableManifestOf(objectKey string) (manifestKey, why string, ok bool) {
	id, _, _ := strings.Cut(path.Base(objectKey), ".")
	manifestKey = path.Dir(objectKey) + "/" + id + ".json"
	why, ok = l.UnreadableWhy[manifestKey]
	return manifestKey, why, ok
}
