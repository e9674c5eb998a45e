package inspect

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/nacl/secretbox"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Encryption at rest as kube-apiserver writes it (k8s.io/apiserver's
// storage/value/encrypt and server/options/encryptionconfig): a value is
// "k8s:enc:<provider>:v1:<key name>:" followed by
//   - aescbc: a 16-byte IV, then AES-CBC of the data with PKCS#7 padding;
//   - aesgcm: a 12-byte nonce, then AES-GCM sealed data, authenticated
//     with the etcd key the value is stored under;
//   - secretbox: a 24-byte nonce, then NaCl secretbox sealed data (32-byte key).
//
// kms (v1 and v2) wraps a data key with an external KMS: it cannot be
// decrypted offline. The keys are the base64 secrets of the
// EncryptionConfiguration file.

var encPrefix = []byte("k8s:enc:")

type encrypted struct {
	provider string // aescbc, aesgcm, secretbox, kms
	version  string // v1, v2
	key      string // key name (provider name for kms)
	data     []byte
}

func parseEncrypted(v []byte) (encrypted, error) {
	rest, ok := bytes.CutPrefix(v, encPrefix)
	if !ok {
		return encrypted{}, errors.New("not encrypted")
	}
	parts := bytes.SplitN(rest, []byte(":"), 4)
	if len(parts) != 4 {
		return encrypted{}, errors.New("malformed k8s:enc: prefix")
	}
	return encrypted{provider: string(parts[0]), version: string(parts[1]), key: string(parts[2]), data: parts[3]}, nil
}

// ErrEncrypted marks a value encrypted at rest that could not be decrypted:
// no configuration, a KMS provider, no such key, or a wrong key.
var ErrEncrypted = errors.New("encrypted at rest")

// Keys holds the keys of a kube-apiserver EncryptionConfiguration, by
// provider and key name. A name may have several secrets: the
// configuration's resources each list their own providers, and two of
// them may use the same provider and key name with different secrets
// (the stored value names only the provider and key, not the resource
// list it came from), so every secret under a name is a candidate.
type Keys struct {
	path string
	keys map[string]map[string][][]byte // provider → name → candidate secrets, in the file's order, each once
}

type encryptionConfig struct {
	Kind      string `json:"kind"`
	Resources []struct {
		Providers []map[string]struct {
			Name string `json:"name"`
			Keys []struct {
				Name   string `json:"name"`
				Secret string `json:"secret"`
			} `json:"keys"`
		} `json:"providers"`
	} `json:"resources"`
}

// LoadEncryptionConfig reads an EncryptionConfiguration file (the one
// given to kube-apiserver's --encryption-provider-config).
func LoadEncryptionConfig(path string) (*Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read encryption config: %w", err)
	}
	return ParseEncryptionConfig(path, b)
}

// ParseEncryptionConfig parses the YAML (or JSON) of an
// EncryptionConfiguration; path names it in errors.
func ParseEncryptionConfig(path string, b []byte) (*Keys, error) {
	var c encryptionConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		// Unknown fields (kms endpoints, cachesize…) are fine; the strict
		// pass only catches typos early. Fall back to a lenient parse.
		if err2 := yaml.Unmarshal(b, &c); err2 != nil {
			return nil, fmt.Errorf("encryption config %s: %w", path, err2)
		}
	}
	if c.Kind != "EncryptionConfiguration" {
		return nil, fmt.Errorf("encryption config %s: kind is %q, want EncryptionConfiguration", path, c.Kind)
	}
	k := &Keys{path: path, keys: map[string]map[string][][]byte{}}
	for _, r := range c.Resources {
		for _, p := range r.Providers {
			for provider, cfg := range p {
				switch provider {
				case "aescbc", "aesgcm", "secretbox":
				default:
					continue
				}
				for _, key := range cfg.Keys {
					secret, err := base64.StdEncoding.DecodeString(key.Secret)
					if err != nil {
						return nil, fmt.Errorf("encryption config %s: %s key %q: secret is not base64: %w", path, provider, key.Name, err)
					}
					switch {
					case provider == "secretbox" && len(secret) != 32:
						return nil, fmt.Errorf("encryption config %s: secretbox key %q: %d bytes, want 32", path, key.Name, len(secret))
					case provider != "secretbox" && len(secret) != 16 && len(secret) != 24 && len(secret) != 32:
						return nil, fmt.Errorf("encryption config %s: %s key %q: %d bytes, want 16, 24 or 32", path, provider, key.Name, len(secret))
					}
					if k.keys[provider] == nil {
						k.keys[provider] = map[string][][]byte{}
					}
					cands := k.keys[provider][key.Name]
					if !slices.ContainsFunc(cands, func(c []byte) bool { return bytes.Equal(c, secret) }) {
						k.keys[provider][key.Name] = append(cands, secret)
					}
				}
			}
		}
	}
	return k, nil
}

// decrypt returns the plaintext of value v stored under etcd key etcdKey,
// trying each candidate secret of the value's provider and key name.
// aesgcm and secretbox authenticate: a wrong key fails. aescbc does not:
// a wrong key's output passes the PKCS#7 padding check 1 time in 256, so
// its plaintext is taken only when it is what kube-apiserver encrypts, a
// Kubernetes object (protobuf envelope or JSON). Failures wrap
// ErrEncrypted and say why, never with key material.
func (k *Keys) decrypt(etcdKey string, v []byte) ([]byte, error) {
	e, err := parseEncrypted(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEncrypted, err)
	}
	if e.provider == "kms" {
		return nil, fmt.Errorf("%w with KMS provider %s (kms %s): cannot decrypt offline", ErrEncrypted, e.key, e.version)
	}
	what := fmt.Sprintf("%s key %q", e.provider, e.key)
	if k == nil {
		return nil, fmt.Errorf("%w with %s: give --encryption-config to decrypt", ErrEncrypted, what)
	}
	switch e.provider {
	case "aescbc", "aesgcm", "secretbox":
	default:
		return nil, fmt.Errorf("%w with unknown provider %q", ErrEncrypted, e.provider)
	}
	cands := k.keys[e.provider][e.key]
	if len(cands) == 0 {
		return nil, fmt.Errorf("%w with %s: %s has no such key", ErrEncrypted, what, k.path)
	}
	for _, secret := range cands {
		var plain []byte
		switch e.provider {
		case "aescbc":
			if plain, err = decryptCBC(secret, e.data); err == nil && !isKubeObject(plain) {
				err = errors.New("the padding matched, but the plaintext is not a Kubernetes object")
			}
		case "aesgcm":
			plain, err = decryptGCM(secret, e.data, []byte(etcdKey))
		case "secretbox":
			plain, err = decryptSecretbox(secret, e.data)
		}
		if err == nil {
			return plain, nil
		}
	}
	if len(cands) == 1 {
		return nil, fmt.Errorf("%w with %s: decrypt with the key of %s: %w (wrong key?)", ErrEncrypted, what, k.path, err)
	}
	return nil, fmt.Errorf("%w with %s: decrypt with each of the %d keys of that name in %s: the last: %w (wrong key?)", ErrEncrypted, what, len(cands), k.path, err)
}

// isKubeObject says whether b is what kube-apiserver stores: a protobuf
// object in the k8s\0 envelope (its runtime.Unknown parses and names a
// kind) or a JSON object.
func isKubeObject(b []byte) bool {
	if rest, ok := bytes.CutPrefix(b, protobufMagic); ok {
		var u runtime.Unknown
		return u.Unmarshal(rest) == nil && u.Kind != ""
	}
	return looksJSON(b)
}

func decryptCBC(key, data []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	bs := aes.BlockSize
	if len(data) < 2*bs || (len(data)-bs)%bs != 0 {
		return nil, fmt.Errorf("ciphertext of %d bytes is not IV + whole blocks", len(data))
	}
	out := make([]byte, len(data)-bs)
	cipher.NewCBCDecrypter(block, data[:bs]).CryptBlocks(out, data[bs:])
	pad := int(out[len(out)-1])
	if pad == 0 || pad > bs || pad > len(out) {
		return nil, errors.New("invalid PKCS#7 padding")
	}
	for _, c := range out[len(out)-pad:] {
		if int(c) != pad {
			return nil, errors.New("invalid PKCS#7 padding")
		}
	}
	return out[:len(out)-pad], nil
}

func decryptGCM(key, data, ad []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	ns := aead.NonceSize()
	if len(data) < ns+aead.Overhead() {
		return nil, fmt.Errorf("ciphertext of %d bytes is too short", len(data))
	}
	return aead.Open(nil, data[:ns], data[ns:], ad)
}

func decryptSecretbox(key, data []byte) ([]byte, error) {
	if len(data) < 24+secretbox.Overhead {
		return nil, fmt.Errorf("ciphertext of %d bytes is too short", len(data))
	}
	var nonce [24]byte
	var k [32]byte
	copy(nonce[:], data[:24])
	copy(k[:], key)
	out, ok := secretbox.Open(nil, data[24:], &nonce, &k)
	if !ok {
		return nil, errors.New("authentication failed")
	}
	return out, nil
}

// providerName is the short name of an encoding from Sniff, for tables.
func providerName(enc string) string {
	p, _ := strings.CutPrefix(enc, "encrypted:")
	return p
}
