package snapshot

import "log/slog"

const redacted = "<redacted>"

// Secret is a string that never prints: String, GoString, LogValue,
// MarshalJSON and MarshalText all give "<redacted>" (an empty Secret stays
// empty, so a missing password is visible as missing). Use Reveal to get the
// value where it is really needed.
type Secret string

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString redacts the value for %#v.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// LogValue redacts the value in slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText redacts the value in text encodings (YAML, flags).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalJSON redacts the value in JSON.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }
