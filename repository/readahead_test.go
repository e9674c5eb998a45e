package repository

import (
	"bytes"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

// countingReader counts its reads.
type countingReader struct {
	r     io.Reader
	reads atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.r.Read(p)
}

// TestReadAhead: the read-ahead below the zstd decoder hands over the
// bytes in order and then the reader's own error (a store's or the
// object check's, which callers test with errors.Is), and after Close its
// goroutine reads no more.
func TestReadAhead(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 10000)
	t.Run("bytes then EOF", func(t *testing.T) {
		ra := newReadAhead(iotest.HalfReader(bytes.NewReader(data)), 1000, 3)
		defer ra.Close()
		got, err := io.ReadAll(iotest.OneByteReader(ra))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("got %d bytes, want the %d given, in order", len(got), len(data))
		}
	})
	t.Run("the reader's error", func(t *testing.T) {
		r := io.MultiReader(bytes.NewReader(data), iotest.ErrReader(ErrObjectMismatch))
		ra := newReadAhead(r, 4096, 2)
		defer ra.Close()
		got, err := io.ReadAll(ra)
		if !errors.Is(err, ErrObjectMismatch) {
			t.Fatalf("error %v, want ErrObjectMismatch", err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("got %d bytes before the error, want %d", len(got), len(data))
		}
	})
	t.Run("close stops reading", func(t *testing.T) {
		cr := &countingReader{r: bytes.NewReader(data)}
		ra := newReadAhead(iotest.OneByteReader(cr), 100, 2)
		if _, err := io.ReadFull(ra, make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
		ra.Close()
		n := cr.reads.Load()
		if n >= int64(len(data)) {
			t.Fatalf("%d reads before Close: read everything ahead", n)
		}
		if _, err := ra.Read(make([]byte, 1)); err == nil {
			t.Error("Read after Close succeeded")
		}
		if got := cr.reads.Load(); got != n {
			t.Errorf("%d reads after Close, want none", got-n)
		}
		ra.Close() // idempotent
	})
}
