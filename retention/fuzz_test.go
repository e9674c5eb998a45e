package retention

import (
	"testing"
	"time"
)

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{
		"36h", "7d", "2w", "1y2d", "1.5d", ".5w", "0", "-0", "+1d", "-2h30m", "1µs", "1μs", "300ms",
		"106751d23h47m16.854775807s", "-106751d23h47m16.854775808s", "293y", "1.0000000000000000000001y",
		"", "d", ".d", "1d.", "7", "2days", "1e3s", "9223372036854775807ns", "9223372036854775808ns",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		// Everything Go accepts is read the same.
		if want, goErr := time.ParseDuration(s); goErr == nil {
			if err != nil {
				t.Fatalf("ParseDuration(%q): %v; time.ParseDuration reads it as %v", s, err, want)
			}
			if d != want {
				t.Fatalf("ParseDuration(%q) = %d, time.ParseDuration = %d", s, d, want)
			}
		}
		if err != nil {
			return
		}
		formatted := formatDuration(d)
		back, err := ParseDuration(formatted)
		if err != nil {
			t.Fatalf("ParseDuration(%q) = %d, printed as %q, which does not parse: %v", s, d, formatted, err)
		}
		if back != d {
			t.Fatalf("ParseDuration(%q) = %d, printed as %q, read back as %d", s, d, formatted, back)
		}
	})
}
