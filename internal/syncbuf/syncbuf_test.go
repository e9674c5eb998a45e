package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

func TestBufferConcurrentWrites(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x"))
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("len = %d, want 800", got)
	}
}

func TestBufferMax(t *testing.T) {
	b := syncbuf.Buffer{Max: 10}
	b.Write([]byte(strings.Repeat("a", 11)))
	b.Write([]byte("b"))
	if got := b.String(); got != "b" {
		t.Fatalf("after passing Max: %q, want %q", got, "b")
	}
}
