package repository_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestHold: a held key is held until every hold on it is released;
// release is idempotent; concurrent holds and releases leave nothing held.
func TestHold(t *testing.T) {
	k := "test-hold/a"
	if repository.Held(k) {
		t.Fatal("held before Hold")
	}
	r1 := repository.Hold(k, "test-hold/b")
	r2 := repository.Hold(k)
	if !repository.Held(k) || !repository.Held("test-hold/b") {
		t.Fatal("not held after Hold")
	}
	r1()
	r1() // idempotent: must not release r2's hold
	if !repository.Held(k) {
		t.Fatal("released by the other hold's release")
	}
	if repository.Held("test-hold/b") {
		t.Fatal("b still held after its release")
	}
	r2()
	if repository.Held(k) {
		t.Fatal("held after every release")
	}

	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				rel := repository.Hold(fmt.Sprintf("test-hold/c%d", j%4), "test-hold/shared")
				if !repository.Held("test-hold/shared") {
					t.Errorf("goroutine %d: shared not held while holding", i)
				}
				rel()
			}
		}()
	}
	wg.Wait()
	for _, k := range []string{"test-hold/shared", "test-hold/c0", "test-hold/c3"} {
		if repository.Held(k) {
			t.Errorf("%s held after all released", k)
		}
	}
}
