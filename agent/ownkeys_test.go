package agent

import (
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestRestoreRemovesTheLock: the keys a restore removes as lifeboat's own
// (restore.OwnKeyPrefixes) cover the agent's lock.
func TestRestoreRemovesTheLock(t *testing.T) {
	for _, p := range restore.OwnKeyPrefixes {
		if strings.HasPrefix(LockPrefix, p) {
			return
		}
	}
	t.Errorf("restore.OwnKeyPrefixes %v do not cover the lock prefix %s", restore.OwnKeyPrefixes, LockPrefix)
}
