package repository

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/uploader"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// FetchOptions tune Fetch.
type FetchOptions struct {
	// Identities decrypt encrypted backups.
	Identities []age.Identity
	// Progress, when set, is called as bytes arrive with the stored
	// (encoded) bytes read so far and the raw snapshot bytes written. It
	// is called from one goroutine at a time, often: throttle in it.
	Progress func(stored, raw int64)
	// Now is the clock for the phase durations (time.Now when nil).
	Now func() time.Time
}

// FetchResult describes what Fetch read and wrote. On error it holds what
// was learnt before the failure.
type FetchResult struct {
	// Path is the raw snapshot written: the bbolt database followed by
	// etcd's sha256 trailer, as `etcdctl snapshot save` writes it.
	Path string
	// ObjectSize is the number of stored bytes read. (Their sha256 is
	// checked against the manifest as they stream; see ObjectDigest for
	// the actual value when it differs.)
	ObjectSize int64
	// Size is the raw snapshot's size; SnapshotSHA256 its trailer digest
	// (empty when the trailer is missing or wrong).
	Size           int64
	SnapshotSHA256 string
	// Fetch is the time spent waiting for the store's bytes, Decode the
	// rest of the stream (decrypt, decompress, write, hash). Both run in
	// one overlapped stream, so their sum is its wall time.
	Fetch, Decode time.Duration
}

// chunkSize is the unit the decoded stream is handed over in.
const chunkSize = 1 << 20

// Fetch streams backup m from b into a new file at path (0600; it must not
// exist), decrypting and decompressing on the way, and checks it: the
// stored object's size and sha256 against the manifest (an error wrapping
// ErrObjectMismatch), etcd's sha256 trailer (verify.ErrCorrupt)
// and the trailer's digest against the manifest's snapshot sha256
// (verify.ErrManifestMismatch). Decoding and writing run in two goroutines
// so the download, decryption and decompression overlap the disk write
// and the trailer hash. On error the file is removed.
func Fetch(ctx context.Context, b *Repo, m *Manifest, path string, o FetchOptions) (res *FetchResult, err error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	res = &FetchResult{Path: path}
	start := now()
	ms := &meteredStore{Store: b.Store, now: now}
	defer func() {
		res.ObjectSize = ms.n.Load()
		total := now().Sub(start)
		res.Fetch = min(time.Duration(ms.waited.Load()), total)
		res.Decode = total - res.Fetch
	}()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return res, fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	mb := &Repo{Store: ms, Cluster: b.Cluster}
	rc, err := mb.Open(ctx, m, o.Identities)
	if err != nil {
		f.Close()
		return res, err
	}
	th := verify.NewTrailerHash()
	// Written back as it goes (writeback.Writer, as the backup's spool):
	// dirty pages stay bounded, so no later sync or flush writes a
	// database-sized file out at once beside etcd's WAL on a shared disk.
	w := writeback.NewWriter(f, writeback.DefaultChunk)
	werr := stream(ctx, rc, func(p []byte) error {
		if _, err := w.Write(p); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		th.Write(p)
		if o.Progress != nil {
			o.Progress(ms.n.Load(), th.Size())
		}
		return nil
	})
	rc.Close()
	if cerr := f.Close(); werr == nil && cerr != nil {
		werr = fmt.Errorf("write %s: %w", path, cerr)
	}
	res.Size = th.Size()
	if werr != nil {
		return res, werr
	}
	return res, checkTrailer(th, m, res)
}

// checkTrailer checks the raw snapshot's trailer hashed by th (etcd's
// sha256 trailer: verify.ErrCorrupt) and its digest against backup m's
// manifest (verify.ErrManifestMismatch), recording the digest in res.
func checkTrailer(th *verify.TrailerHash, m *Manifest, res *FetchResult) error {
	digest, err := th.Check()
	if err != nil {
		return fmt.Errorf("backup %s: %w", m.ID, err)
	}
	res.SnapshotSHA256 = digest
	if digest != m.SnapshotSHA256 {
		return fmt.Errorf("%w: snapshot sha256 %s, manifest says %s", verify.ErrManifestMismatch, digest, m.SnapshotSHA256)
	}
	return nil
}

// stream reads r in chunks in one goroutine and hands them to write in the
// calling one, so that reading (download and decoding) overlaps writing.
func stream(ctx context.Context, r io.Reader, write func([]byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const inFlight = 8
	free := make(chan []byte, inFlight+1)
	for range inFlight + 1 {
		free <- make([]byte, chunkSize)
	}
	full := make(chan []byte, inFlight)
	var rerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(full)
		for {
			var buf []byte
			select {
			case buf = <-free:
			case <-ctx.Done():
				return
			}
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				full <- buf[:n]
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return
			}
			if err != nil {
				rerr = err
				return
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	var werr error
	for buf := range full {
		if werr == nil {
			if err := ctx.Err(); err != nil {
				werr = err
			} else if err := write(buf); err != nil {
				werr = err
				cancel()
			}
		}
		free <- buf[:cap(buf)]
	}
	wg.Wait()
	if rerr != nil {
		return rerr
	}
	if werr != nil {
		return werr
	}
	return ctx.Err()
}

// meteredStore wraps a store for one Fetch: the object reader it returns
// counts and times the stored bytes.
type meteredStore struct {
	uploader.Store
	now    func() time.Time
	n      atomic.Int64
	waited atomic.Int64 // nanoseconds spent in Get and Read
}

func (s *meteredStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	t := s.now()
	rc, err := s.Store.Get(ctx, key)
	s.waited.Add(int64(s.now().Sub(t)))
	if err != nil {
		return nil, err
	}
	return &meteredReader{rc: rc, s: s}, nil
}

type meteredReader struct {
	rc io.ReadCloser
	s  *meteredStore
}

func (r *meteredReader) Read(p []byte) (int, error) {
	t := r.s.now()
	n, err := r.rc.Read(p)
	r.s.waited.Add(int64(r.s.now().Sub(t)))
	r.s.n.Add(int64(n))
	return n, err
}

// ObjectDigest reads backup m's stored object once more and returns its
// size and hex sha256: what a report shows as the actual values when
// Fetch found them different from the manifest's. (Fetch does not hash
// twice on the way: Open's reader already checks the sha256.)
func ObjectDigest(ctx context.Context, b *Repo, m *Manifest) (int64, string, error) {
	rc, err := b.Store.Get(ctx, m.Object)
	if err != nil {
		return 0, "", err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, rc, make([]byte, 1<<20))
	if err != nil {
		return n, "", fmt.Errorf("read %s: %w", m.Object, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func (r *meteredReader) Close() error { return r.rc.Close() }
