package repository

import "sync"

// Holds are the store keys this process is reading right now for a
// restore or a drill (a snapshot's objects, a generation's segments and
// markers). Prune, in the same process, never deletes a held key: it
// leaves it for a later run. Holds are process-wide and in memory only;
// they do not protect against a prune in another process (the agent's
// leader lock and the orphan grace do that).
var holds = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

// Hold marks keys as being read until the returned release is called.
// Holds nest: a key held twice stays held until both are released.
// release is idempotent and safe to call from any goroutine; Hold and
// Held are safe for concurrent use.
func Hold(keys ...string) (release func()) {
	keys = append([]string(nil), keys...)
	holds.Lock()
	for _, k := range keys {
		holds.n[k]++
	}
	holds.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			holds.Lock()
			defer holds.Unlock()
			for _, k := range keys {
				if holds.n[k]--; holds.n[k] <= 0 {
					delete(holds.n, k)
				}
			}
		})
	}
}

// Held reports whether key is held by a Hold not yet released.
func Held(key string) bool {
	holds.Lock()
	defer holds.Unlock()
	return holds.n[key] > 0
}
