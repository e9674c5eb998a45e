package drill

import "testing"

// TestSpaceNeeded (issue 29): the drill's free-space check asks for
// twice the database and a margin proportionate to it, plus etcd's one
// preallocated WAL segment: not a flat 256 MiB for a 240 KiB database.
func TestSpaceNeeded(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name     string
		db       int64
		oneCopy  bool
		min, max uint64
	}{
		{"240 KiB", 240 << 10, false, 64 * MiB, 80 * MiB},
		{"1 GiB", 1 << 30, false, 2048*MiB + 64*MiB, 2048*MiB + 200*MiB},
		{"1 GiB, one copy", 1 << 30, true, 1024*MiB + 64*MiB, 1024*MiB + 200*MiB},
		{"8 GiB", 8 << 30, false, 16384*MiB + 64*MiB, 16384*MiB + 1024*MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spaceNeeded(tc.db, tc.oneCopy); got < tc.min || got > tc.max {
				t.Errorf("spaceNeeded(%d, %v) = %d MiB, want %d to %d MiB", tc.db, tc.oneCopy, got/MiB, tc.min/MiB, tc.max/MiB)
			}
		})
	}
}
