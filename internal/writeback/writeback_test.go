package writeback

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestWriterContent(t *testing.T) {
	tests := []struct {
		name      string
		chunk     int64
		size      int
		writeSize int
		prefix    int // bytes already in the file before NewWriter
	}{
		{name: "disabled", chunk: 0, size: 1 << 20, writeSize: 32 << 10},
		{name: "page chunks", chunk: 4096, size: 1<<20 + 123, writeSize: 32 << 10},
		{name: "odd chunk odd writes", chunk: 10007, size: 300001, writeSize: 4099},
		{name: "writes larger than chunk", chunk: 8192, size: 1 << 20, writeSize: 100000},
		{name: "tiny writes", chunk: 4096, size: 20000, writeSize: 1},
		{name: "smaller than one chunk", chunk: 8 << 20, size: 5000, writeSize: 1000},
		{name: "non-zero start offset", chunk: 4096, size: 100000, writeSize: 3000, prefix: 777},
		{name: "empty", chunk: 4096, size: 0, writeSize: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			prefix := bytes.Repeat([]byte{'p'}, tt.prefix)
			if _, err := f.Write(prefix); err != nil {
				t.Fatal(err)
			}
			data := randomBytes(tt.size, uint64(tt.size))
			w := NewWriter(f, tt.chunk)
			for rest := data; len(rest) > 0; {
				n := min(tt.writeSize, len(rest))
				got, err := w.Write(rest[:n])
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if got != n {
					t.Fatalf("Write returned %d, want %d", got, n)
				}
				rest = rest[n:]
			}
			if err := w.Sync(); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := append(prefix, data...)
			if !bytes.Equal(got, want) {
				t.Fatalf("file content differs: got %d bytes, want %d bytes", len(got), len(want))
			}
		})
	}
}

// TestWriterUsesSyncFileRange makes sure the incremental writeback is really
// active on Linux and does not silently fall back to plain writes.
func TestWriterUsesSyncFileRange(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sync_file_range is Linux-only")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := NewWriter(f, 4096)
	if _, err := w.Write(make([]byte, 5*4096+1)); err != nil {
		t.Fatal(err)
	}
	if w.chunk == 0 {
		t.Fatal("writer fell back to plain writes on Linux")
	}
	if got, want := w.started, int64(5*4096); got != want {
		t.Errorf("writeback started up to %d, want %d", got, want)
	}
	if got, want := w.waited, int64(3*4096); got != want { // chunks 3 and 4 in flight
		t.Errorf("writeback waited up to %d, want %d", got, want)
	}
}

func TestWriterOnPipeIsPlain(t *testing.T) {
	r, wf, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data := randomBytes(100000, 7)
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	w := NewWriter(wf, 4096)
	if _, err := w.Write(data); err != nil {
		t.Fatalf("Write: %v", err)
	}
	wf.Close()
	if got := <-done; !bytes.Equal(got, data) {
		t.Fatalf("pipe received %d bytes, want %d", len(got), len(data))
	}
}

func TestWriteFileAtomic(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		old     []byte // existing content; nil = no file
		write   []byte
		fnErr   error
		want    []byte
		wantErr error
	}{
		{name: "new file", write: []byte("hello"), want: []byte("hello")},
		{name: "replace file", old: []byte("old content"), write: []byte("new"), want: []byte("new")},
		{name: "large file", write: randomBytes(DefaultChunk*2+5, 3), want: randomBytes(DefaultChunk*2+5, 3)},
		{name: "fn error keeps old file", old: []byte("old content"), write: []byte("partial"), fnErr: errBoom, want: []byte("old content"), wantErr: errBoom},
		{name: "fn error no old file", write: []byte("partial"), fnErr: errBoom, wantErr: errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			if tt.old != nil {
				if err := os.WriteFile(path, tt.old, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := WriteFileAtomic(path, FileOptions{}, func(w io.Writer) error {
				if _, err := w.Write(tt.write); err != nil {
					return err
				}
				return tt.fnErr
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WriteFileAtomic error = %v, want %v", err, tt.wantErr)
			}
			got, rerr := os.ReadFile(path)
			switch {
			case tt.want == nil && !errors.Is(rerr, os.ErrNotExist):
				t.Errorf("file exists after failed write (read error %v)", rerr)
			case tt.want != nil && rerr != nil:
				t.Errorf("read file: %v", rerr)
			case tt.want != nil && !bytes.Equal(got, tt.want):
				t.Errorf("content: got %d bytes, want %d bytes", len(got), len(tt.want))
			}
			var names []string
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			var wantNames []string
			if tt.want != nil {
				wantNames = []string{"state.json"}
			}
			if diff := cmp.Diff(wantNames, names); diff != "" {
				t.Errorf("directory entries (-want +got):\n%s", diff)
			}
			if tt.want != nil {
				st, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if got := st.Mode().Perm(); got != 0o600 {
					t.Errorf("mode %v, want 0600", got)
				}
			}
		})
	}
}

func TestWriteFileAtomicPerm(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	if err := WriteFileAtomic(path, FileOptions{Perm: 0o640}, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o640 {
		t.Errorf("mode %v, want 0640", got)
	}
}

func TestWriteFileAtomicMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "x")
	err := WriteFileAtomic(path, FileOptions{}, func(w io.Writer) error { return nil })
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error = %v, want ErrNotExist", err)
	}
}

// TestWriteFileAtomicNoReplace: with NoReplace an existing file is never
// touched, whether it was there before (fn does not even run) or appeared
// while fn wrote; the temporary file is gone either way, and it carries
// the caller's prefix while it exists.
func TestWriteFileAtomicNoReplace(t *testing.T) {
	tests := []struct {
		name     string
		old      bool // a file exists before the write
		appear   bool // a file appears while fn writes
		wantErr  bool
		wantRuns bool // fn runs
	}{
		{name: "new file", wantRuns: true},
		{name: "existing file", old: true},
		{name: "file appears meanwhile", appear: true, wantErr: true, wantRuns: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "obj")
			if tt.old {
				if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ran := false
			err := WriteFileAtomic(path, FileOptions{NoReplace: true, TempPrefix: ".tmp-obj-"}, func(w io.Writer) error {
				ran = true
				names := dirNames(t, dir)
				if len(names) != 1 || !strings.HasPrefix(names[0], ".tmp-obj-") {
					t.Errorf("while writing the directory holds %v, want one .tmp-obj-* file", names)
				}
				if tt.appear {
					if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				_, err := w.Write([]byte("new"))
				return err
			})
			if ran != (tt.wantRuns) {
				t.Errorf("fn ran = %v, want %v", ran, tt.wantRuns)
			}
			want := "new"
			if tt.old || tt.appear {
				want = "old"
				if !errors.Is(err, fs.ErrExist) {
					t.Fatalf("error = %v, want fs.ErrExist", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(path); err != nil || string(got) != want {
				t.Errorf("file holds %q (%v), want %q", got, err, want)
			}
			if names := dirNames(t, dir); !slices.Equal(names, []string{"obj"}) {
				t.Errorf("directory holds %v, want only obj", names)
			}
			if st, err := os.Stat(path); err == nil && !tt.old && !tt.appear && st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", st.Mode().Perm())
			}
		})
	}
}

// TestCommitFile installs a file the caller wrote, replacing or refusing
// to replace the target.
func TestCommitFile(t *testing.T) {
	for _, noReplace := range []bool{false, true} {
		t.Run(fmt.Sprintf("noReplace=%v", noReplace), func(t *testing.T) {
			dir := t.TempDir()
			tmp, path := filepath.Join(dir, ".x.tmp"), filepath.Join(dir, "x")
			if err := os.WriteFile(tmp, []byte("one"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := CommitFile(tmp, path, noReplace); err != nil {
				t.Fatalf("CommitFile: %v", err)
			}
			if err := os.WriteFile(tmp, []byte("two"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := CommitFile(tmp, path, noReplace)
			want := "two"
			if noReplace {
				want = "one"
				if !errors.Is(err, fs.ErrExist) {
					t.Fatalf("second CommitFile = %v, want fs.ErrExist", err)
				}
				if _, err := os.Stat(tmp); err != nil {
					t.Errorf("refused commit removed tmp: %v", err)
				}
			} else if err != nil {
				t.Fatalf("second CommitFile: %v", err)
			}
			if got, _ := os.ReadFile(path); string(got) != want {
				t.Errorf("file holds %q, want %q", got, want)
			}
		})
	}
	if err := CommitFile(filepath.Join(t.TempDir(), "missing"), filepath.Join(t.TempDir(), "x"), false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CommitFile of a missing file = %v, want fs.ErrNotExist", err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatalf("SyncDir: %v", err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("SyncDir on missing dir = %v, want ErrNotExist", err)
	}
}
