package repository

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Damage is a verdict, not an error: when a reader proves a stored object
// damaged (its sha256 does not match, it does not decrypt with the
// configured identities, its signature or chain is broken), it records
// that in the store with RecordDamage, as a signed record at
// <cluster>/damage/<sha256 of the object's key>.json. The record stays
// there, whatever a later reader of other objects finds, until the object
// is gone or replaced (its size or time differs from what the record
// saw): List then calls the record obsolete and prune deletes it.
// A missing identity is not damage (the configuration is wrong), nor is a
// store error or the end of a context.

// DamageFormat is the damage record format this build writes and reads.
const DamageFormat = 1

// Who found damage (Damage.FoundBy).
const (
	FoundByDrill      = "drill"
	FoundByCompaction = "compaction"
	FoundByCopy       = "copy"
	FoundByScrub      = "scrub"
	FoundByVerify     = "verify"
	FoundByRestore    = "restore"
)

var foundBy = []string{FoundByDrill, FoundByCompaction, FoundByCopy, FoundByScrub, FoundByVerify, FoundByRestore}

// kindDamage is the signed kind of damage records.
const kindDamage = "damage record"

// Damage is the record of one stored object proven damaged.
type Damage struct {
	Format  int    `json:"format"`
	Cluster string `json:"cluster"`
	// Object is the damaged object's key; Size, ModTime and SHA256 are
	// what the store's Stat said of it when the damage was recorded
	// (RecordDamage fills them in; SHA256 where the store knows it): the
	// record is obsolete once the object differs.
	Object  string    `json:"object"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time,omitzero"`
	SHA256  string    `json:"sha256,omitempty"`
	// FoundBy is who proved it (FoundByDrill, ...), FoundAt when.
	FoundBy string    `json:"found_by"`
	FoundAt time.Time `json:"found_at"`
	// Error says what is wrong, in words (the reader's error).
	Error string `json:"error"`

	// Key is the record's own key (set when read; not stored).
	Key string `json:"-"`
	// Untrusted says why the record is not signed by a trusted key (set
	// when read with signing configured; not stored). An untrusted record
	// is still shown, but it does not mark a backup broken.
	Untrusted string `json:"-"`
}

func (d *Damage) String() string {
	return fmt.Sprintf("%s is damaged: %s (found by %s at %s)", d.Object, d.Error, d.FoundBy, d.FoundAt.UTC().Format(time.RFC3339))
}

// ErrBadDamage is wrapped by damage record decoding errors.
var ErrBadDamage = errors.New("bad damage record")

// Validate checks the record's fields.
func (d *Damage) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadDamage, fmt.Sprintf(format, a...))
	}
	switch {
	case d.Format != DamageFormat:
		return bad("format %d, this build reads format %d", d.Format, DamageFormat)
	case d.Object == "" || strings.HasSuffix(d.Object, "/"):
		return bad("object key %q", d.Object)
	case !slices.Contains(foundBy, d.FoundBy):
		return bad("found by %q, not one of %s", d.FoundBy, strings.Join(foundBy, ", "))
	case d.FoundAt.IsZero():
		return bad("no time")
	case d.Error == "":
		return bad("no error")
	}
	return nil
}

// ParseDamage decodes and validates a damage record.
func ParseDamage(b []byte) (*Damage, error) {
	var d Damage
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadDamage, err)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

func (b *Repo) damageDir() string { return path.Join(b.Cluster, "damage") + "/" }

// DamageKey returns the key of the damage record of object.
func (b *Repo) DamageKey(object string) string {
	sum := sha256.Sum256([]byte(object))
	return b.damageDir() + hex.EncodeToString(sum[:]) + ".json"
}

// RecordDamage stores d, the proven damage of the object at d.Object (a
// key of this cluster), signed with the Repo's Signer. It fills in
// Format, Cluster, the object's Size and ModTime as the store has it now,
// and FoundAt when zero. An object already gone is not recorded (nil).
// When a current record of the object exists, it stays (the first
// finder's) and RecordDamage returns nil; an obsolete one is replaced.
//
// Callers log a failure (a read-only credential cannot write) and go on
// with the error that proved the damage: recording never replaces it.
func (b *Repo) RecordDamage(ctx context.Context, d Damage) error {
	if !strings.HasPrefix(d.Object, b.Cluster+"/") {
		return fmt.Errorf("record damage of %q: not an object of cluster %q", d.Object, b.Cluster)
	}
	o, err := b.Store.Stat(ctx, d.Object)
	if errors.Is(err, uploader.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record damage of %s: %w", d.Object, err)
	}
	d.Format, d.Cluster, d.Size, d.ModTime, d.SHA256 = DamageFormat, b.Cluster, o.Size, o.ModTime.UTC(), o.SHA256
	if d.FoundAt.IsZero() {
		d.FoundAt = time.Now().UTC()
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("record damage of %s: %w", d.Object, err)
	}
	data, err := json.MarshalIndent(&d, "", "  ")
	if err != nil {
		return err
	}
	key := b.DamageKey(d.Object)
	if data, err = b.sign(kindDamage, key, append(data, '\n')); err != nil {
		return err
	}
	return b.putDamage(ctx, key, data, o)
}

// putDamage writes a record at key, replacing an obsolete one. Records
// are not locked (Repo.Lock): one goes when its object is replaced, and
// what a record says any reader finds again in the object itself.
func (b *Repo) putDamage(ctx context.Context, key string, data []byte, o uploader.ObjectInfo) error {
	for range 2 {
		_, err := b.Store.Put(ctx, key, bytes.NewReader(data), uploader.PutOptions{ContentType: "application/json"})
		if !errors.Is(err, uploader.ErrExists) {
			if err != nil {
				return fmt.Errorf("write damage record %s: %w", key, err)
			}
			return nil
		}
		old, rerr := b.readDamage(ctx, key)
		if rerr == nil && damageCurrent(old, o) {
			return nil
		}
		if err := b.Store.Delete(ctx, key); err != nil {
			return fmt.Errorf("replace damage record %s: %w", key, err)
		}
	}
	return fmt.Errorf("write damage record %s: %w", key, uploader.ErrExists)
}

// readDamage reads the record at key; an untrusted one is returned with
// Untrusted set.
func (b *Repo) readDamage(ctx context.Context, key string) (*Damage, error) {
	return readDocument(ctx, b.Store, key, "damage record", func(data []byte) (*Damage, error) {
		d, err := ParseDamage(data)
		if err != nil {
			return nil, err
		}
		d.Key = key
		if _, err := b.check(kindDamage, key, data); err != nil {
			d.Untrusted = err.(*UntrustedError).Err.Error()
		}
		return d, nil
	})
}

// damageCurrent reports whether d was recorded of the object o as it is
// stored now: the same size and, where the store's Stat gives them (both
// come from Stat, so with one precision), the same time and sha256.
func damageCurrent(d *Damage, o uploader.ObjectInfo) bool {
	switch {
	case d.Size != o.Size:
		return false
	case !d.ModTime.IsZero() && !o.ModTime.IsZero() && !d.ModTime.Equal(o.ModTime):
		return false
	case d.SHA256 != "" && o.SHA256 != "" && d.SHA256 != o.SHA256:
		return false
	}
	return true
}

// DamageRecords is what the damage area holds.
type DamageRecords struct {
	// Current are the records of objects stored as the record saw them,
	// sorted by object key.
	Current []Damage
	// Obsolete are records whose object is gone or changed: prune
	// deletes them.
	Obsolete []uploader.ObjectInfo
	// Unreadable are records that could not be parsed: kept and shown
	// (they may name damage), never deleted by prune.
	Unreadable []uploader.ObjectInfo
}

// ReadDamage reads every damage record of the cluster and sorts them into
// current, obsolete and unreadable: one listing, then one read and one
// Stat of the object per record. A store error fails the call.
func (b *Repo) ReadDamage(ctx context.Context) (*DamageRecords, error) {
	var objs []uploader.ObjectInfo
	err := b.Store.List(ctx, b.damageDir(), func(o uploader.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".json") {
			objs = append(objs, o)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list damage records: %w", err)
	}
	out := &DamageRecords{}
	for _, ro := range objs {
		d, err := b.readDamage(ctx, ro.Key)
		switch {
		case errors.Is(err, uploader.ErrNotFound):
			continue // deleted while listing
		case errors.Is(err, ErrBadDamage):
			out.Unreadable = append(out.Unreadable, ro)
			continue
		case err != nil:
			return nil, err
		}
		o, err := b.Store.Stat(ctx, d.Object)
		switch {
		case errors.Is(err, uploader.ErrNotFound) || err == nil && !damageCurrent(d, o):
			out.Obsolete = append(out.Obsolete, ro)
		case err != nil:
			return nil, fmt.Errorf("damage record %s: %w", ro.Key, err)
		default:
			out.Current = append(out.Current, *d)
		}
	}
	sort.Slice(out.Current, func(i, j int) bool { return out.Current[i].Object < out.Current[j].Object })
	return out, nil
}

// DamageOf returns the current damage record of the object at key, nil
// when there is none.
func (l *Listing) DamageOf(key string) *Damage {
	if l == nil || l.Damage == nil {
		return nil
	}
	for i := range l.Damage.Current {
		if l.Damage.Current[i].Object == key {
			return &l.Damage.Current[i]
		}
	}
	return nil
}

// DamageError is a reader's proof that the stored object at Key is
// damaged: its bytes do not match their checksum (ErrBadSegment,
// ErrObjectMismatch), they do not decrypt or decompress although the
// header opened with the configured identities, or its signature does
// not verify over them (signing.ErrBadSignature). Readers of segments
// (ReadSegment, ReadSegmentRaw, compaction, VerifyChanges) and of backups
// (Open) return one; its text is Err's.
//
// Not damage: a header no configured identity opens (ErrDecrypt: age
// cannot tell a wrong key from a damaged stanza, so it is the
// configuration's problem until proven otherwise, exit 2), no identity
// (ErrNoIdentity), an unsigned object or one signed by an unknown key
// (untrusted: someone else wrote it), a store error, a cancelled context.
type DamageError struct {
	Key string
	Err error
}

func (e *DamageError) Error() string { return e.Err.Error() }

// Unwrap returns the reader's error.
func (e *DamageError) Unwrap() error { return e.Err }

// IsDamage reports whether err proves a stored object damaged (wraps a
// *DamageError).
func IsDamage(err error) bool {
	var de *DamageError
	return errors.As(err, &de)
}

// AsDamage returns the *DamageError err wraps, nil when it wraps none.
func AsDamage(err error) *DamageError {
	var de *DamageError
	if errors.As(err, &de) {
		return de
	}
	return nil
}

// damaged wraps err, an error reading the object at key, in a
// *DamageError when it proves damage: ErrBadSegment, ErrObjectMismatch or
// a bad signature. Other errors are returned as they are.
func damaged(key string, err error) error {
	if err == nil || IsDamage(err) {
		return err
	}
	if errors.Is(err, ErrBadSegment) || errors.Is(err, ErrObjectMismatch) || errors.Is(err, signing.ErrBadSignature) {
		return &DamageError{Key: key, Err: err}
	}
	return err
}

// NoteDamage records the damage err proves (when it wraps a
// *DamageError), found by foundBy. It returns the error of recording it
// (nil when err proves nothing), for the caller to log: the caller goes
// on with err either way (read-only credentials cannot record).
func (b *Repo) NoteDamage(ctx context.Context, err error, foundBy string) error {
	de := AsDamage(err)
	if de == nil {
		return nil
	}
	if rerr := b.RecordDamage(ctx, Damage{Object: de.Key, FoundBy: foundBy, Error: de.Err.Error()}); rerr != nil {
		return fmt.Errorf("record the damage of %s: %w", de.Key, rerr)
	}
	return nil
}

// SegmentDamage returns the damage err proves in one of segs (a replay's
// or a compaction's segments): the *DamageError err wraps, or, for
// ErrBadSegment without one (a replay child's error crosses a process
// boundary as text) or a chain whose link names the wrong hash
// (ChainBadHash: a stored segment is not what its successor was chained
// to), one naming the segment whose key the error names.
func SegmentDamage(err error, segs []SegmentInfo) *DamageError {
	if de := AsDamage(err); de != nil {
		return de
	}
	var ce *ChainError
	if errors.As(err, &ce) && ce.Problem == ChainBadHash {
		return &DamageError{Key: ce.Key, Err: err}
	}
	if !errors.Is(err, ErrBadSegment) {
		return nil
	}
	for _, s := range segs {
		if strings.Contains(err.Error(), s.Object.Key) {
			return &DamageError{Key: s.Object.Key, Err: err}
		}
	}
	return nil
}
