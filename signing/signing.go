package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// Errors a reader branches on (wrapped, test with errors.Is).
var (
	// ErrUntrusted is what every reader's refusal of a document not
	// signed by a trusted key wraps, beside its reason below.
	ErrUntrusted = errors.New("untrusted")
	// ErrUnsigned: the document carries no signature.
	ErrUnsigned = errors.New("not signed")
	// ErrUnknownKey: signed by a key that is not trusted.
	ErrUnknownKey = errors.New("signed by a key that is not trusted")
	// ErrBadSignature: the signature does not match the content (altered
	// after signing, moved to another key, or forged).
	ErrBadSignature = errors.New("signature does not match the content (altered after signing)")
)

// publicPrefix starts a public key's text form.
const publicPrefix = "lifeboat-ed25519:"

// pemType is the PEM block type of a signing key file (PKCS #8, which
// openssl reads too).
const pemType = "PRIVATE KEY"

// Key is a signing key: an ed25519 private key. Its String never shows
// the private part.
type Key struct {
	priv ed25519.PrivateKey
	pub  PublicKey
}

// PublicKey is a trusted (or signing) public key.
type PublicKey struct {
	key ed25519.PublicKey
}

// Generate returns a new random signing key.
func Generate() (*Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	return &Key{priv: priv, pub: PublicKey{pub}}, nil
}

// Public returns the key's public key.
func (k *Key) Public() PublicKey { return k.pub }

// String names the key by its public key's ID, never its private part.
func (k *Key) String() string { return "signing key " + k.pub.ID() }

// LogValue keeps the private part out of logs (slog.LogValuer).
func (k *Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Marshal returns the key file's content (PEM, PKCS #8).
func (k *Key) Marshal() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return nil, fmt.Errorf("encode signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der}), nil
}

// ParseKey reads a signing key file's content. Errors never include the
// content.
func ParseKey(data []byte) (*Key, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != pemType {
		return nil, errors.New("not a signing key (want a PEM \"PRIVATE KEY\" block, as `lifeboat keygen -o FILE` writes)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("not a signing key: the PEM block is not a PKCS #8 private key")
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("not a signing key: a %T, lifeboat signs with ed25519", k)
	}
	return &Key{priv: priv, pub: PublicKey{priv.Public().(ed25519.PublicKey)}}, nil
}

// LoadKey reads the signing key file at path.
func LoadKey(path string) (*Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return k, nil
}

// ExistsError is WriteKey's refusal to replace the file at Path; it
// wraps fs.ErrExist (a caller's usage error, not a failure).
type ExistsError struct{ Path string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("write signing key: %s already exists (lifeboat never replaces a key; print its public key with `lifeboat keygen -y %s`)", e.Path, e.Path)
}

// Unwrap returns fs.ErrExist.
func (e *ExistsError) Unwrap() error { return os.ErrExist }

// WriteKey writes k to path, mode 0600, refusing to replace a file (a
// signing key overwritten by mistake would orphan every trusted reader).
// The file is written to a temporary name, synced and linked into place.
func WriteKey(path string, k *Key) error {
	data, err := k.Marshal()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".lifeboat-key-*")
	if err != nil {
		return fmt.Errorf("write signing key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write signing key: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write signing key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write signing key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write signing key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return &ExistsError{Path: path}
		}
		return fmt.Errorf("write signing key: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// String is the public key's one-line text form, the value of
// signing.trusted_keys.
func (p PublicKey) String() string {
	return publicPrefix + base64.StdEncoding.EncodeToString(p.key)
}

// ID is a short fingerprint of the public key (16 hex digits), recorded
// in every signature and shown in errors.
func (p PublicKey) ID() string {
	sum := sha256.Sum256(p.key)
	return hex.EncodeToString(sum[:8])
}

// Equal reports whether p and q are the same key.
func (p PublicKey) Equal(q PublicKey) bool { return p.key.Equal(q.key) }

// ParsePublicKey parses a public key's text form (PublicKey.String).
func ParsePublicKey(s string) (PublicKey, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, publicPrefix)
	if !ok {
		return PublicKey{}, fmt.Errorf("%q is not a lifeboat public key (want %s… as `lifeboat keygen` prints)", abbreviate(s), publicPrefix)
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return PublicKey{}, fmt.Errorf("%q is not a lifeboat public key: want %d bytes of base64 after %s", abbreviate(s), ed25519.PublicKeySize, publicPrefix)
	}
	return PublicKey{ed25519.PublicKey(b)}, nil
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

// Signature is the "signature" member of a signed JSON document.
type Signature struct {
	// KeyID names the signing key (PublicKey.ID).
	KeyID string `json:"key_id"`
	// Ed25519 is the signature, base64.
	Ed25519 string `json:"ed25519"`
}

// member is the name of the signature's member in a JSON document.
const member = "signature"

// message is what is signed: a domain, the kind of document, the key it
// is stored at and its canonical content.
func message(kind, key string, content []byte) []byte {
	var b bytes.Buffer
	b.WriteString("lifeboat-signature-v1\n")
	b.WriteString(kind)
	b.WriteByte('\n')
	b.WriteString(key)
	b.WriteByte('\n')
	b.Write(content)
	return b.Bytes()
}

// canonical returns doc (a JSON object) without its signature member, its
// top-level members sorted and every value compacted, and the signature
// member when there is one.
func canonical(doc []byte) ([]byte, *Signature, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var sig *Signature
	if raw, ok := m[member]; ok {
		sig = &Signature{}
		if err := json.Unmarshal(raw, sig); err != nil {
			return nil, nil, fmt.Errorf("%w: unreadable signature member", ErrBadSignature)
		}
		delete(m, member)
	}
	c, err := json.Marshal(m) // maps marshal with sorted keys; values compacted
	if err != nil {
		return nil, nil, err
	}
	return c, sig, nil
}

// SignJSON returns doc (a JSON object, as marshalled by the writer) with a
// "signature" member added last: k's signature over kind, the object key
// the document is stored at and its canonical content. The writer's
// member order and indentation are kept; doc must not be signed already.
func (k *Key) SignJSON(kind, key string, doc []byte) ([]byte, error) {
	c, had, err := canonical(doc)
	if err != nil {
		return nil, fmt.Errorf("sign %s %s: %w", kind, key, err)
	}
	if had != nil {
		return nil, fmt.Errorf("sign %s %s: already signed", kind, key)
	}
	sig := Signature{KeyID: k.pub.ID(), Ed25519: base64.StdEncoding.EncodeToString(ed25519.Sign(k.priv, message(kind, key, c)))}
	sb, err := json.Marshal(sig)
	if err != nil {
		return nil, err
	}
	body := bytes.TrimRight(doc, " \t\r\n")
	if len(body) == 0 || body[len(body)-1] != '}' {
		return nil, fmt.Errorf("sign %s %s: not a JSON object", kind, key)
	}
	body = bytes.TrimRight(body[:len(body)-1], " \t\r\n")
	var out bytes.Buffer
	out.Write(body)
	if !bytes.HasSuffix(body, []byte("{")) {
		out.WriteString(",")
	}
	out.WriteString("\n  \"" + member + "\": ")
	out.Write(sb)
	out.WriteString("\n}\n")
	return out.Bytes(), nil
}

// Trust is a reader's policy: the public keys it trusts and whether
// unsigned documents are tolerated. A nil Trust, or one without keys,
// checks nothing (lifeboat without signing configured).
type Trust struct {
	// Keys are the trusted public keys (signing.trusted_keys, plus the
	// writer's own).
	Keys []PublicKey
	// AllowUnsigned tolerates documents without a signature (a store
	// written before signing was configured); signed ones must still
	// verify.
	AllowUnsigned bool
}

// Enabled reports whether t checks signatures at all.
func (t *Trust) Enabled() bool { return t != nil && len(t.Keys) > 0 }

// Verdict is what Verify found out about an accepted document.
type Verdict struct {
	// KeyID is the key that signed it ("" when unsigned or unchecked).
	KeyID string
	// Unsigned is set when the document had no signature and was
	// accepted because of AllowUnsigned (a warning for the reader).
	Unsigned bool
}

// VerifyJSON checks doc, stored at key, as a document of kind. It returns
// an error wrapping ErrUnsigned, ErrUnknownKey or ErrBadSignature when the
// document is not to be trusted; with a Trust that is not Enabled every
// document is accepted unchecked.
func (t *Trust) VerifyJSON(kind, key string, doc []byte) (Verdict, error) {
	if !t.Enabled() {
		return Verdict{}, nil
	}
	c, sig, err := canonical(doc)
	if err != nil {
		if errors.Is(err, ErrBadSignature) {
			return Verdict{}, err
		}
		return Verdict{}, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return t.verify(kind, key, c, sig)
}

func (t *Trust) verify(kind, key string, content []byte, sig *Signature) (Verdict, error) {
	if sig == nil {
		if t.AllowUnsigned {
			return Verdict{Unsigned: true}, nil
		}
		return Verdict{}, ErrUnsigned
	}
	raw, err := base64.StdEncoding.DecodeString(sig.Ed25519)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return Verdict{}, fmt.Errorf("%w: malformed signature", ErrBadSignature)
	}
	for _, p := range t.Keys {
		if p.ID() != sig.KeyID {
			continue
		}
		if ed25519.Verify(p.key, message(kind, key, content), raw) {
			return Verdict{KeyID: sig.KeyID}, nil
		}
		return Verdict{}, fmt.Errorf("%w (key %s)", ErrBadSignature, sig.KeyID)
	}
	return Verdict{}, fmt.Errorf("%w (key %s)", ErrUnknownKey, sig.KeyID)
}

// SignBytes signs a binary object's digest (its sha256) as kind at key;
// the result is a Signature to store with the object.
func (k *Key) SignBytes(kind, key string, sha256sum []byte) Signature {
	return Signature{KeyID: k.pub.ID(), Ed25519: base64.StdEncoding.EncodeToString(ed25519.Sign(k.priv, message(kind, key, sha256sum)))}
}

// VerifyBytes checks a binary object's signature (nil when it has none)
// over its sha256 digest, with the same policy as VerifyJSON.
func (t *Trust) VerifyBytes(kind, key string, sha256sum []byte, sig *Signature) (Verdict, error) {
	if !t.Enabled() {
		return Verdict{}, nil
	}
	return t.verify(kind, key, sha256sum, sig)
}
