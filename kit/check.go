package kit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// Certificate is one certificate found in a kit, as its manifest lists it.
type Certificate struct {
	Path     string    `json:"path"`
	Subject  string    `json:"subject"`
	NotAfter time.Time `json:"not_after"`
	IsCA     bool      `json:"is_ca,omitempty"`
}

// Certificates returns every certificate of the kit's PEM files (the
// ones that parse; Check reports the others), in path order.
func (k *Kit) Certificates() []Certificate {
	var cs []Certificate
	for _, e := range k.Entries {
		certs, _, _ := parsePEM(e)
		for _, c := range certs {
			cs = append(cs, Certificate{Path: e.Path, Subject: c.Subject.String(), NotAfter: c.NotAfter.UTC(), IsCA: c.IsCA})
		}
	}
	return cs
}

// CheckResult is what Check found.
type CheckResult struct {
	Files, Certificates, Keys int
	// Pairs are the certificate (or public key) and private key files
	// found to belong together ("ca.crt+ca.key").
	Pairs []string
	// EarliestExpiry is the soonest NotAfter of any certificate, and
	// EarliestPath its file; zero when the kit holds none.
	EarliestExpiry time.Time
	EarliestPath   string
	// Problems are what is wrong: a PEM file that does not parse, a
	// certificate whose key does not match. Check's error joins them.
	Problems []string
}

// Check parses every certificate and key of the kit's PEM files
// (.crt .key .pem .pub, and any file that holds a PEM block) and checks
// that each certificate or public key and the private key beside it of the
// same name (ca.crt and ca.key, sa.pub and sa.key) match. Files that are
// not PEM (tokens, the encryption configuration) are counted, not parsed.
// The result is returned with an error naming every problem.
func (k *Kit) Check() (CheckResult, error) {
	var res CheckResult
	pubs := map[string]crypto.PublicKey{}  // stem -> from a certificate or public key
	privs := map[string]crypto.PublicKey{} // stem -> public half of a private key
	for _, e := range k.Entries {
		if e.Type != TypeFile {
			continue
		}
		res.Files++
		certs, keys, err := parsePEM(e)
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
			continue
		}
		stem := strings.TrimSuffix(e.Path, path.Ext(e.Path))
		for i, c := range certs {
			res.Certificates++
			if res.EarliestExpiry.IsZero() || c.NotAfter.Before(res.EarliestExpiry) {
				res.EarliestExpiry, res.EarliestPath = c.NotAfter.UTC(), e.Path
			}
			if i == 0 {
				pubs[stem] = c.PublicKey
			}
		}
		for _, kk := range keys {
			res.Keys++
			if kk.private {
				privs[stem] = kk.pub
			} else if _, ok := pubs[stem]; !ok {
				pubs[stem] = kk.pub
			}
		}
	}
	stems := make([]string, 0, len(privs))
	for s := range privs {
		stems = append(stems, s)
	}
	slices.Sort(stems)
	for _, s := range stems {
		pub, ok := pubs[s]
		if !ok {
			continue // a key alone (no certificate beside it)
		}
		if !samePublic(pub, privs[s]) {
			res.Problems = append(res.Problems, fmt.Sprintf("%s.*: the certificate (or public key) does not match the private key beside it", s))
			continue
		}
		res.Pairs = append(res.Pairs, s)
	}
	if len(res.Problems) > 0 {
		return res, bad("%s", strings.Join(res.Problems, "; "))
	}
	return res, nil
}

type parsedKey struct {
	pub     crypto.PublicKey
	private bool
}

// parsePEM parses the PEM blocks of a file. A file named like a PEM file
// (.crt .key .pem .pub) must hold at least one block; every block must
// parse.
func parsePEM(e Entry) ([]*x509.Certificate, []parsedKey, error) {
	if e.Type != TypeFile {
		return nil, nil, nil
	}
	var (
		certs []*x509.Certificate
		keys  []parsedKey
	)
	rest := e.Data
	blocks := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks++
		switch b.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: certificate: %v", e.Path, err)
			}
			certs = append(certs, c)
		case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY":
			pub, err := privatePublic(b)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %s: %v", e.Path, strings.ToLower(b.Type), err)
			}
			keys = append(keys, parsedKey{pub: pub, private: true})
		case "PUBLIC KEY":
			pub, err := x509.ParsePKIXPublicKey(b.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: public key: %v", e.Path, err)
			}
			keys = append(keys, parsedKey{pub: pub})
		case "RSA PUBLIC KEY":
			pub, err := x509.ParsePKCS1PublicKey(b.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: public key: %v", e.Path, err)
			}
			keys = append(keys, parsedKey{pub: pub})
		}
	}
	switch path.Ext(e.Path) {
	case ".crt", ".key", ".pem", ".pub":
		if blocks == 0 {
			return nil, nil, fmt.Errorf("%s: no PEM block in a %s file", e.Path, path.Ext(e.Path))
		}
	}
	return certs, keys, nil
}

func privatePublic(b *pem.Block) (crypto.PublicKey, error) {
	var (
		k   any
		err error
	)
	switch b.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T is not a signing key", k)
	}
	return s.Public(), nil
}

func samePublic(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	switch a.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		if e, ok := a.(equaler); ok {
			return e.Equal(b)
		}
	}
	return false
}
