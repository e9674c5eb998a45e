package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/diskspace"
	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// ErrFailed is wrapped by Drill's error when the drill ran and a
// check failed; other errors mean it could not run to the end.
var ErrFailed = errors.New("drill failed")

// ErrNoSpace is wrapped when the scratch directory lacks the free space a
// drill needs.
var ErrNoSpace = errors.New("not enough free space")

// Phase names, in order.
const (
	PhaseFetch   = "fetch"
	PhaseDecode  = "decode"
	PhaseRestore = "restore"
	PhaseVerify  = "verify"
	PhaseBoot    = "boot"
	PhaseChecks  = "checks"
)

// Options describe one drill.
type Options struct {
	// Backups is the store; the drill only reads from it.
	Backups *repository.Repo
	// Manifest is the backup to drill (see Select).
	Manifest *repository.Manifest
	// Identities decrypt encrypted backups.
	Identities []age.Identity
	// ScratchDir holds the drill's files (created 0700 if missing); the
	// drill's own subdirectory is removed afterwards, always.
	ScratchDir string
	// EtcdBinary runs the throwaway etcd from this binary instead of this
	// program's own (child.EtcdCommand); either way in a child process.
	EtcdBinary string
	// OnBoot, when set, is called with the booted server before the
	// checks (tests inspect its process and sockets).
	OnBoot func(*child.Etcd)
	// CheckPrefixes must each hold at least one key after the restore.
	CheckPrefixes []string
	// Timeout bounds the drill (default 15m).
	Timeout time.Duration
	// RevisionBump and MarkCompacted restore as a real restore with those
	// options would (restore --dry-run); the expected revision moves up by
	// RevisionBump and HashKV is then not comparable.
	RevisionBump  uint64
	MarkCompacted bool
	// Progress is passed to Fetch.
	Progress func(stored, raw int64)
	// Logger receives one line per phase (nil: none).
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Version is lifeboat's version, recorded in the report.
	Version string
	// PointInTime, when set, makes this a point-in-time drill of
	// PointInTime.Plan (Manifest is then the plan's snapshot; nil means
	// that): see Drill.
	PointInTime *PointInTimeOptions
}

// ValidateCheckPrefix is the one rule for a drill check prefix (the
// configuration checks drill.check_prefixes with it): not empty, since an
// empty prefix holds every key and checks nothing.
func ValidateCheckPrefix(p string) error {
	if p == "" {
		return errors.New("empty prefix")
	}
	return nil
}

// Validate reports the first invalid option, naming it. Zero values are
// valid: they mean default.
func (o Options) Validate() error {
	for i, p := range o.CheckPrefixes {
		if err := ValidateCheckPrefix(p); err != nil {
			return fmt.Errorf("check prefixes: entry %d: %w", i+1, err)
		}
	}
	if o.Timeout < 0 {
		return fmt.Errorf("timeout %s: must not be negative", o.Timeout)
	}
	return nil
}

// drillName is the member name of every drill's throwaway etcd.
const drillName = "lifeboat-drill"

// workPrefix starts the name of each drill's subdirectory of the scratch
// directory: lifeboat-drill-<pid>-<random>.
const workPrefix = "lifeboat-drill-"

// walSegment is the WAL segment etcd preallocates when it boots on the
// restored data dir: the fixed part of the free space check's margin.
const walSegment = 64 << 20

// spaceNeeded is the free space a drill of a dbSize database needs in
// its scratch directory: the decoded snapshot and the restored data dir
// (one copy when the store's own file is read in place or the fetched
// file becomes the member's database), etcd's preallocated
// WAL segment, and a margin proportionate to the database (a sixteenth:
// the test write, bbolt's growth, the restore's own files).
func spaceNeeded(dbSize int64, oneCopy bool) uint64 {
	copies := int64(2)
	if oneCopy {
		copies = 1
	}
	return uint64(copies*dbSize + walSegment + dbSize/16)
}

// Drill rehearses a restore of o.Manifest end to end: fetch the stored
// object, decrypt and decompress it into the scratch directory while
// checking its sha256 and etcd's trailer; then restore it (in place, see
// restoreInPlace; with etcdutl for a point in time or a revision bump)
// while verify.File checks the file read-only; boot a throwaway etcd on
// the restored data in a child process (unix sockets in the drill's 0700
// directory, no TCP port, a fresh cluster token, so it can never reach or
// join a real cluster, and nobody else can read the restored data); and
// check its revision, key count, HashKV against the file-computed HashKV
// of the manifest, the configured prefixes and a test write. The etcd
// server is stopped and the scratch subdirectory removed on every path,
// failure, timeout and cancellation included.
//
// The report is returned whenever a manifest was given, also on failure.
// The error is nil exactly when the report passed. It wraps ErrFailed
// when the drill reached a verdict against the backup: a check of its
// content failed (object or snapshot sha256, bbolt structure, db size,
// bolt hash, revision, key count, HashKV, prefixes, the test write) or
// etcd refused or crashed on the restored data. Any other error (no space,
// the store, the download, a missing or wrong identity, a timeout,
// cancellation, a child process killed from outside: ErrKilled) says the
// drill could not run to a verdict: it is no verdict on the backup, and
// callers store the report only for a verdict (see Verdict).
func Run(ctx context.Context, o Options) (rep *repository.DrillReport, err error) {
	if err := o.pointInTime(); err != nil {
		return nil, err
	}
	if o.Manifest == nil || o.Backups == nil {
		return nil, errors.New("drill: no backup given")
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Minute
	}
	d := newDrill(o)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	runErr := d.run(ctx)
	if runErr != nil && parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		runErr = fmt.Errorf("drill timed out after %s: %w", o.Timeout, runErr)
	}
	return d.finish(ctx, runErr)
}

// pointInTime checks a point-in-time drill's options and takes the
// plan's snapshot as the backup when none is given.
func (o *Options) pointInTime() error {
	pt := o.PointInTime
	if pt == nil {
		return nil
	}
	if pt.Plan == nil || pt.Plan.Snapshot == nil || pt.Live == nil {
		return errors.New("drill: a point-in-time drill needs a plan and the live cluster")
	}
	if o.RevisionBump > 0 || o.MarkCompacted {
		return errors.New("drill: a point-in-time drill compares HashKV with the live cluster: no revision bump")
	}
	if o.Manifest == nil {
		o.Manifest = pt.Plan.Snapshot
	}
	if o.Manifest.ID != pt.Plan.Snapshot.ID {
		return fmt.Errorf("drill: backup %s is not the plan's snapshot %s", o.Manifest.ID, pt.Plan.Snapshot.ID)
	}
	return nil
}

// newDrill is the drill of o.Manifest, its report started.
func newDrill(o Options) *drill {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	m := o.Manifest
	d := &drill{o: o, m: m, now: now, lg: lg.With("backup_id", m.ID)}
	d.rep = &repository.DrillReport{
		Format: repository.DrillReportFormat, BackupID: m.ID, Cluster: o.Backups.Cluster,
		EtcdClusterID: m.EtcdClusterID, Lineage: m.LineageID(),
		StartedAt: now().UTC(), Phases: []repository.Phase{}, Checks: []repository.Check{}, AgentVersion: o.Version,
	}
	if o.PointInTime != nil {
		d.rep.PointInTime = pointInTimeReport(o.PointInTime.Plan)
		d.lg = d.lg.With("target_revision", o.PointInTime.Plan.Revision)
	}
	return d
}

// finish sums up the report of a drill that ended with runErr (ctx its
// run's context) and returns it with Run's error: a verdict (nil or
// ErrFailed with the first failed check) or an error of the run.
func (d *drill) finish(ctx context.Context, runErr error) (*repository.DrillReport, error) {
	rep := d.rep
	rep.FinishedAt = d.now().UTC()
	for _, p := range rep.Phases {
		rep.RecoverySeconds += p.Seconds
	}
	rep.RecoverySeconds = round3(rep.RecoverySeconds)
	failed := rep.FailedChecks()
	switch {
	case errors.Is(runErr, child.ErrKilled):
		// A child killed from outside (an OOM killer): the checks that
		// failed because of it say nothing about the backup either.
		rep.Error = runErr.Error()
	case ctx.Err() != nil:
		// Cut short (timeout, cancellation): checks that failed because
		// of it say nothing about the backup.
		if runErr == nil {
			runErr = ctx.Err()
		}
		if errors.Is(runErr, ErrFailed) {
			runErr = fmt.Errorf("drill cut short: %w", ctx.Err())
		}
		rep.Error = runErr.Error()
	case len(failed) > 0:
		if runErr != nil && !errors.Is(runErr, ErrFailed) {
			rep.Error = runErr.Error()
		}
		c := failed[0]
		runErr = fmt.Errorf("%w: check %s: expected %s, actual %s", ErrFailed, c.Name, c.Expected, c.Actual)
	case runErr != nil:
		rep.Error = runErr.Error()
	}
	rep.Passed = runErr == nil
	return rep, runErr
}

// Verdict reports whether err, returned by Drill, is a verdict on the
// backup (nil: passed; ErrFailed: failed), as opposed to an error of
// the run that reached none. Only a verdict's report is stored.
func Verdict(err error) bool {
	return err == nil || errors.Is(err, ErrFailed)
}

type drill struct {
	o   Options
	m   *repository.Manifest
	now func() time.Time
	lg  *slog.Logger
	rep *repository.DrillReport
	// requestFailed is set when a request to the restored etcd failed:
	// then a crash may be on its way.
	requestFailed bool
	// moveSpool: the fetched file is restored in place (restoreInPlace).
	moveSpool bool
}

func round3(s float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(s, 'f', 3, 64), 64)
	return v
}

func (d *drill) phase(name string, dur time.Duration) {
	s := round3(dur.Seconds())
	d.rep.Phases = append(d.rep.Phases, repository.Phase{Name: name, Seconds: s})
	d.lg.Info("drill phase done", "phase", name, "seconds", s)
}

// structureChecks records the file check's verdict on the snapshot
// (verify.File's status st and error vErr): its bbolt structure and, when
// that holds, its db size and bolt hash against the manifest. An error of
// the check that is not about the file's content is returned as is: no
// verdict.
func (d *drill) structureChecks(st verify.Status, vErr error) error {
	if vErr != nil && !errors.Is(vErr, verify.ErrCorrupt) {
		return vErr
	}
	structure := "ok"
	if vErr != nil {
		structure = vErr.Error()
	}
	d.check("bbolt structure", "ok", structure, vErr == nil)
	if vErr == nil {
		m := d.m
		d.check("db size", strconv.FormatInt(m.DBSize, 10), strconv.FormatInt(st.Size, 10), st.Size == m.DBSize)
		d.check("bolt hash", hex32(m.BoltHash), hex32(st.BoltHash), st.BoltHash == m.BoltHash)
	}
	return nil
}

// check records a check. Failures are not logged here: they are in the
// report and in Drill's error, which the caller logs once.
func (d *drill) check(name, expected, actual string, passed bool) {
	d.rep.Checks = append(d.rep.Checks, repository.Check{Name: name, Expected: expected, Actual: actual, Passed: passed})
}

// failed reports whether a check failed so far.
func (d *drill) failed() error {
	if len(d.rep.FailedChecks()) > 0 {
		return ErrFailed
	}
	return nil
}

// run is the drill's story: the live hash at a point-in-time target
// first, then the scratch directory, fetch and decode, the replay (for a
// point in time), restore and verify, boot, and the checks on the
// booted server.
func (d *drill) run(ctx context.Context) error {
	o := d.o
	pitr := o.PointInTime != nil
	if pitr {
		// The live cluster's hash at the target first: a target it has
		// compacted is refused before anything is fetched. The plan's
		// objects stay held: a prune of this process leaves them.
		if err := d.liveHash(ctx); err != nil {
			return err
		}
		defer repository.Hold(o.PointInTime.Plan.Keys(o.Backups)...)()
	} else {
		// The backup stays held too: a prune of this process (the
		// agent's, beside its drills) leaves it for a later run, instead
		// of deleting it under the drill, which then either fails on a
		// vanished object or proves a backup no longer listed.
		defer repository.Hold(o.Backups.ManifestKey(d.m.ID), d.m.Object)()
	}
	work, err := makeWorkDir(o.ScratchDir)
	if err != nil {
		return err
	}
	defer d.removeWork(work)
	// A plain backup in a store on this machine is the raw snapshot
	// itself: checked and restored in place, read-only, with no copy into
	// the scratch directory (not for a point-in-time drill, whose replay
	// writes to its copy).
	spool, storeFile := filepath.Join(work, "snapshot.db"), false
	if !pitr {
		if local, ok := o.Backups.PlainLocalFile(d.m); ok {
			spool, storeFile = local, true
		}
	}
	// A plain drill's fetched file becomes its member's database where it
	// lies (restoreInPlace): no copy of it.
	d.moveSpool = !pitr && !storeFile && o.RevisionBump == 0 && !o.MarkCompacted
	if err := d.checkSpace(work, storeFile || d.moveSpool); err != nil {
		return err
	}
	if err := d.fetch(ctx, spool, storeFile); err != nil {
		return err
	}
	if pitr {
		// verify, then replay: the file changes, so it is checked first.
		if err := d.replay(ctx, spool); err != nil {
			return err
		}
	}
	// The member's peer URL is a unix socket in the drill's directory.
	mb := drillMember{dataDir: filepath.Join(work, "etcd"), peer: child.SocketPeerURL, token: "lifeboat-drill-" + randomHex(8)}
	st, err := d.restore(ctx, spool, mb)
	if err != nil {
		return err
	}
	removed := d.freeSpool(spool, storeFile || d.moveSpool)
	srv, err := d.boot(ctx, mb, filepath.Join(work, "sock"), removed)
	if err != nil {
		return err
	}
	// Its data is deleted next: no graceful stop, which would only flush
	// the database to disk (0.1–0.3 s on a gigabyte).
	defer srv.Kill()
	d.rep.Etcd = srv.Kind
	if o.OnBoot != nil {
		o.OnBoot(srv)
	}
	if err := d.serve(ctx, srv, st); err != nil {
		return err
	}
	if err := d.kitChecks(ctx); err != nil {
		return err
	}
	return d.failed()
}

// removeWork removes the drill's scratch directory, in steps
// (writeback.RemoveAll): the gigabytes of a drill's scratch directory
// freed at once stall every fsync on the disk, the live etcd's WAL among
// them when the drill runs on its node.
func (d *drill) removeWork(work string) {
	if err := writeback.RemoveAll(work); err != nil {
		d.lg.Error("remove drill scratch directory", "dir", work, "err", err)
	}
}

// checkSpace refuses a drill whose scratch directory work cannot hold
// it: the fetched snapshot (none when oneCopy), the restored copy, the
// point-in-time replay's segments, and a margin.
func (d *drill) checkSpace(work string, oneCopy bool) error {
	m := d.m
	need := spaceNeeded(m.DBSize, oneCopy)
	if d.o.PointInTime != nil {
		need += pointInTimeSpace(d.o.PointInTime.Plan)
	}
	if free, known, err := diskspace.Free(work); err != nil {
		return err
	} else if known && free < need {
		return fmt.Errorf("%w in scratch directory %s: need %s (the %s database restored beside its snapshot, etcd's 64 MiB WAL segment and a margin), have %s free",
			ErrNoSpace, d.o.ScratchDir, units.Bytes(int64(need)), units.Bytes(m.DBSize), units.Bytes(int64(free)))
	}
	return nil
}

// fetch fetches and decodes the backup into spool in one overlapped
// stream (or, storeFile, checks the store's own file spool) and records
// the object's and the snapshot's checks: a mismatch is a failed
// verdict, any other error an error of the run.
func (d *drill) fetch(ctx context.Context, spool string, storeFile bool) error {
	m, o := d.m, d.o
	fopts := repository.FetchOptions{Identities: o.Identities, Progress: o.Progress, Now: d.now}
	var fr *repository.FetchResult
	var ferr error
	if storeFile {
		fr, ferr = repository.CheckInPlace(ctx, spool, m, fopts)
	} else {
		fr, ferr = repository.Fetch(ctx, o.Backups, m, spool, fopts)
	}
	d.phase(PhaseFetch, fr.Fetch)
	d.phase(PhaseDecode, fr.Decode)
	switch {
	case errors.Is(ferr, repository.ErrObjectMismatch):
		// Read the object again for the actual values (rare: only on
		// damage).
		size, sum, err := repository.ObjectDigest(ctx, o.Backups, m)
		if err != nil {
			return fmt.Errorf("%w (reading it again: %v)", ferr, err)
		}
		d.check("object size", strconv.FormatInt(m.ObjectSize, 10), strconv.FormatInt(size, 10), size == m.ObjectSize)
		d.check("object sha256", m.ObjectSHA256, sum, sum == m.ObjectSHA256)
		if size != m.ObjectSize || sum != m.ObjectSHA256 {
			d.noteDamage(ctx, &repository.DamageError{Key: m.Object, Err: ferr})
		}
		if err := d.failed(); err != nil {
			return err
		}
		return ferr
	case ferr == nil || errors.Is(ferr, verify.ErrCorrupt) || errors.Is(ferr, verify.ErrManifestMismatch):
		// The stream ended and its size and sha256 matched the manifest.
		d.check("object size", strconv.FormatInt(m.ObjectSize, 10), strconv.FormatInt(fr.ObjectSize, 10), true)
		d.check("object sha256", m.ObjectSHA256, m.ObjectSHA256, true)
	}
	if errors.Is(ferr, verify.ErrCorrupt) || errors.Is(ferr, verify.ErrManifestMismatch) || (ferr == nil && fr.SnapshotSHA256 != "") {
		actual := fr.SnapshotSHA256
		if errors.Is(ferr, verify.ErrCorrupt) {
			actual = ferr.Error()
		}
		d.check("snapshot sha256", m.SnapshotSHA256, orNone(actual), actual == m.SnapshotSHA256)
		if err := d.failed(); err != nil {
			return err
		}
	}
	return ferr
}

// drillMember is the member a drill restores and boots.
type drillMember struct {
	dataDir, peer, token string
}

// restore restores spool into mb's data directory in a child process,
// with the read-only structural check of spool alongside (not for a
// point-in-time drill: its replay checked the file before it changed
// it), and returns the check's status. A failed structural check is a
// failed verdict, even when the restore succeeded: a file that failed it
// is never booted.
func (d *drill) restore(ctx context.Context, spool string, mb drillMember) (verify.Status, error) {
	if d.moveSpool {
		return d.restoreInPlace(ctx, spool, mb)
	}
	pitr := d.o.PointInTime != nil
	var (
		wg   sync.WaitGroup
		st   verify.Status
		vErr error
		vEnd time.Time
	)
	if !pitr {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, vErr = verify.File(ctx, spool)
			vEnd = d.now()
		}()
	}
	t := d.now()
	// In a child process of this program, as the boot: etcdutl's writing
	// of the database and WAL runs without this process's soft memory
	// limit. Its error comes back with etcdutl's text.
	rErr := restore.RestoreInChild(ctx, restore.RestoreOptions{
		SnapshotPath: spool, DataDir: mb.dataDir, Name: drillName, PeerURLs: []string{mb.peer},
		InitialClusterToken: mb.token, SkipHashCheck: true,
		RevisionBump: d.o.RevisionBump, MarkCompacted: d.o.MarkCompacted,
	})
	rEnd := d.now()
	d.phase(PhaseRestore, rEnd.Sub(t))
	if !pitr {
		wg.Wait()
		d.phase(PhaseVerify, max(0, vEnd.Sub(rEnd)))
		if err := d.structureChecks(st, vErr); err != nil {
			return st, err
		}
	}
	if err := d.failed(); err != nil {
		// Never boot a file that failed its structural check.
		return st, err
	}
	return st, rErr
}

// restoreInPlace restores spool into mb's data directory where it lies
// (restore.MoveIntoMember, restore.StartInPlace), without etcdutl's copy
// of the file: a child process opens the database (bbolt's walk of its
// pages) and writes the member's raft log while the structural check
// reads the file, and writes the database's steps (members, consistent
// index) only after the check ended and passed; a file that failed it is
// never written to, nor booted. Its phases: verify (the check, the child's
// open beside it), then restore (the rest of the child's work).
func (d *drill) restoreInPlace(ctx context.Context, spool string, mb drillMember) (verify.Status, error) {
	t := d.now()
	db, err := restore.MoveIntoMember(spool, mb.dataDir)
	if err != nil {
		return verify.Status{}, err
	}
	p, err := restore.StartInPlace(ctx, restore.RestoreOptions{
		SnapshotPath: db, DataDir: mb.dataDir, Name: drillName, PeerURLs: []string{mb.peer}, InitialClusterToken: mb.token,
	})
	if err != nil {
		return verify.Status{}, err
	}
	st, vErr := verify.File(ctx, db)
	vEnd := d.now()
	err = d.structureChecks(st, vErr)
	if err == nil {
		err = d.failed()
	}
	if err != nil {
		p.Abort()
		d.phase(PhaseRestore, d.now().Sub(vEnd))
		d.phase(PhaseVerify, vEnd.Sub(t))
		return st, err
	}
	rErr := p.Commit()
	d.phase(PhaseRestore, d.now().Sub(vEnd))
	d.phase(PhaseVerify, vEnd.Sub(t))
	return st, rErr
}

// freeSpool frees the fetched snapshot's space before etcd grows its
// files, in steps (about 0.35 s for a gigabyte), beside the boot, which
// grows nothing before it has loaded the data; the store's own file
// (keep: or the one moved into the member) is never removed. The channel
// is closed when it is done.
func (d *drill) freeSpool(spool string, keep bool) <-chan struct{} {
	removed := make(chan struct{})
	go func() {
		defer close(removed)
		if !keep {
			writeback.Remove(spool)
		}
	}()
	return removed
}

// etcdOptions are the throwaway etcd's options for member mb: its
// backend quota and how long it may take to boot are sized from the
// database it boots on (child.QuotaFor, child.ReadyFor).
func (d *drill) etcdOptions(mb drillMember, sockDir string) child.EtcdOptions {
	db := d.m.DBSize
	// A point-in-time drill's replay grew the file past the backup's size.
	if fi, err := os.Stat(filepath.Join(mb.dataDir, "member", "snap", "db")); err == nil {
		db = max(db, fi.Size())
	}
	return child.EtcdOptions{
		DataDir: mb.dataDir, Name: drillName, PeerURL: mb.peer, Token: mb.token,
		SocketDir: sockDir, Binary: d.o.EtcdBinary, NoSync: true,
		QuotaBytes: child.QuotaFor(db), ReadyTimeout: child.ReadyFor(db),
	}
}

// boot starts etcd on the restored member in a child process, on unix
// sockets in sockDir, and waits for removed (freeSpool) after it: etcd
// panics or exits on some logically corrupt data, and that is a failed
// verdict, not the end of the caller.
func (d *drill) boot(ctx context.Context, mb drillMember, sockDir string, removed <-chan struct{}) (*child.Etcd, error) {
	t := d.now()
	srv, err := child.StartEtcd(ctx, d.etcdOptions(mb, sockDir))
	d.phase(PhaseBoot, d.now().Sub(t))
	<-removed
	if errors.Is(err, child.ErrEtcdExited) && !errors.Is(err, child.ErrKilled) && ctx.Err() == nil {
		d.check("etcd boot", "serves the restored data", "etcd refused or crashed on the restored data: "+err.Error(), false)
		return nil, d.failed()
	}
	if err != nil {
		return nil, fmt.Errorf("boot restored etcd: %w", err)
	}
	return srv, nil
}

// serve runs the checks on the booted server srv, ended at once when the
// server exits (its client would retry until the drill's timeout). A
// crash while it served them is a failed verdict too, whatever the
// checks saw of it (connection errors); a kill from outside is an error
// of the run.
func (d *drill) serve(ctx context.Context, srv *child.Etcd, st verify.Status) error {
	t := d.now()
	cctx, stop := srv.UntilExit(ctx)
	err := d.checks(cctx, srv, st)
	stop()
	d.phase(PhaseChecks, d.now().Sub(t))
	exited := srv.Exited()
	if exited == nil && (err != nil || d.requestFailed) && ctx.Err() == nil {
		exited = srv.WaitExited(2 * time.Second)
	}
	if errors.Is(exited, child.ErrKilled) {
		return fmt.Errorf("restored etcd: %w", exited)
	}
	if exited != nil {
		d.check("etcd running", "serves the restored data", "etcd crashed on the restored data: "+exited.Error(), false)
		return d.failed()
	}
	return err
}

// checks checks the booted server srv: its revision, key count and
// HashKV against the manifest (or, for a point in time, its HashKV
// against the live cluster's), then the checks every drill makes
// (commonChecks). st is the file check's status.
func (d *drill) checks(ctx context.Context, srv *child.Etcd, st verify.Status) error {
	o := d.o
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return fmt.Errorf("connect to restored etcd: %w", err)
	}
	defer cli.Close()
	// The restored member's version decides whether its HashKV can be
	// compared with the file's (verify.CompareMemberHashKV); unknown when
	// Status fails, and then it is not compared.
	etcdVersion, statusErr := "", error(nil)
	if sr, err := cli.Status(ctx, srv.ClientURL); err != nil {
		statusErr = err
	} else {
		etcdVersion = sr.Version
		if o.EtcdBinary != "" {
			d.rep.Etcd = srv.Kind + " " + sr.Version
		}
	}

	if o.PointInTime != nil {
		if statusErr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			d.requestFailed = true
		}
		if err := d.pointInTimeChecks(ctx, cli, srv); err != nil {
			return err
		}
		return d.commonChecks(ctx, cli)
	}

	if err := d.countChecks(ctx, cli, st); err != nil {
		return err
	}
	if err := d.hashKVCheck(ctx, cli, srv, st, etcdVersion, statusErr); err != nil {
		return err
	}
	return d.commonChecks(ctx, cli)
}

// countChecks checks the restored member's revision (the snapshot's,
// plus any bump) and key count against the manifest: the keys etcd's API
// returns, without the empty key that a revision bump left in a backup of
// a cluster once restored with one (st, the fetched file's status, says).
func (d *drill) countChecks(ctx context.Context, cli *clientv3.Client, st verify.Status) error {
	m, o := d.m, d.o
	all, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("count keys on restored etcd: %w", err)
	}
	wantRev := m.Revision + int64(o.RevisionBump)
	gotRev := all.Header.Revision
	d.check("revision", strconv.FormatInt(wantRev, 10), strconv.FormatInt(gotRev, 10), gotRev == wantRev)
	want := m.TotalKeys
	if st.EmptyKey {
		want--
	}
	d.check("total keys", strconv.Itoa(want), strconv.FormatInt(all.Count, 10), all.Count == int64(want))
	return nil
}

// hashKVCheck checks the restored member's HashKV at the snapshot's
// revision against the manifest's (or the file's, st, when the manifest
// has none comparable), with the member's version (etcdVersion, or the
// error of asking it, statusErr) deciding whether the two compare.
func (d *drill) hashKVCheck(ctx context.Context, cli *clientv3.Client, srv *child.Etcd, st verify.Status, etcdVersion string, statusErr error) error {
	m, o := d.m, d.o
	// The restored member's HashKV against the file-computed HashKV of
	// the manifest, whether or not the live member could be compared
	// when the backup was taken: it checks the backup and lifeboat's own
	// hasher against real etcd at every drill.
	want := m.HashKV
	if want == 0 && m.HashKVStatus != "match" && st.HashKVComparable {
		// A manifest without a comparable file hash (an older hasher):
		// the file as the drill just computed it.
		want = st.HashKV
	}
	switch {
	case o.RevisionBump > 0:
		d.check("hashkv", hex32(m.HashKV), "not comparable: revision bumped by "+strconv.FormatUint(o.RevisionBump, 10), true)
	case !st.HashKVComparable:
		d.check("hashkv", hex32(m.HashKV), "not comparable: "+st.HashKVReason, true)
	case statusErr != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.requestFailed = true
		d.check("hashkv", hex32(want), "error: status of the restored member: "+statusErr.Error(), false)
	default:
		resp, err := cli.HashKV(ctx, srv.ClientURL, m.Revision)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			d.requestFailed = true
			d.check("hashkv", hex32(want), "error: "+err.Error(), false)
			break
		}
		expect := verify.Status{Revision: m.Revision, CompactRevision: m.CompactRevision, HashKV: want, HashKVComparable: true}
		status, cerr := verify.CompareMemberHashKV(expect, etcdVersion, resp.Hash, resp.CompactRevision)
		switch {
		case cerr == nil && strings.HasPrefix(status, "not comparable"):
			// Another version's HashKV rules: no verdict either way.
			d.check("hashkv", hex32(want), status, true)
		case cerr != nil:
			d.check("hashkv", hex32(want), hex32(resp.Hash), false)
		case status == "match":
			d.check("hashkv", hex32(want), hex32(resp.Hash), true)
		default:
			// The restored member has the snapshot's compaction; a
			// difference means the manifest is wrong.
			d.check("hashkv", hex32(want)+" at compact revision "+strconv.FormatInt(m.CompactRevision, 10),
				hex32(resp.Hash)+" at compact revision "+strconv.FormatInt(resp.CompactRevision, 10), false)
		}
	}
	return nil
}

// commonChecks are the checks of every drill after the data's: the
// prefixes hold keys, a test write succeeds.
func (d *drill) commonChecks(ctx context.Context, cli *clientv3.Client) error {
	for _, p := range d.o.CheckPrefixes {
		r, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			d.requestFailed = true
			d.check("prefix "+p, "at least 1 key", "error: "+err.Error(), false)
			continue
		}
		d.check("prefix "+p, "at least 1 key", fmt.Sprintf("%d keys", r.Count), r.Count > 0)
	}

	key := "/lifeboat/drill/" + randomHex(8)
	val := d.rep.StartedAt.Format(time.RFC3339Nano)
	actual := "ok"
	if _, err := cli.Put(ctx, key, val); err != nil {
		d.requestFailed = true
		actual = "put: " + err.Error()
	} else if r, err := cli.Get(ctx, key); err != nil {
		d.requestFailed = true
		actual = "get: " + err.Error()
	} else if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != val {
		actual = "read back a different value"
	}
	d.check("test write", "ok", actual, actual == "ok")
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

func hex32(v uint32) string { return fmt.Sprintf("0x%08x", v) }

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// makeWorkDir creates the scratch directory (0700) if needed, removes the
// subdirectories of drills whose process is gone (killed before it could
// clean up), and creates this drill's subdirectory.
func makeWorkDir(scratch string) (string, error) {
	if scratch == "" {
		return "", errors.New("drill: no scratch directory; set --scratch-dir")
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return "", fmt.Errorf("scratch directory %s: %w", scratch, err)
	}
	entries, err := os.ReadDir(scratch)
	if err != nil {
		return "", fmt.Errorf("scratch directory %s: %w", scratch, err)
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), workPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidStr); err == nil && pid != os.Getpid() && processGone(pid) {
			writeback.RemoveAll(filepath.Join(scratch, e.Name()))
		}
	}
	work, err := os.MkdirTemp(scratch, fmt.Sprintf("%s%d-", workPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("scratch directory %s: %w", scratch, err)
	}
	return work, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// noteDamage records the damage the drill proved (repository.RecordDamage,
// found by drill); a failure to record it is logged, the verdict stands.
func (d *drill) noteDamage(ctx context.Context, de *repository.DamageError) {
	if err := d.o.Backups.NoteDamage(ctx, de, repository.FoundByDrill); err != nil {
		d.lg.Warn("drill: the damage found is not recorded (read-only credentials?); the failed verdict stands", "object", de.Key, "err", err)
		return
	}
	d.lg.Error("drill: stored object damaged", "object", de.Key, "err", de.Err)
}
