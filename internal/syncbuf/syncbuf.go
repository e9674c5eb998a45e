// Package syncbuf provides a bytes.Buffer that several goroutines may
// write to at once: the sink of a logger or of a child process's output.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a goroutine-safe byte buffer. With Max > 0 it drops what it
// holds when it grows past Max bytes, so a long-running writer cannot make
// it grow without bound. The zero value is ready to use.
type Buffer struct {
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Max > 0 && s.b.Len() > s.Max {
		s.b.Reset()
	}
	return s.b.Write(p)
}

// String returns what the buffer holds.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
