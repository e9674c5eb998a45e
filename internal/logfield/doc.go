// Package logfield provides the one form of a duration in lifeboat's
// logs: a number of seconds (Seconds), under a key ending in "seconds".
// It does not log anything itself. Its test scans every slog call of the
// module for durations in another form (a time.Duration, which slog
// prints as "1.5s" in text and nanoseconds in JSON, or a string).
package logfield
