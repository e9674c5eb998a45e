//go:build !(linux || darwin)

package child

// killedBy cannot tell a kill from a crash on this platform: every death
// of a child is taken for a crash.
func killedBy(error) (string, bool) { return "", false }

// oomKills is unknown on this platform.
func oomKills() int64 { return -1 }
