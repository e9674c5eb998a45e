package logfield

import (
	"math"
	"time"
)

// Seconds returns d in seconds, to the millisecond: the value of every
// duration lifeboat logs.
func Seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}
