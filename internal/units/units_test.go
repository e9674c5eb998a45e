package units

import (
	"math"
	"testing"
)

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 240 << 10: "240.0 KiB",
		2600 << 20: "2.5 GiB", 8 << 40: "8.0 TiB", math.MaxInt64: "8.0 EiB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
