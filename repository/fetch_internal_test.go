package repository

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestTrailerHash: written in any chunking, trailerHash agrees with
// verify.TrailerReader on good and bad trailers.
func TestTrailerHash(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	db := make([]byte, 512*37)
	for i := range db {
		db[i] = byte(r.IntN(256))
	}
	sum := sha256.Sum256(db)
	good := append(append([]byte(nil), db...), sum[:]...)
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	tests := []struct {
		name string
		data []byte
	}{
		{name: "good", data: good},
		{name: "wrong trailer", data: bad},
		{name: "no trailer", data: db},
		{name: "trailer only", data: sum[:]},
		{name: "short", data: good[:10]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, _, wantErr := verify.TrailerReader(t.Context(), bytes.NewReader(tt.data))
			for range 50 {
				th := &trailerHash{h: sha256.New()}
				for rest := tt.data; len(rest) > 0; {
					n := min(len(rest), 1+r.IntN(100))
					if r.IntN(4) == 0 {
						n = min(len(rest), r.IntN(5000))
					}
					th.Write(rest[:n])
					rest = rest[n:]
				}
				got, err := th.check()
				if got != want || (err == nil) != (wantErr == nil) || (err != nil && !errors.Is(err, verify.ErrCorrupt)) {
					t.Fatalf("trailerHash = %q, %v; TrailerReader = %q, %v", got, err, want, wantErr)
				}
			}
		})
	}
}
