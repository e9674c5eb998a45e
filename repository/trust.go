package repository

import (
	"fmt"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// What the store says is evidence, not truth: with trusted keys
// configured (Repo.Trust), a manifest, drill report or progress marker is
// taken only when it carries a signature of a trusted key over its
// content and its key. One that does not is untrusted: listed as such
// (StateUntrusted, with why), never resolved as latest, never a drill
// verdict, never a window's progress. A writer with a signing key
// (Repo.Signer) signs every document it writes.

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

// Signing reports whether readers of this Repo check signatures.
func (b *Repo) Signing() bool { return b.Trust.Enabled() }

// trustNote is what a manifest's check found: empty when trusted.
type trustNote struct {
	untrusted error // *UntrustedError
	unsigned  bool  // accepted unsigned (AllowUnsigned): a warning
}
