package restore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"filippo.io/age"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// ErrReplay is wrapped when replayed changes do not land as recorded: the
// store's revision after a revision is not the expected one, a PUT's
// create revision or version differs from the source's, a DELETE finds
// no key, a PUT names a lease nobody recorded. The restore stops there:
// the result would not be the source at the target.
var ErrReplay = errors.New("replay diverged from the recorded changes")

// ExpiredLeaseTTL is the TTL a replayed lease gets when capture recorded
// TTL -1: the lease was already gone when capture asked its TTL, so in
// the source it expired within moments of being seen. It is granted
// with this TTL (raised to the lessor's minimum) so that its keys keep
// their lease ID, and it expires as soon after the restored cluster
// starts.
const ExpiredLeaseTTL = 1

// ReplayStats is what Replay applied.
type ReplayStats struct {
	// From is the snapshot's revision, To the revision reached.
	From, To int64
	// Revisions and Ops applied; Segments read; Leases granted.
	Revisions, Ops int64
	Segments       int
	Leases         int
	// Seconds is the wall time of the replay (reading segments included).
	Seconds float64
}

// Rate is revisions applied per second.
func (s ReplayStats) Rate() float64 {
	if s.Seconds <= 0 {
		return 0
	}
	return float64(s.Revisions) / s.Seconds
}

// Replay applies the plan's revisions (snapshot revision + 1 through the
// target) to dbPath, the plan's snapshot decoded and checked (a raw
// snapshot with etcd's sha256 trailer, or a bare bbolt file), in place:
// pass a copy. The trailer is removed (the file changes, so it would no
// longer match: restore the result with RestoreOptions.SkipHashCheck).
//
// It writes offline through etcd's own storage code: an mvcc store over
// a backend opened on the file, one write transaction per revision with
// its operations in sub-revision order, and a lessor that is never
// promoted (so it never expires or revokes a lease) and no compactor.
// Leases first seen in the changes are granted with their recorded ID
// and TTL before the PUT that names them. After every revision the
// store's revision must be the revision replayed, and every PUT must
// land with the source's create revision and version: anything else
// fails with ErrReplay. Segments are read one at a time, each once, and
// their chain is checked as they are read (checkStart for the first,
// repository.CheckLink for each next: a *repository.ChainError); a
// segment the plan read must be the very object it read (same sha256).
//
// Replay runs in this process, with its memory settings: a one-shot
// command lifts lifeboat's soft memory limit first. A drill replays in a
// child process instead (ReplayInChild).
func Replay(ctx context.Context, dbPath string, p *PointInTimePlan, repo *repository.Repo, ids []age.Identity, lg *slog.Logger) (ReplayStats, error) {
	return replay(ctx, dbPath, p, repo, ids, lg, false, func(ctx context.Context, job replayJob, segs iter.Seq2[checkedSegment, error]) (ReplayStats, error) {
		return applySegments(ctx, job, segs, zap.NewNop())
	})
}

// replayJob is what the applying side of a replay knows of its plan: the
// file and the revisions. The segments come as checkedSegments.
type replayJob struct {
	// DB is the snapshot file replayed in place.
	DB string `json:"db"`
	// SnapshotID names the snapshot, at revision From; To is the target.
	SnapshotID string `json:"snapshot_id"`
	From       int64  `json:"from"`
	To         int64  `json:"to"`
}

// checkedSegment is a segment of the plan, read and its chain checked:
// parsed (seg), or decoded to its raw form only (raw, to pass on).
type checkedSegment struct {
	key string
	seg *repository.Segment
	raw []byte
	// done, when set, hands the segment's memory back to its reader
	// (segBuffers): call it once nothing of seg or raw is used anymore.
	done func()
}

// segBuffers recycles the memory of decoded segments between their
// reader and their consumer: a segment's values are slices of its
// decoded bytes, and a new buffer per segment (grown from nothing while
// decoding) cost a sixth of reading it. At most a few are in use at
// once (one applied, one ready, one being read).
type segBuffers chan []byte

func newSegBuffers() segBuffers { return make(segBuffers, 3) }

func (p segBuffers) get() []byte {
	select {
	case b := <-p:
		return b
	default:
		return nil
	}
}

// release returns a func that gives b back (its contents are garbage
// after that).
func (p segBuffers) release(b []byte) func() {
	return func() {
		select {
		case p <- b[:0]:
		default:
		}
	}
}

// applyFunc applies the segments of one replay to job.DB (applySegments
// here, or in a child process).
type applyFunc func(ctx context.Context, job replayJob, segs iter.Seq2[checkedSegment, error]) (ReplayStats, error)

// replay checks the plan, holds its objects while it runs, and has apply
// replay the plan's segments, read (raw: decoded only) and checked by
// checkedSegments, onto dbPath.
func replay(ctx context.Context, dbPath string, p *PointInTimePlan, repo *repository.Repo, ids []age.Identity, lg *slog.Logger, raw bool, apply applyFunc) (ReplayStats, error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	st := ReplayStats{From: p.Snapshot.Revision, To: p.Snapshot.Revision}
	start := time.Now()
	if len(p.Links) != 0 && len(p.Links) != len(p.Segments) {
		return st, fmt.Errorf("replay: the plan has %d segments and %d checked headers: plan it with PlanPointInTime", len(p.Segments), len(p.Links))
	}
	if len(p.Segments) > 0 && p.Window.Anchor == nil {
		return st, fmt.Errorf("replay: the plan has no window anchor: plan it with PlanPointInTime")
	}
	// The segments stay held while they are read: a prune of this
	// process leaves them.
	defer repository.Hold(p.Keys(repo)...)()
	job := replayJob{DB: dbPath, SnapshotID: p.Snapshot.ID, From: p.Snapshot.Revision, To: p.Revision}
	st, err := apply(ctx, job, checkedSegments(ctx, p, repo, ids, raw, lg, newSegBuffers()))
	if err != nil {
		return st, err
	}
	st.Seconds = time.Since(start).Seconds()
	lg.Info("replayed changes", "from", st.From, "revision", st.To, "revisions", st.Revisions, "ops", st.Ops,
		"segments", st.Segments, "leases", st.Leases, "seconds", st.Seconds, "revisions_per_second", int64(st.Rate()))
	return st, nil
}

// checkedSegments reads the plan's segments in order, one ahead of the
// one being applied (their decoded bytes in bufs: at most three), and checks each as it is
// read: the very object the plan read (same sha256), and the chain from
// the first on (it continues the generation or names its anchor, each
// next names its predecessor's hash). It yields each with a nil error, or
// stops at the first error (a read error, a *repository.ChainError, a
// changed segment, ctx's error), which it yields. With raw, the segments
// are decoded and only their headers parsed (ReadSegmentRaw), for a
// reader that parses them.
func checkedSegments(ctx context.Context, p *PointInTimePlan, repo *repository.Repo, ids []age.Identity, raw bool, lg *slog.Logger, bufs segBuffers) iter.Seq2[checkedSegment, error] {
	return func(yield func(checkedSegment, error) bool) {
		// The links checked, the newest spliceLinks of them, and the
		// first: what a splice after planning again is checked against.
		var seen []repository.ChainLink
		var first *repository.ChainLink
		for rs, err := range ahead(ctx, readSegments(repo, p, ids, raw, bufs)) {
			if err != nil {
				yield(checkedSegment{}, fmt.Errorf("replay: %w", err))
				return
			}
			si := rs.si
			if rs.planned != "" && rs.hash != rs.planned {
				yield(checkedSegment{}, fmt.Errorf("replay: segment %s changed since it was checked (sha256 %.12s…, checked %.12s…): plan again", si.Object.Key, rs.hash, rs.planned))
				return
			}
			link := repository.ChainLink{Key: si.Object.Key, Header: rs.header, Hash: rs.hash}
			switch {
			case rs.spliced:
				err = checkSplice(&p.Window, first, seen, link)
			case first == nil:
				err = checkStart(&p.Window, link)
			default:
				if err = repository.CheckLink(seen[len(seen)-1], link); err != nil {
					err = fmt.Errorf("check the changes of generation %s: %w", p.Window.Generation, err)
				}
			}
			if err != nil {
				yield(checkedSegment{}, fmt.Errorf("replay: %w", err))
				return
			}
			if first == nil {
				first = &link
			}
			if seen = append(seen, link); len(seen) >= 2*spliceLinks {
				seen = append(seen[:0], seen[len(seen)-spliceLinks:]...)
			}
			if !yield(checkedSegment{key: si.Object.Key, seg: rs.seg, raw: rs.raw, done: bufs.release(rs.buf)}, nil) {
				return
			}
			lg.Debug("replayed segment", "segment", si.Object.Key, "revision", min(rs.header.Last, p.Revision))
		}
		if ctx.Err() != nil && p.Revisions > 0 && (len(seen) == 0 || seen[len(seen)-1].Header.Last < p.Revision) {
			// Cut short by ctx.
			yield(checkedSegment{}, ctx.Err())
		}
	}
}

// applySegments applies segs, in order, to job.DB, a snapshot at
// job.From, up to job.To: it removes the file's trailer, opens etcd's
// mvcc store on it (lg is etcd's logger), checks its revision, grants the
// leases first seen up to the target, applies each revision after the
// file's as one transaction (checking the revision after each), and at
// the end checks that the target was reached and that every key whose
// last write was a DELETE is gone (every write was checked as it was
// written: checkChanges), then commits and fsyncs. It stops at
// segs' first error and returns it as it is. The stats count what was
// applied, also on failure; Seconds stays 0.
func applySegments(ctx context.Context, job replayJob, segs iter.Seq2[checkedSegment, error], lg *zap.Logger) (ReplayStats, error) {
	st := ReplayStats{From: job.From, To: job.From}
	if err := stripTrailer(job.DB); err != nil {
		return st, err
	}
	r, err := openReplayer(job.DB, lg)
	if err != nil {
		return st, err
	}
	defer r.close()
	if got := r.kv.Rev(); got != job.From {
		return st, fmt.Errorf("replay onto %s: %w: the file is at revision %d, snapshot %s is at %d", job.DB, ErrReplay, got, job.SnapshotID, job.From)
	}
	// One trace for the whole replay, its steps disabled while the
	// replay runs: etcd's mvcc takes the time of 3-4 steps per PUT into
	// the trace it is given (13 % of a PUT's CPU), which nobody reads
	// here.
	r.trace.StepWithFunction(func() { err = r.applyAll(ctx, job, segs, &st) }, "replay")
	if err != nil {
		return st, err
	}
	if err := r.close(); err != nil {
		return st, err
	}
	return st, nil
}

// applyAll is applySegments' loop over segs and its checks at the end
// (the target reached, the store at it, the deleted keys gone).
func (r *replayer) applyAll(ctx context.Context, job replayJob, segs iter.Seq2[checkedSegment, error], st *ReplayStats) error {
	next := job.From + 1
	for cs, err := range segs {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		seg := cs.seg
		st.Segments++
		for _, l := range seg.Leases {
			if l.Revision > job.To {
				continue
			}
			granted, err := r.grant(l)
			if err != nil {
				return fmt.Errorf("replay segment %s: %w", cs.key, err)
			}
			if granted {
				st.Leases++
			}
		}
		for j := range seg.Revisions {
			rev := &seg.Revisions[j]
			if rev.Revision < next {
				continue
			}
			if rev.Revision > job.To {
				break
			}
			if rev.Revision != next {
				return fmt.Errorf("replay segment %s: %w: revision %d follows %d", cs.key, ErrReplay, rev.Revision, next-1)
			}
			if err := r.apply(rev); err != nil {
				return fmt.Errorf("replay segment %s: %w", cs.key, err)
			}
			st.Revisions++
			st.Ops += int64(len(rev.Ops))
			st.To = rev.Revision
			next++
		}
		if cs.done != nil {
			cs.done() // applied: mvcc copied what it keeps
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if st.To != job.To {
		return fmt.Errorf("replay: %w: the segments end at revision %d, the target is %d", ErrReplay, st.To, job.To)
	}
	// The store's revision after the last revision (after each other
	// one, apply checks it as the next one begins).
	if got := r.kv.Rev(); got != st.To {
		return fmt.Errorf("replay: %w: the store is at revision %d after replaying revision %d", ErrReplay, got, st.To)
	}
	return r.checkDeleted(ctx)
}

type readSegment struct {
	si repository.SegmentInfo
	// planned is the sha256 planning read of it ("" when it read none);
	// spliced says it is the first segment read after planning again
	// (readSegments): it replaced the segment that was gone.
	planned string
	spliced bool
	header  repository.SegmentHeader
	seg     *repository.Segment // parsed, or
	raw     []byte              // decoded only
	hash    string
	buf     []byte // the decoded bytes, for segBuffers
}

// readSegments reads the plan's segments in order, decoded
// (ReadSegmentRaw) and, unless raw, parsed (ParseSegmentBytes: the
// values are slices of the decoded bytes), stopping after the first
// error (yielded). A planned segment that is gone (a compaction in
// another process replaced it, and its grace ran out while this replay
// ran) makes it plan the rest again (replanAfter) and go on with the
// segments that replaced it, each read marked spliced.
func readSegments(repo *repository.Repo, p *PointInTimePlan, ids []age.Identity, raw bool, bufs segBuffers) func(context.Context) iter.Seq2[readSegment, error] {
	return func(ctx context.Context) iter.Seq2[readSegment, error] {
		return func(yield func(readSegment, error) bool) {
			segs, planned := p.Segments, p.Links
			after, replans, spliced := p.Snapshot.Revision, 0, false
			for i := 0; i < len(segs); i++ {
				si := segs[i]
				rs := readSegment{si: si, spliced: spliced}
				if i < len(planned) {
					rs.planned = planned[i].Hash
				}
				var err error
				rs.raw, rs.header, rs.hash, err = repo.ReadSegmentRawInto(ctx, si, ids, bufs.get())
				rs.buf = rs.raw
				if errors.Is(err, uploader.ErrNotFound) && replans < maxReplans {
					bufs.release(rs.buf)()
					replans++
					if segs, err = replanAfter(ctx, repo, p, after, err); err == nil {
						planned, spliced, i = nil, true, -1
						continue
					}
				}
				if err == nil && !raw {
					// Parsed in memory, its values slices of the raw
					// form (ReadSegment's checks and text).
					if rs.seg, err = repository.ParseSegmentBytes(rs.raw); err != nil {
						err = fmt.Errorf("read segment %s: %w", si.Object.Key, err)
					}
					rs.raw = nil
				}
				if !yield(rs, err) || err != nil {
					return
				}
				after, spliced = max(after, rs.header.Last), false
			}
		}
	}
}

// ahead runs the sequence seq(ctx) makes in a goroutine of its own, one
// item ahead of the consumer: the next item is produced while the
// consumer works on one (at most two in memory). It stops after the
// sequence's first error (yielded), when the consumer stops (the
// sequence's ctx is then cancelled), or when ctx ends (with no error:
// the consumer checks ctx). Its goroutine has ended when the range over
// it has.
func ahead[T any](ctx context.Context, seq func(context.Context) iter.Seq2[T, error]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		type item struct {
			v   T
			err error
		}
		ch := make(chan item)
		go func() {
			defer close(ch)
			for v, err := range seq(ctx) {
				select {
				case ch <- item{v, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		defer func() {
			cancel()
			for range ch {
			}
		}()
		for it := range ch {
			if !yield(it.v, it.err) || it.err != nil {
				return
			}
		}
	}
}

// stripTrailer removes etcd's sha256 trailer from a raw snapshot file
// (a bbolt file is a whole number of 512-byte blocks; a snapshot has 32
// bytes more), as etcdutl's restore does.
func stripTrailer(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if fi.Size()%512 == sha256.Size {
		if err := os.Truncate(path, fi.Size()-sha256.Size); err != nil {
			return fmt.Errorf("replay: remove the snapshot trailer of %s: %w", path, err)
		}
	}
	return nil
}

// replayer is an mvcc store and a lessor over one backend, offline.
// commitBytes bounds the value bytes written between two commits.
const commitBytes = 64 << 20

type replayer struct {
	pending int64 // value bytes since the last commit
	// deleted is every key whose last write in the replay was a DELETE,
	// with its revision: read back at the end (checkDeleted).
	deleted map[string]int64
	// trace is given to every transaction: its steps are disabled while
	// applySegments runs.
	trace  *traceutil.Trace
	path   string
	be     backend.Backend
	le     lease.Lessor
	kv     mvcc.KV
	closed bool
}

func openReplayer(path string, lg *zap.Logger) (*replayer, error) {
	cfg := backend.DefaultBackendConfig(lg)
	cfg.Path = path
	// One commit per batch of writes (10 000 operations or commitBytes of
	// values, whichever comes first: a bolt transaction holds its dirty
	// pages in memory) and one fsync at the end (close): the file is a
	// scratch copy until the restore has succeeded.
	cfg.BatchInterval = time.Hour
	cfg.BatchLimit = 10000
	cfg.UnsafeNoFsync = true
	cfg.Timeout = 10 * time.Second
	be := backend.New(cfg)
	// Never promoted: a lessor that is not primary never expires a lease,
	// so nothing is revoked during the replay. No checkpointer either.
	le := lease.NewLessor(lg, be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	kv := mvcc.NewStore(lg, be, le, mvcc.StoreConfig{})
	return &replayer{path: path, be: be, le: le, kv: kv, deleted: map[string]int64{}, trace: traceutil.TODO()}, nil
}

// grant recreates a lease first seen in the changes with its ID, unless
// the store has it already (granted before the snapshot).
func (r *replayer) grant(l repository.Lease) (bool, error) {
	if r.le.Lookup(lease.LeaseID(l.ID)) != nil {
		return false, nil
	}
	ttl := l.TTL
	if ttl <= 0 {
		ttl = ExpiredLeaseTTL
	}
	if _, err := r.le.Grant(lease.LeaseID(l.ID), ttl); err != nil {
		return false, fmt.Errorf("grant lease %x (ttl %ds): %w", l.ID, ttl, err)
	}
	return true, nil
}

// apply writes one revision as one write transaction and checks it: the
// store must be at the revision before it when the transaction begins
// (so after every revision the store is at that revision: applyAll
// checks the last one), a PUT's lease must exist, a DELETE must delete
// its key, and what the transaction wrote must be what the source
// recorded (checkChanges).
func (r *replayer) apply(rev *repository.Revision) error {
	for _, op := range rev.Ops {
		if !op.Delete && op.Lease != 0 && r.le.Lookup(lease.LeaseID(op.Lease)) == nil {
			return fmt.Errorf("%w: revision %d puts %q with lease %x, which is neither in the snapshot nor recorded in the changes", ErrReplay, rev.Revision, op.Key, op.Lease)
		}
	}
	txn := r.kv.Write(r.trace)
	if got := txn.Rev(); got != rev.Revision-1 {
		// The read of the revision that used to follow each
		// transaction (a read transaction of its own: 6 % of a
		// revision's CPU) is this one.
		txn.End()
		return fmt.Errorf("%w: the store is at revision %d after replaying revision %d", ErrReplay, got, rev.Revision-1)
	}
	var fail error
	for i, op := range rev.Ops {
		if op.Delete {
			if n, _ := txn.DeleteRange(op.Key, nil); n != 1 {
				fail = fmt.Errorf("%w: revision %d sub-revision %d deletes %q, which the store does not hold", ErrReplay, rev.Revision, i, op.Key)
				break
			}
			r.deleted[string(op.Key)] = rev.Revision
			continue
		}
		txn.Put(op.Key, op.Value, lease.LeaseID(op.Lease))
		r.pending += int64(len(op.Key) + len(op.Value))
		if len(r.deleted) > 0 {
			delete(r.deleted, string(op.Key))
		}
	}
	if fail == nil {
		fail = checkChanges(rev, txn.Changes())
	}
	txn.End()
	if fail != nil {
		return fail
	}
	if r.pending >= commitBytes {
		r.be.ForceCommit()
		r.pending = 0
	}
	return nil
}

// checkChanges checks what a write transaction wrote (etcd's own record
// of it, the key-values it marshalled into the file and indexed) against
// the revision the source recorded: one change per operation, in order;
// a PUT's key, value, mod revision, lease as recorded, and the create
// revision and version the store derived from its own history as the
// source had them (so that history matches the source's for every key
// written); a DELETE's key with a tombstone. Checking each write here,
// at no read, replaces reading every written key back at the end
// (checkDeleted still reads back the deleted ones): on a 180 000-object
// base that read-back was 40 % of the applier's CPU.
func checkChanges(rev *repository.Revision, changes []*mvccpb.KeyValue) error {
	if len(changes) != len(rev.Ops) {
		return fmt.Errorf("%w: revision %d has %d operations, the store wrote %d changes", ErrReplay, rev.Revision, len(rev.Ops), len(changes))
	}
	for i := range rev.Ops {
		op, got := &rev.Ops[i], changes[i]
		switch {
		case !bytes.Equal(got.Key, op.Key):
			return fmt.Errorf("%w: revision %d sub-revision %d writes %q, the store wrote %q", ErrReplay, rev.Revision, i, op.Key, got.Key)
		case op.Delete && (got.ModRevision != 0 || len(got.Value) != 0):
			return fmt.Errorf("%w: revision %d deletes %q, the store wrote no tombstone for it", ErrReplay, rev.Revision, op.Key)
		case op.Delete:
		case got.ModRevision != rev.Revision || got.CreateRevision != op.CreateRevision || got.Version != op.Version || got.Lease != op.Lease:
			return fmt.Errorf("%w: %q: the source has mod revision %d, create revision %d, version %d, lease %x; the replayed store %d, %d, %d, %x",
				ErrReplay, op.Key, rev.Revision, op.CreateRevision, op.Version, op.Lease, got.ModRevision, got.CreateRevision, got.Version, got.Lease)
		case !bytes.Equal(got.Value, op.Value):
			return fmt.Errorf("%w: %q at revision %d: the replayed store wrote a value other than the source's (%d bytes, the source's %d)", ErrReplay, op.Key, rev.Revision, len(got.Value), len(op.Value))
		}
	}
	return nil
}

// checkDeleted reads back every key whose last write in the replay was a
// DELETE: the store must not hold it. (Every PUT was checked as it was
// written, checkChanges.) The keys are read on up to checkWorkers
// goroutines at once, each with one read transaction (a Range on the
// store opens one per call); the first part's failure is returned.
func (r *replayer) checkDeleted(ctx context.Context) error {
	keys := make([]string, 0, len(r.deleted))
	for k := range r.deleted {
		keys = append(keys, k)
	}
	workers := max(1, min(checkWorkers, runtime.GOMAXPROCS(0), len(keys)/1000))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		part := keys[len(keys)*i/workers : len(keys)*(i+1)/workers]
		wg.Go(func() { errs[i] = r.checkKeys(ctx, part) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkWorkers bounds checkDeleted's goroutines.
const checkWorkers = 4

// checkKeys is checkDeleted for keys, in one read transaction: it stops
// at the first key that fails.
func (r *replayer) checkKeys(ctx context.Context, keys []string) error {
	txn := r.kv.Read(mvcc.SharedBufReadTxMode, traceutil.TODO())
	defer txn.End()
	var key []byte
	for _, k := range keys {
		key = append(key[:0], k...)
		res, err := txn.Range(ctx, key, nil, mvcc.RangeOptions{Limit: 1})
		if err != nil {
			return fmt.Errorf("replay: check %q: %w", k, err)
		}
		if len(res.KVs) == 1 && bytes.Equal(res.KVs[0].Key, key) {
			return fmt.Errorf("%w: %q was deleted at revision %d in the source, the replayed store holds it (mod revision %d)", ErrReplay, k, r.deleted[k], res.KVs[0].ModRevision)
		}
	}
	return nil
}

// close commits, closes the store, the lessor and the backend, and
// fsyncs the file.
func (r *replayer) close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.be.ForceCommit()
	r.le.Stop()
	if err := r.kv.Close(); err != nil {
		r.be.Close()
		return fmt.Errorf("replay: close the store on %s: %w", r.path, err)
	}
	if err := r.be.Close(); err != nil {
		return fmt.Errorf("replay: close %s: %w", r.path, err)
	}
	f, err := os.OpenFile(r.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("replay: sync %s: %w", r.path, err)
	}
	return nil
}
