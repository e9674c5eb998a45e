package restore

import (
	"context"
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

	"github.com/lifeboat-dev/lifeboat/uploader"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// ErrDrillFailed is wrapped by Drill's error when the drill ran and a
// check failed; other errors mean it could not run to the end.
var ErrDrillFailed = errors.New("drill failed")

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

// DrillOptions describe one drill.
type DrillOptions struct {
	// Backups is the store; the drill only reads from it.
	Backups *uploader.Backups
	// Manifest is the backup to drill (see Select).
	Manifest *uploader.Manifest
	// Identities decrypt encrypted backups.
	Identities []age.Identity
	// ScratchDir holds the drill's files (created 0700 if missing); the
	// drill's own subdirectory is removed afterwards, always.
	ScratchDir string
	// EtcdBinary runs the throwaway etcd from this binary instead of the
	// embedded server.
	EtcdBinary string
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
}

// drillName is the member name of every drill's throwaway etcd.
const drillName = "lifeboat-drill"

// workPrefix starts the name of each drill's subdirectory of the scratch
// directory: lifeboat-drill-<pid>-<random>.
const workPrefix = "lifeboat-drill-"

// spaceMargin is added to twice the database size in the free space
// check: etcd's preallocated WAL segment and the test write.
const spaceMargin = 256 << 20

// Drill rehearses a restore of o.Manifest end to end: fetch the stored
// object, decrypt and decompress it into the scratch directory while
// checking its sha256 and etcd's trailer; then restore it with etcdutl
// while verify.File checks the file read-only; boot a throwaway etcd on
// the restored data (loopback, fresh ports and cluster token, so it can
// never reach or join a real cluster); and check its revision, key count,
// HashKV (when the backup recorded a comparable one), the configured
// prefixes and a test write. The etcd server is stopped and the scratch
// subdirectory removed on every path, failure, timeout and cancellation
// included.
//
// The report is returned whenever a manifest was given, also on failure;
// the caller stores it (uploader.Backups.PutDrillReport). The error is
// nil exactly when the report passed; it wraps ErrDrillFailed when a check
// failed.
func Drill(ctx context.Context, o DrillOptions) (rep *uploader.DrillReport, err error) {
	if o.Manifest == nil || o.Backups == nil {
		return nil, errors.New("drill: no backup given")
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Minute
	}
	m := o.Manifest
	d := &drill{o: o, m: m, now: now, lg: lg.With("backup_id", m.ID)}
	d.rep = &uploader.DrillReport{
		Format: uploader.DrillReportFormat, BackupID: m.ID, Cluster: o.Backups.Cluster,
		StartedAt: now().UTC(), Phases: []uploader.Phase{}, Checks: []uploader.Check{}, AgentVersion: o.Version,
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	runErr := d.run(ctx)
	if runErr != nil && parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		runErr = fmt.Errorf("drill timed out after %s: %w", o.Timeout, runErr)
	}
	rep = d.rep
	rep.FinishedAt = now().UTC()
	for _, p := range rep.Phases {
		rep.RecoverySeconds += p.Seconds
	}
	rep.RecoverySeconds = round3(rep.RecoverySeconds)
	failed := rep.FailedChecks()
	switch {
	case runErr != nil && !errors.Is(runErr, ErrDrillFailed):
		rep.Error = runErr.Error()
	case len(failed) > 0:
		c := failed[0]
		runErr = fmt.Errorf("%w: check %s: expected %s, actual %s", ErrDrillFailed, c.Name, c.Expected, c.Actual)
	}
	rep.Passed = runErr == nil
	return rep, runErr
}

type drill struct {
	o   DrillOptions
	m   *uploader.Manifest
	now func() time.Time
	lg  *slog.Logger
	rep *uploader.DrillReport
}

func round3(s float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(s, 'f', 3, 64), 64)
	return v
}

func (d *drill) phase(name string, dur time.Duration) {
	s := round3(dur.Seconds())
	d.rep.Phases = append(d.rep.Phases, uploader.Phase{Name: name, Seconds: s})
	d.lg.Info("drill phase done", "phase", name, "seconds", s)
}

// check records a check. Failures are not logged here: they are in the
// report and in Drill's error, which the caller logs once.
func (d *drill) check(name, expected, actual string, passed bool) {
	d.rep.Checks = append(d.rep.Checks, uploader.Check{Name: name, Expected: expected, Actual: actual, Passed: passed})
}

// failed reports whether a check failed so far.
func (d *drill) failed() error {
	if len(d.rep.FailedChecks()) > 0 {
		return ErrDrillFailed
	}
	return nil
}

func (d *drill) run(ctx context.Context) error {
	m, o := d.m, d.o
	work, err := makeWorkDir(o.ScratchDir)
	if err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(work); err != nil {
			d.lg.Error("remove drill scratch directory", "dir", work, "err", err)
		}
	}()
	need := uint64(2*m.DBSize) + spaceMargin
	if free, known, err := freeBytes(work); err != nil {
		return err
	} else if known && free < need {
		return fmt.Errorf("%w in scratch directory %s: need %d bytes (twice the %d byte database and a margin), have %d", ErrNoSpace, o.ScratchDir, need, m.DBSize, free)
	}

	// fetch + decode: one overlapped stream.
	spool := filepath.Join(work, "snapshot.db")
	fr, ferr := Fetch(ctx, o.Backups, m, spool, FetchOptions{Identities: o.Identities, Progress: o.Progress, Now: d.now})
	d.phase(PhaseFetch, fr.Fetch)
	d.phase(PhaseDecode, fr.Decode)
	switch {
	case errors.Is(ferr, uploader.ErrObjectMismatch):
		// Read the object again for the actual values (rare: only on
		// damage).
		size, sum, err := ObjectDigest(ctx, o.Backups, m)
		if err != nil {
			return fmt.Errorf("%w (reading it again: %v)", ferr, err)
		}
		d.check("object size", strconv.FormatInt(m.ObjectSize, 10), strconv.FormatInt(size, 10), size == m.ObjectSize)
		d.check("object sha256", m.ObjectSHA256, sum, sum == m.ObjectSHA256)
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
	if ferr != nil {
		return ferr
	}

	// restore, with the read-only structural check alongside.
	peer, err := FreeLoopbackURL()
	if err != nil {
		return err
	}
	token := "lifeboat-drill-" + randomHex(8)
	dataDir := filepath.Join(work, "etcd")
	var (
		wg   sync.WaitGroup
		st   verify.Status
		vErr error
		vEnd time.Time
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		st, vErr = verify.File(ctx, spool)
		vEnd = d.now()
	}()
	t := d.now()
	_, rErr := Restore(ctx, RestoreOptions{
		SnapshotPath: spool, DataDir: dataDir, Name: drillName, PeerURLs: []string{peer},
		InitialClusterToken: token, SkipHashCheck: true,
		RevisionBump: o.RevisionBump, MarkCompacted: o.MarkCompacted,
	})
	rEnd := d.now()
	d.phase(PhaseRestore, rEnd.Sub(t))
	wg.Wait()
	d.phase(PhaseVerify, max(0, vEnd.Sub(rEnd)))
	if vErr != nil && !errors.Is(vErr, verify.ErrCorrupt) {
		return vErr
	}
	structure := "ok"
	if vErr != nil {
		structure = vErr.Error()
	}
	d.check("bbolt structure", "ok", structure, vErr == nil)
	if vErr == nil {
		d.check("db size", strconv.FormatInt(m.DBSize, 10), strconv.FormatInt(st.Size, 10), st.Size == m.DBSize)
		d.check("bolt hash", hex32(m.BoltHash), hex32(st.BoltHash), st.BoltHash == m.BoltHash)
	}
	if rErr != nil {
		return rErr
	}
	if err := d.failed(); err != nil {
		// Never boot a file that failed its structural check: a damaged
		// bbolt file can crash an embedded server.
		return err
	}
	os.Remove(spool) // free the space before etcd grows its files

	// boot
	t = d.now()
	srv, err := StartEtcd(ctx, EtcdOptions{DataDir: dataDir, Name: drillName, PeerURL: peer, Token: token, Binary: o.EtcdBinary})
	d.phase(PhaseBoot, d.now().Sub(t))
	if err != nil {
		return fmt.Errorf("boot restored etcd: %w", err)
	}
	defer srv.Close()
	d.rep.Etcd = srv.Kind

	// checks
	t = d.now()
	err = d.checks(ctx, srv, st)
	d.phase(PhaseChecks, d.now().Sub(t))
	if err != nil {
		return err
	}
	return d.failed()
}

func (d *drill) checks(ctx context.Context, srv *Etcd, st verify.Status) error {
	m, o := d.m, d.o
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return fmt.Errorf("connect to restored etcd: %w", err)
	}
	defer cli.Close()
	if sr, err := cli.Status(ctx, srv.ClientURL); err == nil && srv.Kind != "" && !strings.HasPrefix(srv.Kind, "embedded") {
		d.rep.Etcd = srv.Kind + " " + sr.Version
	}

	all, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("count keys on restored etcd: %w", err)
	}
	wantRev := m.Revision + int64(o.RevisionBump)
	gotRev := all.Header.Revision
	d.check("revision", strconv.FormatInt(wantRev, 10), strconv.FormatInt(gotRev, 10), gotRev == wantRev)
	d.check("total keys", strconv.Itoa(m.TotalKeys), strconv.FormatInt(all.Count, 10), all.Count == int64(m.TotalKeys))

	switch {
	case o.RevisionBump > 0:
		d.check("hashkv", hex32(m.HashKV), "not comparable: revision bumped by "+strconv.FormatUint(o.RevisionBump, 10), true)
	case m.HashKVStatus != "match" && !strings.HasPrefix(m.HashKVStatus, "deferred") && !strings.HasPrefix(m.HashKVStatus, "error: "):
		// A deferred or failed live comparison leaves a valid file hash
		// for the restored member to check.
		d.check("hashkv", hex32(m.HashKV), "not comparable: the backup's hashkv status is "+strconv.Quote(m.HashKVStatus), true)
	default:
		resp, err := cli.HashKV(ctx, srv.ClientURL, m.Revision)
		if err != nil {
			d.check("hashkv", hex32(m.HashKV), "error: "+err.Error(), false)
			break
		}
		want := verify.Status{Revision: m.Revision, CompactRevision: m.CompactRevision, HashKV: m.HashKV, HashKVComparable: true}
		status, cerr := verify.CompareHashKV(want, resp.Hash, resp.CompactRevision)
		switch {
		case cerr != nil:
			d.check("hashkv", hex32(m.HashKV), hex32(resp.Hash), false)
		case status == "match":
			d.check("hashkv", hex32(m.HashKV), hex32(resp.Hash), true)
		default:
			// The restored member has the snapshot's compaction; a
			// difference means the manifest is wrong.
			d.check("hashkv", hex32(m.HashKV)+" at compact revision "+strconv.FormatInt(m.CompactRevision, 10),
				hex32(resp.Hash)+" at compact revision "+strconv.FormatInt(resp.CompactRevision, 10), false)
		}
	}

	for _, p := range o.CheckPrefixes {
		r, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			d.check("prefix "+p, "at least 1 key", "error: "+err.Error(), false)
			continue
		}
		d.check("prefix "+p, "at least 1 key", fmt.Sprintf("%d keys", r.Count), r.Count > 0)
	}

	key := "/lifeboat/drill/" + randomHex(8)
	val := d.rep.StartedAt.Format(time.RFC3339Nano)
	actual := "ok"
	if _, err := cli.Put(ctx, key, val); err != nil {
		actual = "put: " + err.Error()
	} else if r, err := cli.Get(ctx, key); err != nil {
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
			os.RemoveAll(filepath.Join(scratch, e.Name()))
		}
	}
	work, err := os.MkdirTemp(scratch, fmt.Sprintf("%s%d-", workPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("scratch directory %s: %w", scratch, err)
	}
	return work, nil
}
