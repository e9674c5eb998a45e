package main

import (
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/lifeboat-dev/lifeboat/inspect"
)

// entries is a lister of n Kubernetes-like keys made on the fly, as the
// index of a big backup hands them to ls one by one.
type entries int

func (n entries) List(prefix string, fn func(*inspect.Entry) error) error {
	var e inspect.Entry
	for i := range int(n) {
		e = inspect.Entry{Key: fmt.Sprintf("/registry/configmaps/ns-%04d/cm-%08d", i%1000, i),
			ModRevision: int64(i + 1), CreateRevision: int64(i + 1), Version: 1, Size: 4096, Encoding: "protobuf"}
		if err := fn(&e); err != nil {
			return err
		}
	}
	return nil
}

// TestLsMemoryFlat: ls of a backup with many keys holds no line of its
// table in memory once written (issue 31: the first ls of a 4 GB backup
// peaked at 152 MiB, get at 82 MiB: text/tabwriter kept every line of the
// table until its end to size the columns). The heap in use while the
// last line is written stays within a few MiB of the heap before, for
// 300 000 keys (about 60 MB of cells and text if kept).
func TestLsMemoryFlat(t *testing.T) {
	const n = 300000
	var before, at runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	src := lastHook{lister: entries(n), last: n, fn: func() {
		runtime.GC()
		runtime.ReadMemStats(&at)
	}}
	if err := writeLs(io.Discard, &src, "/", "table"); err != nil {
		t.Fatal(err)
	}
	if at.HeapAlloc == 0 {
		t.Fatal("the last entry was not listed")
	}
	grew := int64(at.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap before %d KiB, at the last of %d lines %d KiB (+%d KiB)", before.HeapAlloc>>10, n, at.HeapAlloc>>10, grew>>10)
	if grew > 8<<20 {
		t.Fatalf("ls holds %d MiB of its output at the last of %d keys, want ≤ 8 MiB: the table grows with the backup", grew>>20, n)
	}
}

// lastHook calls fn when the last entry of a listing has been written
// (when the lister asks for the entry after it, or returns).
type lastHook struct {
	lister
	last int
	fn   func()
}

func (h *lastHook) List(prefix string, fn func(*inspect.Entry) error) error {
	i := 0
	err := h.lister.List(prefix, func(e *inspect.Entry) error {
		i++
		return fn(e)
	})
	if i == h.last {
		h.fn()
	}
	return err
}
