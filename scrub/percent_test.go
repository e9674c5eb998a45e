package scrub_test

import (
	"testing"

	"github.com/lifeboat-dev/lifeboat/scrub"
)

func TestParsePercent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"5%", 5, true}, {"5", 5, true}, {" 2.5 % ", 2.5, true}, {"0", 0, true}, {"100%", 100, true},
		{"", 0, false}, {"%", 0, false}, {"101%", 0, false}, {"-1", 0, false}, {"NaN", 0, false},
		{"Inf", 0, false}, {"1e1", 0, false}, {"0x10", 0, false}, {"five", 0, false}, {"5%%", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := scrub.ParsePercent(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParsePercent(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParsePercent(f *testing.F) {
	for _, s := range []string{"5%", "0", "100", "2.5 %", "", "-0", "1e2", "Inf", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := scrub.ParsePercent(s)
		if err == nil && (p < 0 || p > 100 || p != p) {
			t.Fatalf("ParsePercent(%q) = %v: out of range", s, p)
		}
	})
}
