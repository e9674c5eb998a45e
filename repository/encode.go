package repository

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"filippo.io/age"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Encoding says how a snapshot is turned into a stored object: compressed
// with zstd (or s2), then encrypted with age when recipients are set.
type Encoding struct {
	// Compression is "zstd" (default), "s2" or "none". Change segments
	// are compressed with zstd unless it is "none" (segmentEncoding).
	Compression string
	// Recipients encrypt the object; empty means no encryption.
	Recipients []age.Recipient
	// RecipientKeys are the recipients' public keys as written in the
	// manifest (age1…), in the same order.
	RecipientKeys []string
}

// ValidateCompression is the one rule for a compression name (the
// configuration checks store.compression with it): zstd, s2 or none.
func ValidateCompression(name string) error {
	switch name {
	case "zstd", "s2", "none":
		return nil
	}
	return fmt.Errorf("%q is not zstd, s2 or none", name)
}

// Validate reports whether e can encode: a known compression ("" is zstd).
func (e Encoding) Validate() error {
	if e.Compression != "" {
		if err := ValidateCompression(e.Compression); err != nil {
			return fmt.Errorf("compression: %w", err)
		}
	}
	return nil
}

// Suffix returns the data object's file name suffix, e.g. ".db.zst.age"
// (".db.s2.age" with s2).
func (e Encoding) Suffix() string {
	s := ".db"
	switch e.CompressionName() {
	case "zstd":
		s += ".zst"
	case "s2":
		s += ".s2"
	}
	if len(e.Recipients) > 0 {
		s += ".age"
	}
	return s
}

func (e Encoding) compress() bool { return e.Compression != "none" }

// CompressionName returns the manifest's compression value.
func (e Encoding) CompressionName() string {
	switch {
	case !e.compress():
		return "none"
	case e.Compression == "s2":
		return "s2"
	}
	return "zstd"
}

// segmentEncoding is e for change segments: zstd whenever e compresses.
// A segment is a few KiB to MiB, written once a second: zstd's ratio
// matters there and its CPU does not (s2 is for the snapshot's bulk).
func (e Encoding) segmentEncoding() Encoding {
	if e.compress() {
		e.Compression = "zstd"
	}
	return e
}

// EncryptionName returns the manifest's encryption value.
func (e Encoding) EncryptionName() string {
	if len(e.Recipients) > 0 {
		return "age"
	}
	return "none"
}

// NewEncoder returns a writer that encodes what is written to it into w,
// synchronously in the writing goroutine (zstd runs with concurrency 1, so
// a caller can run it on a low-priority thread).
// Close flushes the encoders (it does not close w). Memory is bounded by
// the zstd window, independent of the object's size.
func NewEncoder(w io.Writer, e Encoding) (io.WriteCloser, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	var closers []io.Closer
	out := w
	if len(e.Recipients) > 0 {
		aw, err := age.Encrypt(w, e.Recipients...)
		if err != nil {
			return nil, fmt.Errorf("age encryption: %w", err)
		}
		closers = append(closers, aw)
		out = aw
	}
	switch e.CompressionName() {
	case "zstd":
		zw, err := zstd.NewWriter(out, zstdOptions()...)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		closers = append(closers, zw)
		out = zw
	case "s2":
		sw := s2.NewWriter(out, s2.WriterConcurrency(1))
		closers = append(closers, sw)
		out = sw
	}
	return &encoder{w: out, closers: closers}, nil
}

// zstdOptions is the snapshot's zstd encoder: the fastest level on one
// thread, a 1 MiB window, no frame checksum (BenchmarkEncodeLevers
// measures each against its alternatives).
func zstdOptions() []zstd.EOption {
	return []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(encoderWindow), zstd.WithEncoderCRC(false)}
}

// encoderWindow is zstd's window: 1 MiB instead of the fastest level's
// 4 MiB keeps the encoder's buffers at 3 MB instead of 9 MB (and the
// decoder's smaller) for 0.1 % of size on a snapshot of Kubernetes objects
// (17.53 % of the raw size instead of 17.45 % on the 347 MiB bench
// database), at the same CPU (docs/benchmarks.md, issue 24).
const encoderWindow = 1 << 20

// New objects carry no zstd frame checksum (xxhash64): the raw snapshot's
// sha256 trailer, checked against the manifest by every fetch and by
// etcdutl's restore, already covers the same bytes, and the object's own
// sha256 and age's authentication cover the stored ones. Hashing them a
// third time cost 5.5 % of the encoder's CPU, and as much again in every
// drill's decoder (issue 24). Older objects keep theirs; the decoder checks
// it when present.

type encoder struct {
	w       io.Writer
	closers []io.Closer // outermost first reversed: closed innermost (last added) first
}

func (e *encoder) Write(p []byte) (int, error) { return e.w.Write(p) }

func (e *encoder) Close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i].Close())
	}
	return errors.Join(errs...)
}

// ErrDecrypt is wrapped when no given identity can decrypt an object.
var ErrDecrypt = errors.New("cannot decrypt with the given identity")

// ErrNoIdentity is wrapped when an object is encrypted but no identity was given.
var ErrNoIdentity = errors.New("backup is encrypted: an age identity is needed (--identity-file)")

// NewDecoder returns a reader of the raw snapshot from r, an object encoded
// as compression and encryption say ("zstd"/"s2"/"none", "age"/"none").
func NewDecoder(r io.Reader, compression, encryption string, ids []age.Identity) (io.ReadCloser, error) {
	in := r
	switch encryption {
	case "none", "":
	case "age":
		if len(ids) == 0 {
			return nil, ErrNoIdentity
		}
		head := &headRecorder{r: r}
		dr, err := age.Decrypt(head, ids...)
		if err != nil {
			var nm *age.NoIdentityMatchError
			if errors.As(err, &nm) {
				if what := describeStanzas(head.buf); what != "" {
					return nil, fmt.Errorf("%w: the object is encrypted to %s", ErrDecrypt, what)
				}
				return nil, ErrDecrypt
			}
			return nil, fmt.Errorf("age decryption: %w", err)
		}
		in = dr
	default:
		return nil, fmt.Errorf("unknown encryption %q", encryption)
	}
	switch compression {
	case "none", "":
		return io.NopCloser(in), nil
	case "zstd", "s2":
		var ra *readAhead
		if readAheadChunks > 0 {
			ra = newReadAhead(in, readAheadChunk, readAheadChunks)
			in = ra
		}
		if compression == "s2" {
			return &decompressor{r: s2.NewReader(in), ra: ra}, nil
		}
		zr, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(decoderConcurrency))
		if err != nil {
			if ra != nil {
				ra.Close()
			}
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return &decompressor{r: zr, release: zr.Close, ra: ra}, nil
	default:
		return nil, fmt.Errorf("unknown compression %q", compression)
	}
}

// decoderConcurrency is the zstd decoder's: 1 decodes in the reading
// goroutine (a variable for BenchmarkDecode).
var decoderConcurrency = 1

// The read-ahead below the zstd decoder: readAheadChunks chunks of
// readAheadChunk bytes in flight (0 chunks: none, for BenchmarkDecode).
var (
	readAheadChunk  = 256 << 10
	readAheadChunks = 4
)

// decompressor decompresses (zstd or s2); Close stops the read-ahead
// (waiting for its goroutine) and releases the decoder. Close is
// idempotent.
type decompressor struct {
	r       io.Reader
	release func() // the decoder's resources; nil when it has none
	ra      *readAhead
	once    sync.Once
}

func (z *decompressor) Read(p []byte) (int, error) { return z.r.Read(p) }

// stopReadAhead stops the read-ahead: then the reader below can be read
// by the caller (to drain it after the decoder's end).
func (z *decompressor) stopReadAhead() {
	if z.ra != nil {
		z.ra.Close()
	}
}

func (z *decompressor) Close() error {
	z.once.Do(func() {
		if z.ra != nil {
			z.ra.Close()
		}
		if z.release != nil {
			z.release()
		}
	})
	return nil
}

// readAhead reads r in a goroutine of its own, chunk after chunk, so that
// what lies below the zstd decoder (the store's bytes, their sha256,
// age's decryption) runs beside decompression instead of in turn with it:
// decompression is the longest step of a drill's decode and has a core to
// itself. Memory: chunks+1 buffers. Read returns r's bytes in order, then
// r's error (io.EOF at its end). Close stops the goroutine and waits for
// it; after Close nobody reads r any more. Read and Close are for one
// goroutine.
type readAhead struct {
	full   chan []byte
	free   chan []byte
	done   chan struct{}
	wg     sync.WaitGroup
	err    error // r's error, set before full is closed
	buf    []byte
	off    int
	closed bool
}

func newReadAhead(r io.Reader, chunk, chunks int) *readAhead {
	ra := &readAhead{full: make(chan []byte, chunks), free: make(chan []byte, chunks+1), done: make(chan struct{})}
	for range chunks + 1 {
		ra.free <- make([]byte, chunk)
	}
	ra.wg.Go(func() {
		defer close(ra.full)
		for {
			var buf []byte
			select {
			case buf = <-ra.free:
			case <-ra.done:
				return
			}
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				select {
				case ra.full <- buf[:n]:
				case <-ra.done:
					return
				}
			}
			if err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
			if err != nil {
				ra.err = err
				return
			}
		}
	})
	return ra
}

func (ra *readAhead) Read(p []byte) (int, error) {
	if ra.closed {
		return 0, errors.New("read after close")
	}
	for ra.off == len(ra.buf) {
		if ra.buf != nil {
			ra.free <- ra.buf[:cap(ra.buf)]
			ra.buf, ra.off = nil, 0
		}
		buf, ok := <-ra.full
		if !ok {
			return 0, ra.err
		}
		ra.buf = buf
	}
	n := copy(p, ra.buf[ra.off:])
	ra.off += n
	return n, nil
}

func (ra *readAhead) Close() {
	if ra.closed {
		return
	}
	ra.closed = true
	close(ra.done)
	ra.wg.Wait()
}

// ParseRecipients parses age X25519 recipients (age1…) given inline and in
// recipient files (one per line, # comments). It returns the recipients and
// their canonical public keys.
func ParseRecipients(keys []string, files []string) ([]age.Recipient, []string, error) {
	var rs []age.Recipient
	var names []string
	add := func(s, where string) error {
		s = strings.TrimSpace(s)
		if s == "" || strings.HasPrefix(s, "#") {
			return nil
		}
		r, err := age.ParseX25519Recipient(s)
		if err != nil {
			return fmt.Errorf("%s: not an age X25519 recipient (age1…): %w", where, err)
		}
		rs = append(rs, r)
		names = append(names, r.String())
		return nil
	}
	for i, k := range keys {
		if err := add(k, fmt.Sprintf("recipient #%d", i+1)); err != nil {
			return nil, nil, err
		}
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, nil, fmt.Errorf("recipients file: %w", err)
		}
		sc := bufio.NewScanner(fh)
		line := 0
		for sc.Scan() {
			line++
			if err := add(sc.Text(), fmt.Sprintf("recipients file %s line %d", f, line)); err != nil {
				fh.Close()
				return nil, nil, err
			}
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("recipients file %s: %w", f, err)
		}
	}
	return rs, names, nil
}

// ParseIdentityFile reads age identities (AGE-SECRET-KEY-1…) from path.
// Errors never include key material.
func ParseIdentityFile(path string) ([]age.Identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("identity file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("identity file: %w", err)
	}
	ids, err := age.ParseIdentities(bytes.NewReader(data))
	if err != nil {
		if _, rerr := age.ParseRecipients(bytes.NewReader(data)); rerr == nil {
			return nil, fmt.Errorf("identity file %s holds an age public key (a recipient, age1…), not an identity: give the file age-keygen wrote, with the AGE-SECRET-KEY-1… line (the public key is for encryption.recipients)", path)
		}
		return nil, fmt.Errorf("identity file %s: not a valid age identity file (want the AGE-SECRET-KEY-1… lines age-keygen writes)", path)
	}
	return ids, nil
}

// headRecorder passes reads through and keeps the first headMax bytes:
// an age header, whose stanzas say what an object is encrypted to when
// no identity opens it.
type headRecorder struct {
	r   io.Reader
	buf []byte
}

// headMax bounds what headRecorder keeps (an age header with a few dozen
// recipients).
const headMax = 16 << 10

func (h *headRecorder) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if room := headMax - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(n, room)]...)
	}
	return n, err
}

// describeStanzas says what an age header's recipient stanzas are, as
// "2 X25519 recipients and 1 scrypt": an X25519 recipient's public key is
// not in its stanza, but the stanzas' types and count are. "" when head
// holds no stanza.
func describeStanzas(head []byte) string {
	var order []string
	count := map[string]int{}
	for line := range bytes.SplitSeq(head, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("---")) {
			break
		}
		f := bytes.Fields(line)
		if len(f) < 2 || string(f[0]) != "->" {
			continue
		}
		t := string(f[1])
		if count[t] == 0 {
			order = append(order, t)
		}
		count[t]++
	}
	var parts []string
	for _, t := range order {
		part := fmt.Sprintf("%d %s", count[t], t)
		if t == "X25519" {
			part += " recipient"
			if count[t] > 1 {
				part += "s"
			}
		}
		parts = append(parts, part)
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
