package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// SnapshotJob is one backup: take a snapshot from etcd, verify it, encode
// it and store it, then commit it with its manifest.
type SnapshotJob struct {
	// Etcd is how to reach the cluster.
	Etcd snapshot.Config
	// Options tune the stream (stall timeout, writeback).
	Options snapshot.Options
	// SpoolDir holds the raw snapshot while it is verified (0700; the file
	// is always removed afterwards).
	SpoolDir string
	// Backups is where the backup goes.
	Backups *uploader.Backups
	// Encoding is how the object is compressed and encrypted.
	Encoding uploader.Encoding
	// LockMode, LockRetain and LegalHold request Object Lock retention.
	LockMode   string
	LockRetain time.Duration
	LegalHold  bool
	// LiveHashKV is snapshot.live_hashkv: whether the file's HashKV is
	// compared with a live member's (snapshot.LiveHashKVAlways when empty).
	LiveHashKV string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Version is lifeboat's version, recorded in the manifest.
	Version string
}

// ErrExists is wrapped when a backup with the same id is already stored.
var ErrExists = errors.New("backup exists")

// ErrVerify is wrapped when a snapshot was taken but failed verification:
// nothing was kept.
var ErrVerify = errors.New("snapshot failed verification")

// Snapshot runs the job. It returns the committed manifest; on any error
// nothing is kept: the upload is aborted, no manifest is written and the
// spool file is removed.
//
// The work overlaps: bytes from etcd go to the spool file and, as they
// arrive, through the encoder into the store. The store sees the end of
// the object only once the spool file has been verified; if verification
// fails, the store's Put is failed and aborts.
func Snapshot(ctx context.Context, job SnapshotJob, lg *slog.Logger) (*uploader.Manifest, error) {
	now := job.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	if err := snapshot.PrepareSpoolDir(job.SpoolDir); err != nil {
		return nil, err
	}
	// The id needs a revision before the first byte arrives (the object's
	// key contains it): the highest revision the members report now. The
	// manifest records the snapshot's exact revision.
	members, err := snapshot.Members(ctx, job.Etcd)
	if err != nil {
		return nil, err
	}
	var rev int64
	for _, m := range members {
		if m.Err == nil && m.Revision > rev {
			rev = m.Revision
		}
	}
	id := uploader.NewID(start, rev)
	key := job.Backups.ObjectKey(id, job.Encoding)
	// Ids have a resolution of one second: never let a second backup of
	// the same revision in the same second overwrite the first one.
	for _, k := range []string{job.Backups.ManifestKey(id), key} {
		if _, err := job.Backups.Store.Stat(ctx, k); err == nil {
			return nil, fmt.Errorf("%w: backup %s (this revision, this second) is already stored; not taken again", ErrExists, id)
		} else if !errors.Is(err, uploader.ErrNotFound) {
			return nil, fmt.Errorf("check store for backup %s: %w", id, err)
		}
	}
	spool := filepath.Join(job.SpoolDir, "lifeboat-"+id+"-"+randomSuffix()+".db.part")
	// Removing a large file takes a while (the kernel frees its cached
	// pages): once nothing reads the spool any more it is removed in the
	// background, overlapping the end of the upload. Snapshot returns only
	// when it is gone, on every path.
	var (
		rmOnce sync.Once
		rmDone = make(chan struct{})
	)
	removeSpool := func() {
		rmOnce.Do(func() {
			go func() {
				_ = os.Remove(spool) // absent when Take failed and removed it
				close(rmDone)
			}()
		})
	}
	defer func() {
		removeSpool()
		<-rmDone
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	pr, pw := io.Pipe()
	gate := newGate(pr)
	opts := uploader.PutOptions{ContentType: "application/octet-stream", LockMode: job.LockMode, LegalHold: job.LegalHold}
	if job.LockMode != "" {
		opts.RetainUntil = start.Add(job.LockRetain).UTC().Truncate(time.Second)
	}
	var (
		wg     sync.WaitGroup
		obj    uploader.ObjectInfo
		putErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		obj, putErr = job.Backups.Store.Put(ctx, key, gate, opts)
		// Unblock the writer if Put stopped reading early.
		pr.CloseWithError(fmt.Errorf("store stopped reading: %v", putErr))
	}()
	fail := func(err error) (*uploader.Manifest, error) {
		gate.decide(err)
		pw.CloseWithError(err)
		cancel()
		wg.Wait()
		return nil, err
	}

	enc, err := uploader.NewEncoder(pw, job.Encoding)
	if err != nil {
		return fail(err)
	}
	// The spool file is the buffer between etcd and the store: the stream
	// is written at disk-cache speed (a slow stream holds etcd's read
	// transaction open longer, and stalls writes that need to grow the
	// database), while a second goroutine follows the file and feeds the
	// encoder and the store at their own pace, overlapping verification.
	prog := newSpoolProgress()
	tailDone := make(chan error, 1)
	go func() {
		// Compression runs on its own thread at a lower priority; the
		// thread is never unlocked, so it ends with this goroutine.
		runtime.LockOSThread()
		lowerThreadPriority()
		err := tailSpool(ctx, spool, prog, enc)
		if err != nil {
			cancel() // no point streaming on when the store is gone
		}
		tailDone <- err
	}()
	info, err := snapshot.Take(ctx, job.Etcd, spool, prog, job.Options, lg)
	if err != nil {
		cancel()
		if terr := <-tailDone; terr != nil && !errors.Is(terr, context.Canceled) {
			err = fmt.Errorf("store backup %s: %w", id, terr) // the store failed first
		}
		return fail(err)
	}
	prog.finish(info.Size)
	lg.Info("snapshot received", "endpoint", info.Endpoint, "member", info.MemberName, "bytes", info.Size, "sha256", info.SHA256)

	// The file check and the live member's HashKV run side by side: the
	// snapshot's revision is read first (a few pages), then etcd hashes
	// its store at that revision while File reads the whole spool.
	type verified struct {
		st  verify.Status
		err error
	}
	verifyDone := make(chan verified, 1)
	go func() {
		st, err := verify.File(ctx, spool)
		verifyDone <- verified{st, err}
	}()
	type live struct {
		rev     int64
		hash    uint32
		compact int64
		err     error
	}
	// HashKV is asked of another member than the snapshot's when one can
	// answer: only that detects members that diverged.
	hm, same := snapshot.HashKVMember(members, info.Endpoint)
	deferred := hashKVDeferred(job.LiveHashKV, hm, same)
	revRead := make(chan struct{})
	liveDone := make(chan live, 1)
	var liveWG sync.WaitGroup
	defer liveWG.Wait() // failures cancel ctx first
	liveWG.Go(func() {
		rev, err := verify.Revision(ctx, spool)
		close(revRead)
		if err != nil {
			liveDone <- live{rev: -1, err: err} // File reports the damage
			return
		}
		if deferred != "" {
			liveDone <- live{rev: rev}
			return
		}
		h, c, err := snapshot.LiveHashKV(ctx, job.Etcd, hm.Endpoint, rev)
		liveDone <- live{rev, h, c, err}
	})
	received := now()
	tailErr := <-tailDone
	if tailErr == nil {
		tailErr = enc.Close()
	}
	lg.Debug("spool encoded", "after_stream", now().Sub(received), "err", tailErr)
	v := <-verifyDone
	lg.Debug("spool checked", "after_stream", now().Sub(received), "err", v.err)
	<-revRead
	removeSpool() // every reader of the spool is done
	if tailErr != nil {
		return fail(fmt.Errorf("encode snapshot: %w", tailErr))
	}
	pw.Close() // the store now has every byte but waits at the gate
	st, err := v.st, v.err
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrVerify, err))
	}
	lh := <-liveDone
	lg.Debug("live hashkv", "after_stream", now().Sub(received), "revision", lh.rev, "err", lh.err)
	if lh.rev != st.Revision && deferred == "" {
		// Only a file that changed under us gets here; ask again at the
		// revision File read.
		lh.rev = st.Revision
		lh.hash, lh.compact, lh.err = snapshot.LiveHashKV(ctx, job.Etcd, hm.Endpoint, st.Revision)
	}
	hk := liveHashKV{member: hm, same: same, deferred: deferred, hash: lh.hash, compact: lh.compact, err: lh.err}
	if err := hk.compare(st, lg); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrVerify, err))
	}
	lg.Info("snapshot verified", "revision", st.Revision, "total_keys", st.TotalKeys, "hash_kv", hk.status,
		"hash_kv_endpoint", hm.Endpoint, "hash_kv_same_member", same)

	gate.decide(nil)
	wg.Wait()
	lg.Debug("object stored", "after_stream", now().Sub(received), "err", putErr)
	if putErr != nil {
		return nil, fmt.Errorf("store backup %s: %w", id, putErr)
	}
	m := &uploader.Manifest{
		Format:          uploader.ManifestFormat,
		ID:              id,
		Cluster:         job.Backups.Cluster,
		EtcdClusterID:   fmt.Sprintf("%x", info.ClusterID),
		EtcdMemberID:    fmt.Sprintf("%x", info.MemberID),
		EtcdMemberName:  info.MemberName,
		Endpoint:        info.Endpoint,
		EtcdVersion:     info.EtcdVersion,
		StorageVersion:  st.StorageVersion,
		CreatedAt:       start.UTC(),
		Revision:        st.Revision,
		CompactRevision: st.CompactRevision,
		TotalKeys:       st.TotalKeys,
		DBSize:          st.Size,
		SnapshotSHA256:  info.SHA256,
		BoltHash:        st.BoltHash,
		HashKV:          st.HashKV,
		Object:          key,
		ObjectSize:      obj.Size,
		ObjectSHA256:    obj.SHA256,
		Compression:     job.Encoding.CompressionName(),
		Encryption:      job.Encoding.EncryptionName(),
		Recipients:      job.Encoding.RecipientKeys,
		LockMode:        job.LockMode,
		LegalHold:       job.LegalHold,
		AgentVersion:    job.Version,
	}
	hk.record(m)
	if job.LockMode != "" {
		t := opts.RetainUntil
		m.RetainUntil = &t
	}
	m.DurationSeconds = now().Sub(start).Seconds()
	if err := job.Backups.PutManifest(ctx, m); err != nil {
		// The object stays as an orphan for prune to collect; the
		// backup does not exist.
		return nil, fmt.Errorf("commit backup %s: %w", id, err)
	}
	lg.Info("backup stored", "backup_id", id, "object", key, "bytes", obj.Size, "seconds", strconv.FormatFloat(m.DurationSeconds, 'f', 2, 64))
	return m, nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// gate passes reads through until the underlying reader's io.EOF, then
// blocks until decide is called: with nil it returns io.EOF (the store
// commits the object), with an error it returns that error (the store
// aborts).
type gate struct {
	r    io.Reader
	once sync.Once
	done chan struct{}
	err  error
}

func newGate(r io.Reader) *gate { return &gate{r: r, done: make(chan struct{})} }

func (g *gate) decide(err error) {
	g.once.Do(func() {
		g.err = err
		close(g.done)
	})
}

func (g *gate) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if err != io.EOF {
		return n, err
	}
	if n > 0 {
		return n, nil
	}
	<-g.done
	if g.err != nil {
		return 0, g.err
	}
	return 0, io.EOF
}

// spoolProgress is the tee of snapshot.Take: it counts the bytes already
// written to the spool file and wakes the goroutine that follows it.
type spoolProgress struct {
	n     atomic.Int64
	wake  chan struct{}
	done  chan struct{}
	total int64 // set before done is closed
}

func newSpoolProgress() *spoolProgress {
	return &spoolProgress{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Write never blocks: the bytes are already in the spool file.
func (p *spoolProgress) Write(b []byte) (int, error) {
	p.n.Add(int64(len(b)))
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return len(b), nil
}

// finish says the stream is complete with total bytes.
func (p *spoolProgress) finish(total int64) {
	p.total = total
	close(p.done)
}

// tailSpool copies the spool file into w as it grows, until the stream is
// finished and every byte is copied, or ctx ends.
func tailSpool(ctx context.Context, path string, p *spoolProgress, w io.Writer) error {
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	buf := make([]byte, 1<<20)
	var off int64
	for {
		avail := p.n.Load()
		finished := false
		select {
		case <-p.done:
			avail, finished = p.total, true
		default:
		}
		for off < avail {
			if f == nil {
				var err error
				if f, err = os.Open(path); err != nil {
					return fmt.Errorf("follow spool file: %w", err)
				}
			}
			n := int64(len(buf))
			if avail-off < n {
				n = avail - off
			}
			m, err := f.ReadAt(buf[:n], off)
			if m > 0 {
				if _, werr := w.Write(buf[:m]); werr != nil {
					return werr
				}
				off += int64(m)
			}
			if err != nil && err != io.EOF {
				return fmt.Errorf("follow spool file: %w", err)
			}
			if m == 0 {
				break // not visible yet; wait for the next wake-up
			}
		}
		if finished && off >= avail {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.wake:
		case <-p.done:
		}
	}
}
