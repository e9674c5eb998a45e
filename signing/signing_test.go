package signing

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const doc = `{
  "format": 1,
  "id": "20261130T113800Z-r250001",
  "revision": 250001,
  "nested": {"b": 1, "a": [1, 2]}
}
`

func mustKey(t *testing.T) *Key {
	t.Helper()
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignJSON(t *testing.T) {
	k, other := mustKey(t), mustKey(t)
	signed, err := k.SignJSON("manifest", "prod/snapshots/x.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(signed), "{\n  \"format\": 1,") {
		t.Errorf("the writer's order is not kept:\n%s", signed)
	}
	trust := &Trust{Keys: []PublicKey{other.Public(), k.Public()}}
	for _, tc := range []struct {
		name, kind, key, doc string
		trust                *Trust
		want                 error
	}{
		{"as signed", "manifest", "prod/snapshots/x.json", string(signed), trust, nil},
		{"reindented", "manifest", "prod/snapshots/x.json", strings.ReplaceAll(string(signed), "\n  ", " "), trust, nil},
		{"field altered", "manifest", "prod/snapshots/x.json", strings.Replace(string(signed), "250001,", "250002,", 1), trust, ErrBadSignature},
		{"member added", "manifest", "prod/snapshots/x.json", strings.Replace(string(signed), `"format": 1,`, `"format": 1, "Revision": 3,`, 1), trust, ErrBadSignature},
		// The last of two members wins, in the canonical form as in a
		// struct: one before the signed member changes nothing, one after
		// it changes the content.
		{"member duplicated before", "manifest", "prod/snapshots/x.json", strings.Replace(string(signed), `"format": 1,`, `"format": 1, "revision": 3,`, 1), trust, nil},
		{"member duplicated after", "manifest", "prod/snapshots/x.json", strings.Replace(string(signed), `"revision": 250001,`, `"revision": 250001, "revision": 3,`, 1), trust, ErrBadSignature},
		{"moved to another key", "manifest", "prod/snapshots/y.json", string(signed), trust, ErrBadSignature},
		{"another kind", "drill report", "prod/snapshots/x.json", string(signed), trust, ErrBadSignature},
		{"unknown key", "manifest", "prod/snapshots/x.json", string(signed), &Trust{Keys: []PublicKey{other.Public()}}, ErrUnknownKey},
		{"unsigned", "manifest", "prod/snapshots/x.json", doc, trust, ErrUnsigned},
		{"unsigned allowed", "manifest", "prod/snapshots/x.json", doc, &Trust{Keys: trust.Keys, AllowUnsigned: true}, nil},
		{"no trust configured", "manifest", "other", "{}", nil, nil},
		{"not JSON", "manifest", "prod/snapshots/x.json", "{", trust, ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.trust.VerifyJSON(tc.kind, tc.key, []byte(tc.doc))
			if tc.name == "member duplicated" {
				// The last of two members wins, in the canonical form as
				// in a struct: 3 replaces 250001 and the check fails.
				tc.want = ErrBadSignature
			}
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("VerifyJSON: %v, want %v", err, tc.want)
			}
		})
	}
	v, err := (&Trust{Keys: trust.Keys, AllowUnsigned: true}).VerifyJSON("manifest", "k", []byte(doc))
	if err != nil || !v.Unsigned {
		t.Errorf("unsigned with AllowUnsigned: %+v %v, want accepted as unsigned", v, err)
	}
	if _, err := k.SignJSON("manifest", "k", signed); err == nil {
		t.Error("signing a signed document again succeeded")
	}
	empty, err := k.SignJSON("x", "k", []byte("{}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trust.VerifyJSON("x", "k", empty); err != nil {
		t.Errorf("empty object: %v\n%s", err, empty)
	}
}

func TestSignBytes(t *testing.T) {
	k := mustKey(t)
	sum := []byte("0123456789abcdef0123456789abcdef")
	sig := k.SignBytes("segment", "c/changes/g/1-2.seg", sum)
	trust := &Trust{Keys: []PublicKey{k.Public()}}
	if _, err := trust.VerifyBytes("segment", "c/changes/g/1-2.seg", sum, &sig); err != nil {
		t.Fatal(err)
	}
	if _, err := trust.VerifyBytes("segment", "c/changes/g/1-3.seg", sum, &sig); !errors.Is(err, ErrBadSignature) {
		t.Errorf("moved: %v", err)
	}
	if _, err := trust.VerifyBytes("segment", "c/changes/g/1-2.seg", sum, nil); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "signing.key")
	k := mustKey(t)
	if err := WriteKey(path, k); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := WriteKey(path, mustKey(t)); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second WriteKey: %v, want a refusal", err)
	}
	got, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Public().Equal(k.Public()) {
		t.Error("loaded key differs")
	}
	p, err := ParsePublicKey(k.Public().String())
	if err != nil || !p.Equal(k.Public()) {
		t.Errorf("ParsePublicKey(String()): %v", err)
	}
	data, _ := os.ReadFile(path)
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("key", "key", k)
	if !strings.Contains(logged.String(), k.Public().ID()) || strings.Contains(logged.String(), string(data[40:60])) {
		t.Errorf("logged key: %s", logged.String())
	}
	if strings.Contains(k.String(), string(data[40:60])) {
		t.Error("String shows the key file's content")
	}
	for _, bad := range []string{"", "age1xyz", publicPrefix + "AAAA", publicPrefix + "!!"} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("ParsePublicKey(%q) succeeded", bad)
		}
	}
	if _, err := ParseKey([]byte("garbage")); err == nil {
		t.Error("ParseKey(garbage) succeeded")
	}
}

func FuzzVerifyJSON(f *testing.F) {
	k, _ := Generate()
	signed, _ := k.SignJSON("manifest", "k", []byte(doc))
	f.Add(signed)
	f.Add([]byte(doc))
	f.Add([]byte(`{"signature": 3}`))
	f.Add([]byte(`{"signature": {"key_id": "x", "ed25519": "AAAA"}}`))
	trust := &Trust{Keys: []PublicKey{k.Public()}}
	f.Fuzz(func(t *testing.T, b []byte) {
		trust.VerifyJSON("manifest", "k", b) // never panics
	})
}

func FuzzParsePublicKey(f *testing.F) {
	k, _ := Generate()
	f.Add(k.Public().String())
	f.Add("lifeboat-ed25519:")
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := ParsePublicKey(s); err == nil {
			if _, err := ParsePublicKey(p.String()); err != nil {
				t.Errorf("round trip of %q: %v", s, err)
			}
		}
	})
}
