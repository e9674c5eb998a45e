package kit

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"

	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// ManifestFormat is the kit manifest format this build writes and reads.
const ManifestFormat = 1

// Manifest describes one stored kit. It is written last, after the
// object: a kit exists exactly when its manifest does. It holds no secret.
type Manifest struct {
	Format int `json:"format"`
	// ID is IDFor(ContentSHA256, Recipients): one kit per content and
	// recipient set. In a kit stored before ids covered the recipients,
	// ContentSHA256 is empty and ID is the content's sha256.
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	// ContentSHA256 is the sha256 of the plaintext archive (ID(archive)).
	ContentSHA256 string `json:"content_sha256,omitempty"`
	// CreatedAt is when this kit was first stored.
	CreatedAt time.Time `json:"created_at"`
	// Paths are the kit.paths it was collected from (presets or paths).
	Paths []string `json:"paths"`
	// Object is the key of the encrypted archive; ObjectSize and
	// ObjectSHA256 describe its stored bytes.
	Object       string   `json:"object"`
	ObjectSize   int64    `json:"object_size"`
	ObjectSHA256 string   `json:"object_sha256"`
	Compression  string   `json:"compression"` // "zstd"
	Encryption   string   `json:"encryption"`  // "age"
	Recipients   []string `json:"recipients"`
	// Files are the entries without their content.
	Files []Entry `json:"files"`
	// Certificates are the certificates found in the files.
	Certificates []Certificate `json:"certificates,omitempty"`
	AgentVersion string        `json:"agent_version,omitempty"`
}

// ErrNotFound is wrapped when a kit is not in the store.
var ErrNotFound = errors.New("recovery kit not found")

// ErrNoRecipients is returned when a kit would be stored unencrypted.
var ErrNoRecipients = errors.New("a recovery kit holds the cluster's keys and is stored only encrypted: set encryption.recipients (or encryption.recipients_file)")

// ErrNoIdentity is wrapped when a kit is read without an identity.
var ErrNoIdentity = errors.New("a recovery kit is encrypted: an age identity is needed (--identity-file)")

// ErrDecrypt is wrapped when no given identity decrypts a kit.
var ErrDecrypt = errors.New("cannot decrypt the recovery kit with the given identity")

// ParseManifest decodes and validates a kit manifest (errors wrap ErrBadKit).
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, bad("manifest: %v", err)
	}
	switch {
	case m.Format != ManifestFormat:
		return nil, bad("manifest format %d, this build reads format %d", m.Format, ManifestFormat)
	case !ValidID(m.ID):
		return nil, bad("manifest id %q is not a sha256", m.ID)
	case m.Object == "" || strings.Contains(m.Object, "..") || !strings.HasPrefix(path.Base(m.Object), m.ID+"-"):
		return nil, bad("manifest %s: object key %q", m.ID, m.Object)
	case len(m.ObjectSHA256) != 64 || m.ObjectSize <= 0:
		return nil, bad("manifest %s: object size %d, sha256 %q", m.ID, m.ObjectSize, m.ObjectSHA256)
	case m.Encryption != "age" || len(m.Recipients) == 0:
		return nil, bad("manifest %s: encryption %q with %d recipients: a kit is stored only encrypted with age", m.ID, m.Encryption, len(m.Recipients))
	case m.Compression != "zstd":
		return nil, bad("manifest %s: compression %q", m.ID, m.Compression)
	case m.ContentSHA256 != "" && (!ValidID(m.ContentSHA256) || IDFor(m.ContentSHA256, m.Recipients) != m.ID):
		return nil, bad("manifest %s: the id is not that of content %q for recipients %s", m.ID, m.ContentSHA256, strings.Join(m.Recipients, ", "))
	}
	return &m, nil
}

// Repo is the kit area of one cluster in a store.
type Repo struct {
	Store   uploader.Store
	Cluster string
	// Signer, when set, signs the kit manifests Put writes.
	Signer *signing.Key
	// Trust checks kit manifests on read: with trusted keys, a manifest
	// not signed by one is untrusted (an error wrapping
	// signing.ErrUntrusted; List keeps it apart in Untrusted) and its kit
	// is never loaded, shown as good or laid back by kit restore.
	Trust *signing.Trust
	// Lock is the Object Lock Put requests on a kit's object and
	// manifest, from the time it is given; a kit the store holds already
	// has its retention extended to that far (see extendLock).
	Lock uploader.Retention
}

// kindManifest is what a kit manifest's signature says it is.
const kindManifest = "kit manifest"

// Dir returns the prefix of the kit area: "<cluster>/kits/".
func (r Repo) Dir() string { return path.Join(r.Cluster, "kits") + "/" }

// ManifestKey returns the key of kit id's manifest.
func (r Repo) ManifestKey(id string) string { return r.Dir() + id + ".json" }

// Encryption is whom kits are encrypted to.
type Encryption struct {
	Recipients []age.Recipient
	// RecipientKeys are the public keys as the manifest records them.
	RecipientKeys []string
}

// PutResult is what Put did.
type PutResult struct {
	Manifest *Manifest
	// Stored is false when the kit was already in the store.
	Stored bool
}

// Put stores k unless the store already holds a kit with its content
// encrypted to the same recipient set (the id covers both, IDFor: a new
// recipient set stores the kit again, encrypted to it alone): the
// encrypted object first, then its manifest (conditionally: of two
// writers of one kit the first manifest wins, the other deletes its
// object). paths, now and version go into a new manifest.
func (r Repo) Put(ctx context.Context, k *Kit, enc Encryption, paths []string, now time.Time, version string) (PutResult, error) {
	if len(enc.Recipients) == 0 || len(enc.RecipientKeys) == 0 {
		return PutResult{}, ErrNoRecipients
	}
	archive, err := k.Archive()
	if err != nil {
		return PutResult{}, err
	}
	content := ID(archive)
	recipients := RecipientSet(enc.RecipientKeys)
	id := IDFor(content, recipients)
	if m, err := r.Manifest(ctx, id); err == nil {
		if err := r.extendLock(ctx, m, now); err != nil {
			return PutResult{}, err
		}
		return PutResult{Manifest: m}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return PutResult{}, err
	}
	var buf bytes.Buffer
	aw, err := age.Encrypt(&buf, enc.Recipients...)
	if err != nil {
		return PutResult{}, fmt.Errorf("store kit %s: age: %w", id, err)
	}
	zw, err := zstd.NewWriter(aw, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return PutResult{}, fmt.Errorf("store kit %s: zstd: %w", id, err)
	}
	if _, err := zw.Write(archive); err != nil {
		return PutResult{}, fmt.Errorf("store kit %s: zstd: %w", id, err)
	}
	if err := errors.Join(zw.Close(), aw.Close()); err != nil {
		return PutResult{}, fmt.Errorf("store kit %s: encode: %w", id, err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	key := r.Dir() + id + "-" + hex.EncodeToString(suffix[:]) + ".tar.zst.age"
	obj, err := r.Store.Put(ctx, key, bytes.NewReader(buf.Bytes()), r.Lock.Options(now, "application/octet-stream"))
	if err != nil {
		return PutResult{}, fmt.Errorf("store kit %s: %w", id, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	m := &Manifest{
		Format: ManifestFormat, ID: id, Cluster: r.Cluster, ContentSHA256: content, CreatedAt: now.UTC(),
		Paths: slices.Clone(paths), Object: key, ObjectSize: obj.Size, ObjectSHA256: hex.EncodeToString(sum[:]),
		Compression: "zstd", Encryption: "age", Recipients: recipients,
		Files: k.Files(), Certificates: k.Certificates(), AgentVersion: version,
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return PutResult{}, fmt.Errorf("store kit %s: %w", id, err)
	}
	b = append(b, '\n')
	if r.Signer != nil {
		if b, err = r.Signer.SignJSON(kindManifest, r.ManifestKey(id), b); err != nil {
			return PutResult{}, fmt.Errorf("store kit %s: %w", id, err)
		}
	}
	if _, err := r.Store.Put(ctx, r.ManifestKey(id), bytes.NewReader(b), r.Lock.Options(now, "application/json")); err != nil {
		if errors.Is(err, uploader.ErrExists) {
			// Another writer committed the same kit first: keep theirs.
			_ = r.Store.Delete(ctx, key) // else an orphan, for prune
			theirs, merr := r.Manifest(ctx, id)
			if merr != nil {
				return PutResult{}, merr
			}
			return PutResult{Manifest: theirs}, nil
		}
		return PutResult{}, fmt.Errorf("commit kit %s: %w (its object %s is left as an orphan)", id, err, key)
	}
	return PutResult{Manifest: m, Stored: true}, nil
}

// Files returns the entries without their content.
func (k *Kit) Files() []Entry {
	fs := make([]Entry, len(k.Entries))
	for i, e := range k.Entries {
		e.Data = nil
		fs[i] = e
	}
	return fs
}

// Manifest reads kit id's manifest.
func (r Repo) Manifest(ctx context.Context, id string) (*Manifest, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("kit id %q: %w", id, ErrBadKit)
	}
	b, err := r.readSmall(ctx, r.ManifestKey(id), 4<<20)
	if err != nil {
		return nil, err
	}
	if _, err := r.Trust.VerifyJSON(kindManifest, r.ManifestKey(id), b); err != nil {
		return nil, fmt.Errorf("%w: kit manifest %s: %w (someone without this cluster's signing key wrote it; see docs/security.md)", signing.ErrUntrusted, r.ManifestKey(id), err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("kit %s: %w", id, err)
	}
	if m.ID != id {
		return nil, bad("manifest %s names kit %s", r.ManifestKey(id), m.ID)
	}
	return m, nil
}

func (r Repo) readSmall(ctx context.Context, key string, limit int64) ([]byte, error) {
	rc, err := r.Store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, uploader.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, bad("%s is larger than %d bytes", key, limit)
	}
	return b, nil
}

// Listing is the kit area: committed kits (oldest first) and the objects
// no manifest names.
type Listing struct {
	Kits []*Manifest
	// Unreadable are manifests that do not parse.
	Unreadable []uploader.ObjectInfo
	// Untrusted are manifests not signed by a trusted key (with the
	// Repo's Trust): never kits, never deleted as orphans' owners.
	Untrusted []uploader.ObjectInfo
	// Orphans are objects no manifest names (unfinished puts).
	Orphans []uploader.ObjectInfo
	// ManifestInfo is each kit manifest's object, by kit id.
	ManifestInfo map[string]uploader.ObjectInfo
}

// List reads every kit manifest of the cluster.
func (r Repo) List(ctx context.Context) (*Listing, error) {
	var manifests, objects []uploader.ObjectInfo
	err := r.Store.List(ctx, r.Dir(), func(o uploader.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".json") {
			manifests = append(manifests, o)
		} else {
			objects = append(objects, o)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list kits: %w", err)
	}
	l := &Listing{ManifestInfo: map[string]uploader.ObjectInfo{}}
	named := map[string]bool{}
	for _, mo := range manifests {
		id := strings.TrimSuffix(path.Base(mo.Key), ".json")
		m, err := r.Manifest(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // deleted meanwhile
		case errors.Is(err, ErrBadKit):
			l.Unreadable = append(l.Unreadable, mo)
			continue
		case errors.Is(err, signing.ErrUntrusted):
			l.Untrusted = append(l.Untrusted, mo)
			continue
		case err != nil:
			return nil, err
		}
		l.Kits = append(l.Kits, m)
		l.ManifestInfo[id] = mo
		named[m.Object] = true
	}
	for _, o := range objects {
		if !named[o.Key] {
			l.Orphans = append(l.Orphans, o)
		}
	}
	slices.SortStableFunc(l.Kits, func(a, b *Manifest) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return l, nil
}

// Latest returns the newest kit's manifest.
func (l *Listing) Latest() (*Manifest, error) {
	if len(l.Kits) == 0 {
		return nil, fmt.Errorf("no kit in the store: %w", ErrNotFound)
	}
	return l.Kits[len(l.Kits)-1], nil
}

// Find returns the kit whose id is id or starts with id (at least 8
// characters, unambiguous), or the latest for "latest".
func (l *Listing) Find(id string) (*Manifest, error) {
	if id == "latest" || id == "" {
		return l.Latest()
	}
	var found *Manifest
	for _, m := range l.Kits {
		if m.ID == id {
			return m, nil
		}
		if len(id) >= 8 && strings.HasPrefix(m.ID, id) {
			if found != nil {
				return nil, fmt.Errorf("kit %s: ambiguous, give more of the id", id)
			}
			found = m
		}
	}
	if found == nil {
		for _, o := range l.Untrusted {
			if uid := strings.TrimSuffix(path.Base(o.Key), ".json"); uid == id || len(id) >= 8 && strings.HasPrefix(uid, id) {
				return nil, fmt.Errorf("%w: kit %s: its manifest %s is not signed by a trusted key; refusing it (docs/security.md)", signing.ErrUntrusted, id, o.Key)
			}
		}
		return nil, fmt.Errorf("kit %s: %w", id, ErrNotFound)
	}
	return found, nil
}

// Load fetches, checks, decrypts and parses the kit m describes: the
// object's size and sha256 against the manifest, the archive's sha256
// against ContentSHA256 (against the id in a kit stored before ids
// covered the recipients), then Parse.
func (r Repo) Load(ctx context.Context, m *Manifest, ids []age.Identity) (*Kit, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("kit %s: %w", m.ID, ErrNoIdentity)
	}
	b, err := r.readSmall(ctx, m.Object, MaxKitBytes+(1<<20))
	if err != nil {
		return nil, fmt.Errorf("kit %s: %w", m.ID, err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != m.ObjectSize || hex.EncodeToString(sum[:]) != m.ObjectSHA256 {
		return nil, bad("kit %s: object %s has %d bytes of sha256 %x, its manifest says %d bytes of %s", m.ID, m.Object, len(b), sum, m.ObjectSize, m.ObjectSHA256)
	}
	ar, err := age.Decrypt(bytes.NewReader(b), ids...)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return nil, fmt.Errorf("kit %s: %w (it is encrypted to %s)", m.ID, ErrDecrypt, strings.Join(m.Recipients, ", "))
		}
		return nil, bad("kit %s: age: %v", m.ID, err)
	}
	zr, err := zstd.NewReader(ar, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxKitBytes+(1<<20)))
	if err != nil {
		return nil, bad("kit %s: zstd: %v", m.ID, err)
	}
	defer zr.Close()
	archive, err := io.ReadAll(io.LimitReader(zr, MaxKitBytes+1))
	if err != nil {
		return nil, bad("kit %s: decode: %v", m.ID, err)
	}
	want := m.ContentSHA256
	if want == "" {
		want = m.ID
	}
	if got := ID(archive); got != want {
		return nil, bad("kit %s: its content has sha256 %s, its manifest says %s", m.ID, got, want)
	}
	k, err := Parse(archive)
	if err != nil {
		return nil, fmt.Errorf("kit %s: %w", m.ID, err)
	}
	return k, nil
}

// retentionExtender is a store whose objects' Object Lock retention can be
// extended (uploader.S3); the Dir store has no locks.
type retentionExtender interface {
	ExtendRetention(ctx context.Context, key, mode string, until time.Time) error
}

// extendLock makes the lock of kit m's object and manifest last as long
// as that of a kit stored at now: a newer backup that names a kit the
// store already holds needs it for as long as its own data.
func (r Repo) extendLock(ctx context.Context, m *Manifest, now time.Time) error {
	x, ok := r.Store.(retentionExtender)
	if !ok || r.Lock.Mode == "" {
		return nil
	}
	until := r.Lock.Until(now)
	for _, key := range []string{m.Object, r.ManifestKey(m.ID)} {
		if err := x.ExtendRetention(ctx, key, r.Lock.Mode, until); err != nil {
			return fmt.Errorf("kit %s: %w", m.ID, err)
		}
	}
	return nil
}
