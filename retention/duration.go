package retention

import (
	"fmt"
	"math/bits"
	"strconv"
	"time"
)

const (
	day  = 24 * time.Hour
	week = 7 * day
	year = 365 * day
)

// durationUnits are time.ParseDuration's units plus d, w and y.
var durationUnits = map[string]uint64{
	"ns": uint64(time.Nanosecond),
	"us": uint64(time.Microsecond),
	"µs": uint64(time.Microsecond), // U+00B5 micro sign
	"μs": uint64(time.Microsecond), // U+03BC Greek mu
	"ms": uint64(time.Millisecond),
	"s":  uint64(time.Second),
	"m":  uint64(time.Minute),
	"h":  uint64(time.Hour),
	"d":  uint64(day),
	"w":  uint64(week),
	"y":  uint64(year),
}

// ParseDuration parses a duration such as "36h", "7d", "2w" or "1y2d". It
// accepts everything time.ParseDuration accepts, with the same result, plus
// the units d (24h), w (7d) and y (365d, calendar years are not meant).
// Fractions of d, w and y are exact to the nanosecond: "1.5d" is 36h.
func ParseDuration(s string) (time.Duration, error) {
	// The grammar is Go's: [-+]?([0-9]*(\.[0-9]*)?[a-z]+)+, or "0".
	orig := s
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 36h, 7d, 2w or 1y2d", orig)
	}
	var total uint64
	for s != "" {
		v, rest, err := durationTerm(s, orig)
		if err != nil {
			return 0, err
		}
		s = rest
		total += v
		if total > 1<<63 {
			return 0, fmt.Errorf("invalid duration %q: out of range", orig)
		}
	}
	if neg {
		return -time.Duration(total), nil
	}
	if total > 1<<63-1 {
		return 0, fmt.Errorf("invalid duration %q: out of range", orig)
	}
	return time.Duration(total), nil
}

// durationTerm parses the first number and unit of s (a part of the
// duration orig, for errors) and returns its nanoseconds and the rest.
func durationTerm(s, orig string) (uint64, string, error) {
	if c := s[0]; c != '.' && (c < '0' || c > '9') {
		return 0, "", fmt.Errorf("invalid duration %q: want a number before each unit", orig)
	}
	v, rest, ok := leadingInt(s)
	if !ok {
		return 0, "", fmt.Errorf("invalid duration %q: out of range", orig)
	}
	pre := len(rest) != len(s)
	s = rest

	var frac uint64
	var digits int
	post := false
	if s != "" && s[0] == '.' {
		s = s[1:]
		n := len(s)
		frac, digits, s = leadingFraction(s)
		post = n != len(s)
	}
	if !pre && !post {
		return 0, "", fmt.Errorf("invalid duration %q: want digits around the decimal point", orig)
	}

	i := 0
	for i < len(s) && s[i] != '.' && (s[i] < '0' || s[i] > '9') {
		i++
	}
	if i == 0 {
		return 0, "", fmt.Errorf("invalid duration %q: missing unit (ns, us, ms, s, m, h, d, w or y)", orig)
	}
	u := s[:i]
	s = s[i:]
	unit, ok := durationUnits[u]
	if !ok {
		return 0, "", fmt.Errorf("invalid duration %q: unknown unit %q (want ns, us, ms, s, m, h, d, w or y)", orig, u)
	}
	if v > 1<<63/unit {
		return 0, "", fmt.Errorf("invalid duration %q: out of range", orig)
	}
	v *= unit
	if frac > 0 {
		scale := pow10(digits)
		if unit >= uint64(day) {
			// frac < scale, so frac*unit/scale < unit and fits.
			hi, lo := bits.Mul64(frac, unit)
			q, _ := bits.Div64(hi, lo, scale)
			v += q
		} else {
			// The same arithmetic as time.ParseDuration, so both agree
			// to the nanosecond on the units they share.
			v += uint64(float64(frac) * (float64(unit) / float64(scale)))
		}
		if v > 1<<63 {
			return 0, "", fmt.Errorf("invalid duration %q: out of range", orig)
		}
	}
	return v, s, nil
}

// leadingInt consumes leading digits; ok is false when they exceed 1<<63.
func leadingInt(s string) (x uint64, rest string, ok bool) {
	i := 0
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		if x > 1<<63/10 {
			return 0, "", false
		}
		x = x*10 + uint64(s[i]-'0')
		if x > 1<<63 {
			return 0, "", false
		}
	}
	return x, s[i:], true
}

// leadingFraction consumes leading digits after a decimal point. Digits
// beyond what fits in x are consumed but ignored, as Go does.
func leadingFraction(s string) (x uint64, digits int, rest string) {
	i := 0
	full := false
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		if full {
			continue
		}
		if x > (1<<63-1)/10 {
			full = true
			continue
		}
		y := x*10 + uint64(s[i]-'0')
		if y > 1<<63 {
			full = true
			continue
		}
		x = y
		digits++
	}
	return x, digits, s[i:]
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// formatDuration prints d in the units ParseDuration reads, with whole days
// as "d": 7d, 1d12h, 36h30m, 90s, 1.5s, 250ms. It is exact: ParseDuration
// of the result is d.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b []byte
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u // two's complement; right for math.MinInt64 too
	}
	if n := u / uint64(day); n > 0 {
		b = strconv.AppendUint(b, n, 10)
		b = append(b, 'd')
	}
	u %= uint64(day)
	if n := u / uint64(time.Hour); n > 0 {
		b = strconv.AppendUint(b, n, 10)
		b = append(b, 'h')
	}
	u %= uint64(time.Hour)
	if n := u / uint64(time.Minute); n > 0 {
		b = strconv.AppendUint(b, n, 10)
		b = append(b, 'm')
	}
	u %= uint64(time.Minute)
	if u > 0 {
		// Below a minute Go prints exactly: 1.5s, 250ms, 1µs, 3ns.
		b = append(b, time.Duration(u).String()...)
	}
	return string(b)
}
