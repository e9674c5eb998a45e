package repository

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"filippo.io/age"
)

// TestDecryptErrorDescribesStanzas: no identity matches: the error says
// what the object is encrypted to, as far as its header tells (issue 29).
func TestDecryptErrorDescribesStanzas(t *testing.T) {
	gen := func() *age.X25519Identity {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b, wrong := gen(), gen(), gen()
	scrypt, err := age.NewScryptRecipient("pw")
	if err != nil {
		t.Fatal(err)
	}
	scrypt.SetWorkFactor(10)
	for _, tt := range []struct {
		name string
		to   []age.Recipient
		want string
	}{
		{"one", []age.Recipient{a.Recipient()}, "encrypted to 1 X25519 recipient"},
		{"two", []age.Recipient{a.Recipient(), b.Recipient()}, "encrypted to 2 X25519 recipients"},
		{"passphrase", []age.Recipient{scrypt}, "encrypted to 1 scrypt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var obj bytes.Buffer
			w, err := age.Encrypt(&obj, tt.to...)
			if err != nil {
				t.Fatal(err)
			}
			w.Write([]byte("data"))
			w.Close()
			_, err = NewDecoder(&obj, "none", "age", []age.Identity{wrong})
			if !errors.Is(err, ErrDecrypt) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewDecoder = %v; want ErrDecrypt saying %q", err, tt.want)
			}
		})
	}
}
