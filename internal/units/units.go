// Package units formats quantities for people: sizes in binary units
// (KiB, MiB, …), the one spelling every command and log line uses.
package units

import "fmt"

// Bytes is n bytes for a person: "512 B", "1.5 KiB", "2.6 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
