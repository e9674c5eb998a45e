package main

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"text/tabwriter"

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

// TestLsTableAsTabwriter: the two-pass table is byte for byte the one
// text/tabwriter wrote before (padding 2), for Kubernetes keys, other
// keys, keys with control characters (quoted) and names in UTF-8.
func TestLsTableAsTabwriter(t *testing.T) {
	keys := []string{"/registry/pods/default/web-0", "/registry/apiextensions.k8s.io/customresourcedefinitions/x.example.com",
		"/registry/ranges/serviceips", "plain", "bad\tkey\n", "/registry/configmaps/kube-system/äöü-ü", "/registry/a/b/c/d/e"}
	src := sliceLister(keys)
	var got, want bytes.Buffer
	if err := writeLs(&got, src, "", "table"); err != nil {
		t.Fatal(err)
	}
	tw := tabwriter.NewWriter(&want, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tNAMESPACE\tNAME\tSIZE\tMOD-REV\tENCODING")
	src.List("", func(e *inspect.Entry) error {
		r, ns, name := splitKubernetesKey([]byte(e.Key))
		if ns == "" {
			ns = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r, ns, name, e.Size, e.ModRevision, e.Encoding)
		return nil
	})
	tw.Flush()
	if got.String() != want.String() {
		t.Fatalf("ls table:\n%s\nwant (text/tabwriter):\n%s", got.String(), want.String())
	}
	got.Reset()
	if err := writeLs(&got, src, "/nothing/", "table"); err != nil || got.Len() != 0 {
		t.Fatalf("ls of an empty prefix wrote %q, %v; want nothing", got.String(), err)
	}
}

type sliceLister []string

func (l sliceLister) List(prefix string, fn func(*inspect.Entry) error) error {
	for i, k := range l {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		e := inspect.Entry{Key: k, ModRevision: int64(i * 1000), Size: int64(i * 77), Encoding: []string{"protobuf", "json", "raw"}[i%3]}
		if err := fn(&e); err != nil {
			return err
		}
	}
	return nil
}
