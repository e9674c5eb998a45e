// Package signing is lifeboat's authenticity layer: ed25519 signing keys
// (generated, stored 0600, parsed), their public keys as configured by
// readers (never taken from a store), and signatures over the small JSON
// documents that describe a store's content (backup manifests, drill
// reports, progress markers, kit manifests) and over the bytes of binary
// objects (change segments).
//
// A signature binds three things: the kind of document, the key of the
// object it is stored at (relative to the store's root, so that a copy,
// which keeps keys, keeps its signatures, while a document moved to
// another key no longer verifies) and the document's content. For JSON
// the content is the document with its "signature" member removed, its
// top-level members sorted and compacted: a reader that does not know a
// field a newer writer added still verifies the whole document.
//
// Trust is a reader's policy: the public keys it trusts and whether an
// unsigned document (a store written before signing) is tolerated.
// Verify reports why a document is not trusted with errors a caller can
// branch on (ErrUnsigned, ErrUnknownKey, ErrBadSignature).
//
// It does not decide what an untrusted object means for a listing, a
// restore or a prune: repository and the jobs do.
package signing
