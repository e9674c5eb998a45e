package snapshot_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// realStream opens a snapshot stream from the cluster's first member. The
// stream is canceled at cleanup.
func realStream(t *testing.T, c *etcdtest.Cluster) io.ReadCloser {
	t.Helper()
	cc := c.ClientConfig()
	cc.Endpoints = cc.Endpoints[:1]
	cli, err := clientv3New(cc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		cancel()
		_ = cli.Close()
		t.Fatalf("open snapshot stream: %v", err)
	}
	t.Cleanup(func() {
		// Closing the reader is what ends the client's receiving
		// goroutine when it is blocked handing over data.
		_ = resp.Snapshot.Close()
		cancel()
		_ = cli.Close()
	})
	return resp.Snapshot
}

// dropTail passes everything but the last 32 bytes of r: the trailer is
// missing.
type dropTail struct {
	r    io.Reader
	held []byte
	eof  bool
}

func (d *dropTail) Read(p []byte) (int, error) {
	for !d.eof && len(d.held) <= sha256.Size {
		buf := make([]byte, 64<<10)
		n, err := d.r.Read(buf)
		d.held = append(d.held, buf[:n]...)
		if err == io.EOF {
			d.eof = true
		} else if err != nil {
			return 0, err
		}
	}
	avail := len(d.held) - sha256.Size
	if avail <= 0 {
		return 0, io.EOF
	}
	n := copy(p, d.held[:avail])
	d.held = d.held[n:]
	return n, nil
}

// flipAt flips one bit of the byte at offset off.
type flipAt struct {
	r   io.Reader
	off int64
	pos int64
}

func (f *flipAt) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if f.off >= f.pos && f.off < f.pos+int64(n) {
		p[f.off-f.pos] ^= 0x01
	}
	f.pos += int64(n)
	return n, err
}

// interrupt passes the first after bytes of r and then calls do, which
// decides what the next Read returns.
type interrupt struct {
	r     io.Reader
	after int64
	pos   int64
	do    func() error

	mu     sync.Mutex
	closed chan struct{}
}

func newInterrupt(r io.Reader, after int64, do func(closed <-chan struct{}) error) *interrupt {
	in := &interrupt{r: r, after: after, closed: make(chan struct{})}
	in.do = func() error { return do(in.closed) }
	return in
}

func (in *interrupt) Read(p []byte) (int, error) {
	if in.pos >= in.after {
		return 0, in.do()
	}
	if rest := in.after - in.pos; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := in.r.Read(p)
	in.pos += int64(n)
	return n, err
}

// Close unblocks a Read waiting in do, as closing a real stream does.
func (in *interrupt) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	select {
	case <-in.closed:
	default:
		close(in.closed)
	}
	return nil
}

func TestSaveRealStream(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	fill(t, c, 200, 1000) // a database of a few hundred KiB

	t.Run("intact", func(t *testing.T) {
		spool := filepath.Join(t.TempDir(), "snap.db")
		var tee bytes.Buffer
		size, sha, err := snapshot.SaveForTest(t.Context(), realStream(t, c), spool, &tee, snapshot.Options{Chunk: 64 << 10})
		if err != nil {
			t.Fatalf("save: %v", err)
		}
		data := checkSpool(t, spool, size, sha)
		if !bytes.Equal(tee.Bytes(), data) {
			t.Errorf("tee differs from the spool file")
		}
		if size < 100<<10 {
			t.Errorf("snapshot is only %d bytes; the corruption cases below need a larger one", size)
		}
	})

	errInjected := errors.New("injected stream failure")
	tests := []struct {
		name    string
		wrap    func(r io.Reader, cancel context.CancelFunc) io.Reader
		opts    snapshot.Options
		wantIs  error
		wantErr []string
	}{
		{name: "trailer missing", wrap: func(r io.Reader, _ context.CancelFunc) io.Reader { return &dropTail{r: r} },
			wantIs: snapshot.ErrTrailer, wantErr: []string{"trailer sha256 missing", "retry"}},
		{name: "truncated mid-stream", wrap: func(r io.Reader, _ context.CancelFunc) io.Reader { return io.LimitReader(r, 50000) },
			wantIs: snapshot.ErrTrailer, wantErr: []string{"after 50000 bytes", "cut short"}},
		{name: "truncated at a sector plus 32", wrap: func(r io.Reader, _ context.CancelFunc) io.Reader { return io.LimitReader(r, 20*4096+32) },
			wantIs: snapshot.ErrTrailer, wantErr: []string{"trailer sha256 mismatch", "corrupted in transit"}},
		{name: "one byte flipped", wrap: func(r io.Reader, _ context.CancelFunc) io.Reader { return &flipAt{r: r, off: 70000} },
			wantIs: snapshot.ErrTrailer, wantErr: []string{"trailer sha256 mismatch", "corrupted in transit"}},
		{name: "first byte flipped", wrap: func(r io.Reader, _ context.CancelFunc) io.Reader { return &flipAt{r: r, off: 0} },
			wantIs: snapshot.ErrTrailer, wantErr: []string{"trailer sha256 mismatch"}},
		{name: "stream error mid-way", wrap: func(r io.Reader, _ context.CancelFunc) io.Reader {
			return newInterrupt(r, 30000, func(<-chan struct{}) error { return errInjected })
		}, wantIs: errInjected, wantErr: []string{"read snapshot stream", "after 30000 bytes"}},
		{name: "stall mid-way", opts: snapshot.Options{StallTimeout: 200 * time.Millisecond}, wrap: func(r io.Reader, _ context.CancelFunc) io.Reader {
			return newInterrupt(r, 30000, func(closed <-chan struct{}) error { <-closed; return io.ErrClosedPipe })
		}, wantIs: snapshot.ErrStalled, wantErr: []string{"no data for 200ms after 30000 bytes"}},
		{name: "stall before the first byte", opts: snapshot.Options{StallTimeout: 200 * time.Millisecond}, wrap: func(r io.Reader, _ context.CancelFunc) io.Reader {
			return newInterrupt(r, 0, func(closed <-chan struct{}) error { <-closed; return io.ErrClosedPipe })
		}, wantIs: snapshot.ErrStalled, wantErr: []string{"after 0 bytes"}},
		{name: "canceled mid-way", wrap: func(r io.Reader, cancel context.CancelFunc) io.Reader {
			return newInterrupt(r, 30000, func(closed <-chan struct{}) error { cancel(); <-closed; return io.ErrClosedPipe })
		}, wantIs: context.Canceled, wantErr: []string{"after 30000 bytes"}},
		{name: "overall timeout", opts: snapshot.Options{Timeout: 300 * time.Millisecond}, wrap: func(r io.Reader, _ context.CancelFunc) io.Reader {
			return newInterrupt(r, 30000, func(closed <-chan struct{}) error { <-closed; return io.ErrClosedPipe })
		}, wantIs: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			spool := filepath.Join(t.TempDir(), "snap.db")
			var tee bytes.Buffer
			size, sha, err := snapshot.SaveForTest(ctx, tt.wrap(realStream(t, c), cancel), spool, &tee, tt.opts)
			t.Logf("error: %v", err)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("save error = %v, want %v", err, tt.wantIs)
			}
			checkErr(t, err, append([]string{spool}, tt.wantErr...))
			if sha != "" {
				t.Errorf("sha = %q on failure, want empty", sha)
			}
			if size != int64(tee.Len()) {
				t.Errorf("size = %d, but the tee got %d bytes", size, tee.Len())
			}
			checkNoSpool(t, spool)
		})
	}
}

func TestSaveSpoolExists(t *testing.T) {
	dir := t.TempDir()
	spool := filepath.Join(dir, "snap.db")
	if err := os.WriteFile(spool, []byte("older"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := snapshot.SaveForTest(t.Context(), bytes.NewReader(nil), spool, nil, snapshot.Options{})
	if !errors.Is(err, os.ErrExist) {
		t.Fatalf("save error = %v, want ErrExist", err)
	}
	if got, _ := os.ReadFile(spool); string(got) != "older" {
		t.Errorf("existing file was changed to %q", got)
	}
}

func TestPrepareSpoolDir(t *testing.T) {
	base := t.TempDir()
	aFile := filepath.Join(base, "file")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly := mountTmpfs(t, unix.MS_RDONLY, "size=1m")
	tests := []struct {
		name    string
		dir     string
		wantErr []string // nil: success
	}{
		{name: "created", dir: filepath.Join(base, "new", "spool")},
		{name: "existing", dir: base},
		{name: "empty", dir: "", wantErr: []string{"--spool-dir"}},
		{name: "a file", dir: aFile, wantErr: []string{aFile, "not a directory", "--spool-dir"}},
		{name: "below a file", dir: filepath.Join(aFile, "sub"), wantErr: []string{aFile, "--spool-dir"}},
		{name: "read-only file system", dir: readOnly, wantErr: []string{readOnly, "not writable", "--spool-dir"}},
		{name: "missing below a read-only file system", dir: filepath.Join(readOnly, "x"), wantErr: []string{readOnly, "--spool-dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := snapshot.PrepareSpoolDir(tt.dir)
			if tt.wantErr != nil {
				t.Logf("error: %v", err)
				checkErr(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("PrepareSpoolDir: %v", err)
			}
			st, err := os.Stat(tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			if !st.IsDir() {
				t.Fatalf("%s is not a directory", tt.dir)
			}
			entries, err := os.ReadDir(tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.Name() != "new" && e.Name() != "file" {
					t.Errorf("probe file %s left behind", e.Name())
				}
			}
		})
	}
	st, err := os.Stat(filepath.Join(base, "new", "spool"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o700 {
		t.Errorf("created spool dir has mode %v, want 0700", got)
	}
}

func TestTakeSpoolFailures(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	fill(t, c, 40, 64<<10) // about 2.5 MiB: more than the small tmpfs holds

	t.Run("disk full", func(t *testing.T) {
		dir := mountTmpfs(t, 0, "size=1m,mode=0700")
		spool := filepath.Join(dir, "snap.db")
		_, err := take(t.Context(), configFor(c), spool, nil, snapshot.Options{}, nil)
		t.Logf("error: %v", err)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("error %v is not ENOSPC", err)
		}
		checkErr(t, err, []string{spool, "disk full", "--spool-dir", c.Members[0].ClientURL})
		checkNoSpool(t, spool)
	})
	t.Run("read-only spool dir", func(t *testing.T) {
		dir := mountTmpfs(t, unix.MS_RDONLY, "size=1m")
		spool := filepath.Join(dir, "snap.db")
		_, err := take(t.Context(), configFor(c), spool, nil, snapshot.Options{}, nil)
		t.Logf("error: %v", err)
		checkErr(t, err, []string{spool, "--spool-dir"})
		checkNoSpool(t, spool)
	})
	t.Run("canceled by the caller", func(t *testing.T) {
		spool := filepath.Join(t.TempDir(), "snap.db")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// The tee cancels as soon as the first bytes arrive, like SIGINT
		// in the middle of a large snapshot.
		tee := writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
		_, err := take(ctx, configFor(c), spool, tee, snapshot.Options{Chunk: -1}, nil)
		t.Logf("error: %v", err)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v is not context.Canceled", err)
		}
		checkNoSpool(t, spool)
	})
	t.Run("tee fails", func(t *testing.T) {
		spool := filepath.Join(t.TempDir(), "snap.db")
		errTee := errors.New("compressor broke")
		tee := writerFunc(func(p []byte) (int, error) { return 0, errTee })
		_, err := take(t.Context(), configFor(c), spool, tee, snapshot.Options{}, nil)
		if !errors.Is(err, errTee) {
			t.Errorf("error %v does not wrap the tee's error", err)
		}
		checkNoSpool(t, spool)
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
