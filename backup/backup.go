package backup

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/diskspace"
	"github.com/lifeboat-dev/lifeboat/internal/logfield"
	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// Job is one backup: take a snapshot from etcd, verify it, encode it and
// store it, then commit it with its manifest.
type Job struct {
	// Etcd is how to reach the cluster.
	Etcd snapshot.Config
	// Options tune the stream (stall timeout, writeback).
	Options snapshot.Options
	// SpoolDir holds the raw snapshot while it is verified (0700; the file
	// has no name there, so nothing is ever left behind: see
	// snapshot.CreateSpool).
	SpoolDir string
	// Backups is where the backup goes.
	Backups *repository.Repo
	// Encoding is how the object is compressed and encrypted.
	Encoding repository.Encoding
	// LockMode, LockRetain and LegalHold request Object Lock retention.
	LockMode   string
	LockRetain time.Duration
	LegalHold  bool
	// LiveHashKV is snapshot.live_hashkv: whether the file's HashKV is
	// compared with a live member's (snapshot.LiveHashKVAlways when empty).
	LiveHashKV string
	// Kit, when set, is collected and stored before the snapshot, and the
	// manifest names it (see storeKit).
	Kit *KitSource
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Version is lifeboat's version, recorded in the manifest.
	Version string
	// AdoptCluster, when it is the live cluster's etcd cluster ID (hex),
	// starts a new lineage under the store's cluster name on purpose,
	// superseding the lineages there (see repository.ClaimLineage);
	// otherwise a backup of a cluster that is not of the name's lineage
	// is refused with a *repository.LineageError.
	AdoptCluster string
	// SkipUnchanged: when the live cluster is at the newest backup's
	// revision and every reachable member's HashKV there equals the
	// backup's, nothing is stored and Run returns an *UnchangedError
	// (an idle cluster's scheduled snapshot). The newest backup compared
	// with is the newest intact, trusted one of this etcd cluster.
	SkipUnchanged bool

	kitID     string              // set by Run from storeKit
	claim     repository.Claim    // set by Run: the lineage the backup joins
	claimedID uint64              // the etcd cluster ID it was claimed for
	listing   *repository.Listing // set by Run: the store as claimLineage read it
}

// ErrExists is wrapped when a backup with the same id is already stored
// (as an *ExistsError, which names it).
var ErrExists = errors.New("backup exists")

// ExistsError is the error of a backup not taken because one with its id
// (same revision, same second) is already stored, committed or being
// written: a caller that needs a committed snapshot at that revision can
// adopt that one once its manifest is there. It wraps ErrExists.
type ExistsError struct{ ID string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%v: backup %s (this revision, this second) is already stored; not taken again", ErrExists, e.ID)
}

func (e *ExistsError) Unwrap() error { return ErrExists }

// UnchangedError is Run's answer, with SkipUnchanged, when the cluster
// holds what its newest backup holds: the check succeeded and nothing was
// stored.
type UnchangedError struct {
	Backup  *repository.Manifest // the newest backup, which holds this state
	Members int                  // members whose live HashKV matched it
}

func (e *UnchangedError) Error() string {
	return fmt.Sprintf("cluster unchanged since backup %s (revision %d, HashKV %08x on %d members): not stored again",
		e.Backup.ID, e.Backup.Revision, e.Backup.HashKV, e.Members)
}

// SelfComparedWarning starts the warning (log and summary) of a backup
// whose live HashKV was answered by the snapshot's own member of a larger
// cluster (snapshot.SelfCompared).
const SelfComparedWarning = "HashKV compared the snapshot's member with itself"

// ErrVerify is wrapped when a snapshot was taken but failed verification:
// nothing was kept.
var ErrVerify = errors.New("snapshot failed verification")

// ErrEmptyCluster is returned when the cluster has never been written to:
// its snapshot holds no revision a backup could name (nor a point-in-time
// restore start from).
var ErrEmptyCluster = errors.New("the etcd cluster has never been written to")

// Run runs the job. It returns the committed manifest; on any error
// nothing is kept: the upload is aborted, no manifest is written and the
// spool file is freed.
//
// The work overlaps: bytes from etcd go to the spool file and, as they
// arrive, through the encoder into the store. The store sees the end of
// the object only once the spool file has been verified; if verification
// fails, the store's Put is failed and aborts.
//
// When the stream from the member breaks off after bytes had arrived (the
// member died or restarted mid-stream), the whole backup starts over from
// the next healthy member — new id, new spool file; the broken attempt's
// upload is aborted — until ctx ends or no member is left. The error of a
// failed backup names its first cause: the stream, the store, the encoder
// or the verification that failed first, not the steps stopped after it.
func Run(ctx context.Context, job Job, lg *slog.Logger) (*repository.Manifest, error) {
	if err := snapshot.ValidateLiveHashKV(job.LiveHashKV); err != nil {
		return nil, fmt.Errorf("backup: live hashkv: %w", err)
	}
	if err := snapshot.PrepareSpoolDir(job.SpoolDir); err != nil {
		return nil, err
	}
	now := job.Now
	if now == nil {
		now = time.Now
	}
	// Leftovers of versions whose spool files had names: a failed sweep
	// is no reason to miss a backup, only a warning.
	removed, err := snapshot.SweepSpool(job.SpoolDir, now())
	for _, name := range removed {
		lg.Info("removed a spool file an earlier run left behind", "spool_dir", job.SpoolDir, "file", name)
	}
	if err != nil {
		lg.Warn("could not remove spool leftovers", "err", err)
	}
	// One etcd session for the job: every attempt and every step of it
	// (status, stream, HashKV) uses its connections and its login.
	sess, err := snapshot.Dial(ctx, job.Etcd, lg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sess.Close() }() // the job's outcome is decided
	// Whose backups go under this name: decided before anything is
	// written (the kit included).
	if err := claimLineage(ctx, sess, &job, lg); err != nil {
		return nil, err
	}
	if job.SkipUnchanged {
		if ue := unchanged(ctx, sess, job, lg); ue != nil {
			return nil, ue
		}
	}
	if job.kitID, err = storeKit(ctx, job, now(), lg); err != nil {
		return nil, err
	}
	var failed []error
	for {
		m, err := runOnce(ctx, sess, job, lg)
		var me *snapshot.MemberError
		if err == nil || ctx.Err() != nil || !errors.As(err, &me) {
			if err != nil && len(failed) > 0 {
				err = fmt.Errorf("%w; then %w", joinErrors(failed), err)
			}
			return m, err
		}
		failed = append(failed, err)
		job.Options.Skip = append(slices.Clip(job.Options.Skip), me.Endpoint)
		if len(job.Options.Skip) >= len(job.Etcd.Endpoints) {
			return nil, fmt.Errorf("snapshot failed on every member: %w", joinErrors(failed))
		}
		lg.Warn("snapshot stream failed; retrying the backup from the next member",
			"endpoint", me.Endpoint, "member", me.Member, "err", err)
	}
}

// runOnce is one attempt of Run, from one member, in five steps: take the
// snapshot into the spool (the store's upload and the encoder already
// following it), verify the spool, wait for the encoder, let the store
// commit the object once everything passed, and commit the backup with its
// manifest.
func runOnce(parent context.Context, sess *snapshot.Session, job Job, lg *slog.Logger) (*repository.Manifest, error) {
	a, err := begin(parent, sess, job, lg)
	if err != nil {
		return nil, err
	}
	defer a.end()
	info, err := a.take()
	if err != nil {
		return a.fail(err)
	}
	c := a.verify(info)
	if err := a.encode(c); err != nil {
		return a.fail(err)
	}
	st, hk, err := a.store(c, info)
	if err != nil {
		return nil, err
	}
	return a.commit(info, st, hk)
}

// attempt is the state of one runOnce: its id and object key, the spool
// file, the store's upload behind its gate and the encoder that feeds it.
type attempt struct {
	parent context.Context
	ctx    context.Context // canceled by the first part to fail, with its error as the cause
	cancel context.CancelCauseFunc
	sess   *snapshot.Session
	job    Job
	lg     *slog.Logger
	now    func() time.Time
	start  time.Time

	members []snapshot.MemberStatus
	id, key string

	spoolFile *os.File
	spool     string // its /proc/self/fd path, for the verifier
	rmOnce    sync.Once
	rmDone    chan struct{}
	liveWG    sync.WaitGroup // the live HashKV
	putWG     sync.WaitGroup // the store's Put
	pw        *io.PipeWriter
	gate      *gate
	opts      uploader.PutOptions
	obj       uploader.ObjectInfo
	putErr    error
	enc       io.WriteCloser
	fed       *crcWriter
	prog      *spoolProgress
	tailDone  chan error
	first     *firstWrite
	received  time.Time // when the checks started
}

// begin names the attempt's backup and creates its spool file.
func begin(parent context.Context, sess *snapshot.Session, job Job, lg *slog.Logger) (*attempt, error) {
	a := &attempt{parent: parent, sess: sess, job: job, lg: lg, now: job.Now, rmDone: make(chan struct{})}
	if a.now == nil {
		a.now = time.Now
	}
	a.start = a.now()
	// The id needs a revision before the first byte arrives (the object's
	// key contains it): the highest revision the members report now. The
	// manifest records the snapshot's exact revision.
	members, err := sess.Members(parent)
	if err != nil {
		return nil, err
	}
	a.members = members
	var rev int64
	for _, m := range members {
		if m.Err == nil && m.Revision > rev {
			rev = m.Revision
		}
	}
	a.id = repository.NewID(a.start, rev)
	a.key = job.Backups.ObjectKey(a.id, job.Encoding)
	// Ids have a resolution of one second: never let a second backup of
	// the same revision in the same second overwrite the first one.
	for _, k := range []string{job.Backups.ManifestKey(a.id), a.key} {
		if _, err := job.Backups.Store.Stat(parent, k); err == nil {
			return nil, &ExistsError{ID: a.id}
		} else if !errors.Is(err, uploader.ErrNotFound) {
			return nil, fmt.Errorf("check store for backup %s: %w", a.id, err)
		}
	}
	// Room for the whole database in the spool, checked before etcd
	// sends a byte (not a full disk minutes into the stream).
	var db int64
	for _, m := range members {
		if m.Err == nil {
			db = max(db, m.DBSize)
		}
	}
	if err := diskspace.Check([]diskspace.Need{{Dir: job.SpoolDir, Bytes: db, What: "the snapshot's spool file (the database's size)"}}); err != nil {
		return nil, fmt.Errorf("spool directory: %w", err)
	}
	// The spool file has no name in the spool dir: a process killed
	// mid-snapshot (SIGKILL, the OOM killer) leaves nothing behind. The
	// verifier opens it again by its /proc/self/fd path.
	if a.spoolFile, err = snapshot.CreateSpool(job.SpoolDir); err != nil {
		return nil, err
	}
	a.spool = snapshot.SpoolPath(a.spoolFile)
	a.ctx, a.cancel = context.WithCancelCause(parent)
	return a, nil
}

// removeSpool frees the spool file in the background once nothing reads
// it any more, overlapping the end of the upload: freeing a large file
// takes a while (the kernel drops its cached pages at the last close). It
// is shrunk in steps first (writeback.Shrink): freed at once, a 400 MB
// spool stalled the WAL writes of the etcd members on the same disk for
// 60–90 ms.
func (a *attempt) removeSpool() {
	a.rmOnce.Do(func() {
		go func() {
			_ = writeback.Shrink(a.spoolFile) // best effort: Close frees it anyway
			_ = a.spoolFile.Close()           // read-only from here on: nothing to lose
			close(a.rmDone)
		}()
	})
}

// end returns once the spool file is gone and the live HashKV has
// returned (failures cancel the attempt's context first), on every path.
func (a *attempt) end() {
	a.cancel(nil)
	a.liveWG.Wait()
	a.removeSpool()
	<-a.rmDone
}

// firstCause is the error the backup fails with: the cause of the first
// part to fail, not the steps stopped after it.
func (a *attempt) firstCause(err error) error {
	if a.parent.Err() == nil && a.ctx.Err() != nil {
		return context.Cause(a.ctx)
	}
	return err
}

// fail ends the attempt with err's first cause: the store's Put is failed
// and aborts.
func (a *attempt) fail(err error) (*repository.Manifest, error) {
	a.cancel(err)
	err = a.firstCause(err)
	if a.gate != nil {
		a.gate.decide(err)
		a.pw.CloseWithError(err)
		a.putWG.Wait()
	}
	return nil, err
}

// take streams the snapshot from etcd into the spool file. Before the
// first byte, the store's Put starts, reading behind a gate that holds its
// end until the verdict, and the encoder starts following the spool file
// into it.
func (a *attempt) take() (snapshot.Info, error) {
	a.startPut()
	if err := a.startEncoder(); err != nil {
		return snapshot.Info{}, err
	}
	// The time the first bytes arrive is the snapshot's revision time
	// (Manifest.RevisionAt): etcd fixes the revision before it sends any.
	a.first = &firstWrite{w: a.prog, now: a.now}
	info, err := a.sess.TakeFile(a.ctx, a.spoolFile, a.first, a.job.Options)
	if err != nil {
		a.cancel(err)
		<-a.tailDone
		return info, err
	}
	a.prog.finish(info.Size)
	a.lg.Info("snapshot received", "endpoint", info.Endpoint, "member", info.MemberName, "bytes", info.Size, "sha256", info.SHA256)
	return info, nil
}

// startPut starts the store's Put of the object, reading from a pipe the
// encoder writes, behind the gate.
func (a *attempt) startPut() {
	pr, pw := io.Pipe()
	a.pw, a.gate = pw, newGate(pr)
	a.opts = uploader.PutOptions{ContentType: "application/octet-stream", LockMode: a.job.LockMode, LegalHold: a.job.LegalHold}
	if a.job.LockMode != "" {
		a.opts.RetainUntil = a.start.Add(a.job.LockRetain).UTC().Truncate(time.Second)
	}
	a.putWG.Go(func() {
		a.obj, a.putErr = a.job.Backups.Store.Put(a.ctx, a.key, a.gate, a.opts)
		if a.putErr != nil {
			// A no-op when another part failed first and canceled ctx.
			a.cancel(fmt.Errorf("store backup %s: %w", a.id, a.putErr))
		}
		// Unblock the writer if Put stopped reading early.
		pr.CloseWithError(fmt.Errorf("store stopped reading: %w", a.putErr))
	})
}

// startEncoder starts the goroutine that follows the spool file into the
// encoder. The spool file is the buffer between etcd and the store: the
// stream is written at disk-cache speed (a slow stream holds etcd's read
// transaction open longer, and stalls writes that need to grow the
// database), while this goroutine feeds the encoder and the store at
// their own pace, overlapping verification.
func (a *attempt) startEncoder() error {
	enc, err := repository.NewEncoder(a.pw, a.job.Encoding)
	if err != nil {
		return err
	}
	a.enc = enc
	a.prog = newSpoolProgress()
	// fed checksums what the encoder is given, to compare with what the
	// stream wrote to the spool file (spoolProgress).
	a.fed = &crcWriter{w: enc}
	a.tailDone = make(chan error, 1)
	go func() {
		// Compression runs on its own thread at a lower priority; the
		// thread is never unlocked, so it ends with this goroutine.
		runtime.LockOSThread()
		lowerPriority(a.lg)
		err := tailSpool(a.ctx, a.spoolFile, a.prog, a.fed)
		if err != nil {
			// No point streaming on when the store is gone.
			a.cancel(fmt.Errorf("encode snapshot: %w", err))
		}
		a.tailDone <- err
	}()
	return nil
}

// checks are the verification of the spool file, running side by side:
// verify.File and the live member's HashKV.
type checks struct {
	file     chan verified
	live     chan live
	revRead  chan struct{}
	member   snapshot.MemberStatus
	same     string
	deferred string

	fileResult verified // received by encode
}

type verified struct {
	st  verify.Status
	err error
}

type live struct {
	rev     int64
	hash    uint32
	compact int64
	err     error
}

// verify starts the checks of the spool file. The file check and the live
// member's HashKV run side by side: the snapshot's revision is read first
// (a few pages), then etcd hashes its store at that revision while File
// reads the whole spool.
func (a *attempt) verify(info snapshot.Info) *checks {
	c := &checks{file: make(chan verified, 1), live: make(chan live, 1), revRead: make(chan struct{})}
	go func() {
		st, err := verify.File(a.ctx, a.spool)
		c.file <- verified{st, err}
	}()
	// HashKV is asked of another member than the snapshot's when one can
	// answer: only that detects members that diverged.
	c.member, c.same = snapshot.HashKVMember(a.members, info.Endpoint)
	c.deferred = hashKVDeferred(a.job.LiveHashKV, c.member, c.same)
	a.liveWG.Go(func() {
		rev, err := verify.Revision(a.ctx, a.spool)
		close(c.revRead)
		if err != nil {
			c.live <- live{rev: -1, err: err} // File reports the damage
			return
		}
		// Revision 0 (a cluster never written to, refused by the verdict)
		// is "now" to HashKV, never the snapshot's revision: not asked.
		if c.deferred != "" || rev < 1 {
			c.live <- live{rev: rev}
			return
		}
		h, cr, err := a.sess.HashKV(a.ctx, c.member.Endpoint, rev)
		c.live <- live{rev, h, cr, err}
	})
	a.received = a.now()
	return c
}

// encode waits for the encoder to have every byte of the spool file and
// for the checks to be done reading it, then frees the spool file. The
// encoder's error comes first.
func (a *attempt) encode(c *checks) error {
	tailErr := <-a.tailDone
	if tailErr == nil {
		tailErr = a.enc.Close()
	}
	a.lg.Debug("spool encoded", "after_stream_seconds", logfield.Seconds(a.now().Sub(a.received)), "err", tailErr)
	c.fileResult = <-c.file
	a.lg.Debug("spool checked", "after_stream_seconds", logfield.Seconds(a.now().Sub(a.received)), "err", c.fileResult.err)
	<-c.revRead
	a.removeSpool() // every reader of the spool is done
	if tailErr != nil {
		return fmt.Errorf("encode snapshot: %w", tailErr)
	}
	a.pw.Close() // the store now has every byte but waits at the gate
	return nil
}

// store decides the gate with the checks' verdict: when every check
// passed the store commits the object.
func (a *attempt) store(c *checks, info snapshot.Info) (verify.Status, liveHashKV, error) {
	st, hk, err := a.verdict(c, info)
	if err != nil {
		_, err = a.fail(err)
		return st, hk, err
	}
	a.lg.Info("snapshot verified", "revision", st.Revision, "total_keys", st.TotalKeys, "hash_kv", hk.status,
		"hash_kv_endpoint", c.member.Endpoint, "hash_kv_same_member", c.same)
	if c.deferred == "" && snapshot.SelfCompared(c.same) {
		a.lg.Warn(SelfComparedWarning+": a member that diverged from the others would go unnoticed; give lifeboat every member's endpoint and check the others",
			"endpoint", c.member.Endpoint, "reason", c.same)
	}
	a.gate.decide(nil)
	a.putWG.Wait()
	a.lg.Debug("object stored", "after_stream_seconds", logfield.Seconds(a.now().Sub(a.received)), "err", a.putErr)
	if a.putErr != nil {
		return st, hk, fmt.Errorf("store backup %s: %w", a.id, a.putErr)
	}
	return st, hk, nil
}

// verdict is the checks' outcome, in order: the file, its revision, the
// fed bytes against the verified ones, the live HashKV.
func (a *attempt) verdict(c *checks, info snapshot.Info) (verify.Status, liveHashKV, error) {
	v := c.fileResult
	st := v.st
	if v.err != nil {
		return st, liveHashKV{}, fmt.Errorf("%w: %w", ErrVerify, v.err)
	}
	if st.Revision < 1 {
		return st, liveHashKV{}, fmt.Errorf("%w (its snapshot holds no revision and no key): nothing to back up until the first write", ErrEmptyCluster)
	}
	if written := a.prog.n.Load(); a.prog.crc != a.fed.crc || info.Size != a.fed.n || written != info.Size {
		return st, liveHashKV{}, fmt.Errorf("%w: the bytes fed to the encoder are not the verified bytes (crc32c %08x of %d bytes encoded, %08x of %d bytes written to the spool file); nothing was stored; retry, and suspect memory or a bug in lifeboat if it happens again",
			ErrVerify, a.fed.crc, a.fed.n, a.prog.crc, written)
	}
	lh := <-c.live
	a.lg.Debug("live hashkv", "after_stream_seconds", logfield.Seconds(a.now().Sub(a.received)), "revision", lh.rev, "err", lh.err)
	if lh.rev != st.Revision && c.deferred == "" {
		// Only a file that changed under us gets here; ask again at the
		// revision File read.
		lh.rev = st.Revision
		lh.hash, lh.compact, lh.err = a.sess.HashKV(a.ctx, c.member.Endpoint, st.Revision)
	}
	hk := liveHashKV{member: c.member, same: c.same, deferred: c.deferred, hash: lh.hash, compact: lh.compact, err: lh.err}
	if err := hk.compare(st, a.lg); err != nil {
		return st, hk, fmt.Errorf("%w: %w", ErrVerify, err)
	}
	return st, hk, nil
}

// commit writes the manifest that makes the stored object a backup.
func (a *attempt) commit(info snapshot.Info, st verify.Status, hk liveHashKV) (*repository.Manifest, error) {
	job := a.job
	m := &repository.Manifest{
		Format:          repository.ManifestFormat,
		ID:              a.id,
		Cluster:         job.Backups.Cluster,
		EtcdClusterID:   fmt.Sprintf("%x", info.ClusterID),
		EtcdMemberID:    fmt.Sprintf("%x", info.MemberID),
		EtcdMemberName:  info.MemberName,
		Endpoint:        info.Endpoint,
		EtcdVersion:     info.EtcdVersion,
		StorageVersion:  st.StorageVersion,
		CreatedAt:       a.start.UTC(),
		RevisionAt:      a.first.time().UTC(),
		Revision:        st.Revision,
		CompactRevision: st.CompactRevision,
		TotalKeys:       st.TotalKeys,
		DBSize:          st.Size,
		SnapshotSHA256:  info.SHA256,
		BoltHash:        st.BoltHash,
		HashKV:          st.HashKV,
		Object:          a.key,
		ObjectSize:      a.obj.Size,
		ObjectSHA256:    a.obj.SHA256,
		Compression:     job.Encoding.CompressionName(),
		Encryption:      job.Encoding.EncryptionName(),
		Recipients:      job.Encoding.RecipientKeys,
		Kit:             job.kitID,
		LockMode:        job.LockMode,
		LegalHold:       job.LegalHold,
		AgentVersion:    job.Version,
	}
	if info.ClusterID != job.claimedID {
		return nil, fmt.Errorf("commit backup %s: the snapshot came from etcd cluster %x, not %x whose lineage was checked; nothing was kept", a.id, info.ClusterID, job.claimedID)
	}
	m.Lineage, m.RestoredFrom, m.Supersedes = job.claim.Lineage, job.claim.RestoredFrom, job.claim.Supersedes
	hk.record(m)
	if job.LockMode != "" {
		t := a.opts.RetainUntil
		m.RetainUntil = &t
	}
	m.DurationSeconds = a.now().Sub(a.start).Seconds()
	if err := job.Backups.PutManifest(a.ctx, m); err != nil {
		// The object stays as an orphan for prune to collect; the
		// backup does not exist.
		return nil, fmt.Errorf("commit backup %s: %w", a.id, err)
	}
	a.lg.Info("backup stored", "backup_id", a.id, "object", a.key, "bytes", a.obj.Size, "seconds", m.DurationSeconds)
	return m, nil
}

// joinErrors joins errs on one line, "a; b; c", each unwrappable.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	format := strings.TrimSuffix(strings.Repeat("%w; ", len(errs)), "; ")
	args := make([]any, len(errs))
	for i, e := range errs {
		args[i] = e
	}
	return fmt.Errorf(format, args...)
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

// firstWrite passes writes on to w and records when the first bytes came.
type firstWrite struct {
	w   io.Writer
	now func() time.Time
	mu  sync.Mutex
	at  time.Time
}

func (f *firstWrite) Write(b []byte) (int, error) {
	if len(b) > 0 {
		f.mu.Lock()
		if f.at.IsZero() {
			f.at = f.now()
		}
		f.mu.Unlock()
	}
	return f.w.Write(b)
}

func (f *firstWrite) time() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// spoolProgress is the tee of Session.TakeFile: it counts the bytes already
// written to the spool file and wakes the goroutine that follows it.
//
// It also checksums the bytes written, in the stream's goroutine, while
// they are in the CPU's cache: the verdict compares that crc32c with the
// encoder's feed (crcWriter). The stream's bytes are the ones etcd's
// sha256 trailer checked, the spool file holds them (unnamed: nobody else
// writes it) and verify.File checks that file, so equal checksums say the
// encoder was fed the verified bytes, without reading the spool a third
// time (issue 24: that pass was 380 MiB of preads a 347 MiB backup).
type spoolProgress struct {
	n     atomic.Int64
	wake  chan struct{}
	done  chan struct{}
	total int64 // set before done is closed

	// crc is the crc32c of the bytes written (n counts them), updated by
	// Write only (the stream's goroutine), read once the stream has
	// returned.
	crc uint32
}

func newSpoolProgress() *spoolProgress {
	return &spoolProgress{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Write never blocks: the bytes are already in the spool file.
func (p *spoolProgress) Write(b []byte) (int, error) {
	p.crc = crc32.Update(p.crc, castagnoli, b)
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

// priorityWarned is set once the refusal of lowerThreadPriority has been
// logged: the cause (the seccomp filter) holds for the process's life.
var priorityWarned atomic.Bool

// lowerPriority lowers the calling thread's priority, logging the first
// failure in this process at warn: backups still work, but compression
// then competes with etcd for the CPU.
func lowerPriority(lg *slog.Logger) {
	if err := lowerThreadPriority(); err != nil && priorityWarned.CompareAndSwap(false, true) {
		lg.Warn("cannot lower the compression thread's priority; compression competes with etcd for the CPU: allow setpriority(2) (systemd: SystemCallFilter=setpriority, as deploy/systemd/lifeboat.service does)", "err", err)
	}
}

// castagnoli is crc32c, computed with the CPU's crc32 instructions on
// amd64 and arm64: measured here, 0.06 s of CPU per GB, on the stream's
// buffers and on the encoder's feed alike (BenchmarkFeedCRC).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcWriter passes writes to w and keeps the crc32c and count of the bytes
// w accepted.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// feedHook, set by tests only, sees (and may change) every buffer on its
// way from the spool file to the encoder; off is its offset in the file.
var feedHook func(off int64, p []byte)

// tailSpool copies the spool file f into w as it grows, until the stream
// is finished and every byte is copied, or ctx ends. It reads with ReadAt
// (pread), which the writer's use of f does not disturb.
func tailSpool(ctx context.Context, f *os.File, p *spoolProgress, w io.Writer) error {
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
			n := int64(len(buf))
			if avail-off < n {
				n = avail - off
			}
			m, err := f.ReadAt(buf[:n], off)
			if m > 0 {
				if feedHook != nil {
					feedHook(off, buf[:m])
				}
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

// claimLineage asks the members who they are and decides which lineage
// of the store's cluster name the backup joins (repository.ClaimLineage):
// a cluster of another lineage is refused here, before anything is
// taken or written.
func claimLineage(ctx context.Context, sess *snapshot.Session, job *Job, lg *slog.Logger) error {
	sts, err := sess.Members(ctx)
	if err != nil {
		return err
	}
	var ms []repository.Member
	var cid uint64
	for _, st := range sts {
		if st.Err == nil {
			cid = st.ClusterID
			ms = append(ms, repository.Member{ID: st.ID, PeerURLs: st.PeerURLs})
		}
	}
	l, err := job.Backups.List(ctx)
	if err != nil {
		return fmt.Errorf("read the store's lineage: %w", err)
	}
	c, err := job.Backups.ClaimLineage(l, fmt.Sprintf("%x", cid), ms, job.AdoptCluster)
	if err != nil {
		return err
	}
	switch {
	case len(c.Supersedes) > 0 && job.AdoptCluster != "":
		lg.Warn("starting a new lineage under this cluster name on purpose (--adopt-cluster): restore latest chooses it over the lineages before",
			"etcd_cluster_id", c.Lineage, "supersedes", strings.Join(c.Supersedes, ","))
	case c.RestoredFrom != "":
		lg.Info("this etcd cluster was restored from a backup of the store's lineage: its backups continue it",
			"etcd_cluster_id", fmt.Sprintf("%x", cid), "lineage", c.Lineage, "restored_from", c.RestoredFrom)
	}
	job.claim, job.claimedID, job.listing = c, cid, l
	return nil
}
