package repository

import (
	"fmt"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// What the store says is evidence, not truth: with trusted keys
// configured (Repo.Trust), a manifest, drill report, progress marker or
// change segment is taken only when it carries a signature of a trusted
// key over its content and its key. One that does not is untrusted: listed as such
// (StateUntrusted, with why), never resolved as latest, never a drill
// verdict, never a window's progress. An untrusted change segment is
// refused by every reader (ReadSegment, ReadSegmentRaw, compaction,
// VerifyChanges, a replay): the window's run ends before it. A writer
// with a signing key (Repo.Signer) signs every document and segment it
// writes.

// ErrUntrusted is wrapped when a document is not signed by a trusted key
// (not signed, an unknown key, or altered after signing).
// It is signing.ErrUntrusted: kits (package kit) wrap the same.
var ErrUntrusted = signing.ErrUntrusted

// Kinds of signed documents: part of what is signed, so that a signed
// document of one kind never passes for another.
const (
	kindManifest = "manifest"
	kindDrill    = "drill report"
	kindProgress = "progress marker"
	kindSegment  = "change segment"
)

// UntrustedError says which object is untrusted and why.
type UntrustedError struct {
	Key string
	Err error // wraps signing.ErrUnsigned, ErrUnknownKey or ErrBadSignature
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("%s is untrusted: %v (someone without this cluster's signing key wrote it; see docs/security.md)", e.Key, e.Err)
}

// Unwrap returns ErrUntrusted and the signing error.
func (e *UntrustedError) Unwrap() []error { return []error{ErrUntrusted, e.Err} }

// sign returns data signed as kind at key when the Repo has a signer.
func (b *Repo) sign(kind, key string, data []byte) ([]byte, error) {
	if b.Signer == nil {
		return data, nil
	}
	return b.Signer.SignJSON(kind, key, data)
}

// check verifies data, stored at key, as kind against the Repo's trust:
// nil when trusted (or no trust is configured), an *UntrustedError when
// not. unsigned is set when an unsigned document was accepted because
// of AllowUnsigned.
func (b *Repo) check(kind, key string, data []byte) (unsigned bool, err error) {
	v, err := b.Trust.VerifyJSON(kind, key, data)
	if err != nil {
		return false, &UntrustedError{Key: key, Err: err}
	}
	return v.Unsigned, nil
}

// checkSegment verifies a segment's seal (its raw form's sha256 and
// signature), stored at key, against the Repo's trust: nil when trusted
// (or no trust is configured), an *UntrustedError naming key when not.
// An unsigned segment accepted because of AllowUnsigned is logged at
// debug level (a window holds thousands): the backup it extends warns.
func (b *Repo) checkSegment(key string, seal segmentSeal) error {
	if !b.Trust.Enabled() {
		return nil
	}
	v, err := b.Trust.VerifyBytes(kindSegment, key, seal.sum, seal.sig)
	if err != nil {
		return &UntrustedError{Key: key, Err: err}
	}
	if v.Unsigned && b.Log != nil {
		b.Log.Debug("reading an unsigned change segment (signing.allow_unsigned): its origin is not proven", "segment", key)
	}
	return nil
}

// segmentSigner returns the signer of a segment stored at key, nil when
// the Repo signs nothing.
func (b *Repo) segmentSigner(key string) *segmentSigner {
	if b.Signer == nil {
		return nil
	}
	return &segmentSigner{key: b.Signer, at: key}
}

// Signing reports whether readers of this Repo check signatures.
func (b *Repo) Signing() bool { return b.Trust.Enabled() }

// trustNote is what a manifest's check found: empty when trusted.
type trustNote struct {
	untrusted error // *UntrustedError
	unsigned  bool  // accepted unsigned (AllowUnsigned): a warning
}
