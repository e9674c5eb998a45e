package retention

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		want   string // "" for valid; else a part of the error
	}{
		{"last", Policy{Last: 1}, ""},
		{"unlimited daily", Policy{Daily: Unlimited}, ""},
		{"within only", Policy{Within: time.Nanosecond}, ""},
		{"gfs", Policy{Last: 3, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 3, Within: 2 * day}, ""},
		{"zero", Policy{}, "retention policy keeps nothing: set at least one keep-* rule"},
		{"zero with zone", Policy{Location: time.UTC}, "retention policy keeps nothing"},
		{"negative last", Policy{Last: -2, Daily: 1}, "keep-last -2"},
		{"negative hourly", Policy{Hourly: -5}, "keep-hourly -5"},
		{"negative daily", Policy{Daily: -3}, "keep-daily -3"},
		{"negative weekly", Policy{Weekly: -100}, "keep-weekly -100"},
		{"negative monthly", Policy{Monthly: -2}, "keep-monthly -2"},
		{"negative yearly", Policy{Yearly: -9}, "keep-yearly -9"},
		{"negative within", Policy{Last: 1, Within: -time.Hour}, "keep-within -1h: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Errorf("Validate() = nil, want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("Validate() = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestPolicyString(t *testing.T) {
	tests := []struct {
		policy Policy
		want   string
	}{
		{Policy{Last: 3, Daily: 7}, "keep-last 3, keep-daily 7"},
		{Policy{Yearly: 1, Hourly: Unlimited, Within: 36 * time.Hour}, "keep-hourly unlimited, keep-yearly 1, keep-within 1d12h"},
		{Policy{Last: 3, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 3, Within: 2 * day},
			"keep-last 3, keep-hourly 24, keep-daily 7, keep-weekly 4, keep-monthly 12, keep-yearly 3, keep-within 2d"},
		{Policy{}, "keep nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.policy.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"36h", 36 * time.Hour},
		{"7d", 7 * day},
		{"2w", 14 * day},
		{"1y", 365 * day},
		{"1y2d", 367 * day},
		{"1w1d1h1m1s", 8*day + time.Hour + time.Minute + time.Second},
		{"1.5d", 36 * time.Hour},
		{".5w", 84 * time.Hour},
		{"1.000000001d", day + 86400*time.Nanosecond}, // 1e-9 d is 86.4µs, exactly
		{"0.000001d", 86400 * time.Microsecond},
		{"0", 0},
		{"+3d", 3 * day},
		{"-2d", -2 * day},
		{"300ms", 300 * time.Millisecond},
		{"1µs", time.Microsecond},
		{"1μs", time.Microsecond},
		{"106751d23h47m16.854775807s", time.Duration(1<<63 - 1)},
		{"-106751d23h47m16.854775808s", time.Duration(-1 << 63)},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if err != nil {
				t.Fatalf("ParseDuration(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseDurationErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", `invalid duration ""`},
		{"-", `invalid duration "-"`},
		{"7", `invalid duration "7": missing unit`},
		{"7 d", `invalid duration "7 d": unknown unit " d"`},
		{"2days", `unknown unit "days"`},
		{"d", `invalid duration "d": want a number before each unit`},
		{".d", `invalid duration ".d": want digits around the decimal point`},
		{"1d.", `invalid duration "1d.": want digits around the decimal point`},
		{"293y", `invalid duration "293y": out of range`},
		{"106751d23h47m16.854775808s", "out of range"},
		{"99999999999999999999h", "out of range"},
		{"9223372036854775807y", "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseDuration(tt.in)
			if err == nil {
				t.Fatalf("ParseDuration(%q) = %v, want an error containing %q", tt.in, d, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseDuration(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{7 * day, "7d"},
		{36 * time.Hour, "1d12h"},
		{90 * time.Minute, "1h30m"},
		{90 * time.Second, "1m30s"},
		{1500 * time.Millisecond, "1.5s"},
		{250 * time.Millisecond, "250ms"},
		{day + time.Nanosecond, "1d1ns"},
		{-2 * time.Hour, "-2h"},
		{time.Duration(1<<63 - 1), "106751d23h47m16.854775807s"},
		{time.Duration(-1 << 63), "-106751d23h47m16.854775808s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got := formatDuration(tt.in)
			if got != tt.want {
				t.Errorf("formatDuration(%d) = %q, want %q", int64(tt.in), got, tt.want)
			}
			back, err := ParseDuration(got)
			if err != nil || back != tt.in {
				t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back, err, tt.in)
			}
		})
	}
}
