package repository_test

import (
	"bytes"
	"testing"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestNewEncoderRefusesUnknownCompression checks that the encoder, called
// as a library, refuses the compression names the configuration refuses
// (store.compression) instead of writing zstd under another name.
func TestNewEncoderRefusesUnknownCompression(t *testing.T) {
	for _, tc := range []struct {
		compression string
		want        string // "" when the encoder accepts it
	}{
		{"", ""},
		{"zstd", ""},
		{"none", ""},
		{"s2", ""},
		{"gzip", `encode: compression: "gzip" is not zstd, s2 or none`},
		{"ZSTD", `encode: compression: "ZSTD" is not zstd, s2 or none`},
		{"snappy", `encode: compression: "snappy" is not zstd, s2 or none`},
	} {
		t.Run("compression="+tc.compression, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := repository.NewEncoder(&buf, repository.Encoding{Compression: tc.compression})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("NewEncoder: %v", err)
				}
				if err := w.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("NewEncoder: got error %v, want %q", err, tc.want)
			}
		})
	}
}
