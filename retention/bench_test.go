package retention

import (
	"math/rand"
	"testing"
	"time"
)

// BenchmarkPlan100k plans over 100 000 backups, one every 5 minutes
// (about 347 days), shuffled as a store listing might return them.
func BenchmarkPlan100k(b *testing.B) {
	const n = 100_000
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	backups := series(now.Add(-n*5*time.Minute), n, 5*time.Minute)
	rng := rand.New(rand.NewSource(1))
	for i := range backups {
		backups[i].DrillPassed = rng.Intn(50) == 0
		backups[i].Locked = rng.Intn(1000) == 0
	}
	rng.Shuffle(n, func(i, j int) { backups[i], backups[j] = backups[j], backups[i] })
	berlin := mustLoad(b, "Europe/Berlin")

	gfs := Policy{Last: 5, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 3}
	gfsBerlin := gfs
	gfsBerlin.Location = berlin
	for _, bc := range []struct {
		name   string
		policy Policy
	}{
		{"gfs-utc", gfs},
		{"gfs-berlin", gfsBerlin},
		// Every bucket rule unlimited: a bucket key per backup, and most
		// backups kept with several reasons each.
		{"unlimited-berlin", Policy{Hourly: Unlimited, Daily: Unlimited, Weekly: Unlimited, Monthly: Unlimited, Yearly: Unlimited, Location: berlin}},
		// Everything kept by keep-within: the most reasons to build.
		{"within-all", Policy{Last: Unlimited, Within: 400 * day}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Plan(backups, bc.policy, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
