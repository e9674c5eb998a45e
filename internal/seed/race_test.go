//go:build race

package seed_test

// raceEnabled is true when the tests run under the race detector, which
// slows etcd down several times.
const raceEnabled = true
