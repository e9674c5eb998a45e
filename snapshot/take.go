package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Info describes a snapshot taken by Take.
type Info struct {
	// Endpoint is the member the snapshot was streamed from.
	Endpoint string
	// MemberID, ClusterID and MemberName identify that member.
	MemberID, ClusterID uint64
	MemberName          string
	// EtcdVersion is the member's server version (from its status);
	// StorageVersion is the storage schema version etcd reported in the
	// snapshot stream (empty before etcd v3.6). Restores need an etcd at
	// least that new.
	EtcdVersion, StorageVersion string
	// Size is the number of bytes streamed, trailer included: the size of
	// the spool file.
	Size int64
	// SHA256 is the hex sha256 of the database bytes, equal to etcd's
	// trailer.
	SHA256 string
	// Duration is how long streaming took, fallbacks included.
	Duration time.Duration
}

// Take takes a snapshot of one etcd member. It asks the endpoints for their
// status (Members), then streams Maintenance.Snapshot from the first member
// in that order that can serve it into a new file at spoolPath (0600,
// O_EXCL; its directory must exist, see PrepareSpoolDir) and, byte for byte,
// into tee (nil for none; e.g. a compressor), checking etcd's sha256 trailer
// as the bytes arrive. If the stream cannot be started or fails
// before the first byte, the next member is tried; once bytes have reached
// the spool file and tee, a failure is final: when the member's stream
// broke (not the spool, the tee or ctx), the error is a *MemberError, and
// the caller may start over with that member in opts.Skip. Members in
// opts.Skip are never streamed from.
//
// On success the spool file holds the snapshot exactly as etcdctl snapshot
// save would write it, but not fsynced: it is scratch space, read back and
// removed by the caller, so its pages need not reach the disk (incremental
// writeback, opts.Chunk, still bounds the dirty pages it leaves). On any
// failure, including cancellation of ctx, the spool file is removed and the error names the endpoint, the
// cause and what to check. lg receives one line per fallback and one on
// success; nil discards them.
func Take(ctx context.Context, cfg Config, spoolPath string, tee io.Writer, opts Options, lg *slog.Logger) (Info, error) {
	var f *os.File
	info, err := take(ctx, cfg, func() (*os.File, error) {
		var err error
		f, err = createSpool(spoolPath)
		return f, err
	}, tee, opts, lg)
	if f == nil {
		return info, err
	}
	if err != nil {
		discardSpool(f)
		return info, err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(spoolPath)
		return Info{}, fmt.Errorf("close spool file %s: %w", spoolPath, err)
	}
	return info, nil
}

// TakeFile is Take into spool, an empty file open for writing (e.g. from
// CreateSpool), which it leaves open, on failure too: the caller closes
// it, and discards it on failure.
func TakeFile(ctx context.Context, cfg Config, spool *os.File, tee io.Writer, opts Options, lg *slog.Logger) (Info, error) {
	return take(ctx, cfg, func() (*os.File, error) { return spool, nil }, tee, opts, lg)
}

// take is Take and TakeFile: spool is called once a member is known.
func take(ctx context.Context, cfg Config, spool func() (*os.File, error), tee io.Writer, opts Options, lg *slog.Logger) (Info, error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	cc, err := cfg.ClientConfig()
	if err != nil {
		return Info{}, err
	}
	cfg = cfg.withDefaults()
	members, err := Members(ctx, cfg)
	if err != nil {
		return Info{}, err
	}
	for _, m := range members {
		if m.Err != nil {
			lg.Warn("etcd member unreachable, not using it", "endpoint", m.Endpoint, "err", redact(m.Err, cfg.Password))
		} else if m.LeaderID == 0 {
			lg.Warn("etcd member sees no leader (quorum lost?); used only when named with --member", "endpoint", m.Endpoint, "member", m.Name)
		}
	}
	if members, err = usable(members, cfg.Member); err != nil {
		return Info{}, err
	}
	f, err := spool()
	if err != nil {
		return Info{}, err
	}
	info, err := takeFirst(ctx, cfg, cc, members, f, tee, opts, lg)
	return info, redact(err, cfg.Password)
}

// takeFirst streams from the first member that can serve into f.
func takeFirst(ctx context.Context, cfg Config, cc clientv3.Config, members []MemberStatus, f *os.File, tee io.Writer, opts Options, lg *slog.Logger) (Info, error) {
	start := time.Now()
	var errs []error
	skipped := 0
	for _, m := range members {
		if m.Err != nil {
			continue
		}
		if slices.Contains(opts.Skip, m.Endpoint) {
			skipped++
			continue
		}
		n, storageVersion, sha, err := takeFrom(ctx, cfg, cc, m.Endpoint, f, tee, opts)
		if err == nil {
			info := Info{
				Endpoint:       m.Endpoint,
				MemberID:       m.ID,
				ClusterID:      m.ClusterID,
				MemberName:     m.Name,
				EtcdVersion:    m.Version,
				StorageVersion: storageVersion,
				Size:           n,
				SHA256:         sha,
				Duration:       time.Since(start),
			}
			lg.Info("snapshot taken", "endpoint", m.Endpoint, "member", m.Name,
				"leader", m.Leader, "bytes", n, "sha256", sha, "duration", info.Duration)
			return info, nil
		}
		if n > 0 || ctx.Err() != nil {
			var me *MemberError
			if errors.As(err, &me) {
				me.Member = m.Name
			}
			return Info{}, err
		}
		lg.Warn("snapshot from member failed before any data, trying the next member",
			"endpoint", m.Endpoint, "err", redact(err, cfg.Password))
		errs = append(errs, err)
	}
	if len(errs) == 0 && skipped > 0 {
		return Info{}, fmt.Errorf("no etcd member left to stream from: %d failed already, the others are unreachable", skipped)
	}
	if len(errs) == 0 {
		return Info{}, fmt.Errorf("no etcd member reachable at %v", cfg.Endpoints)
	}
	if len(errs) == 1 {
		return Info{}, errs[0]
	}
	return Info{}, fmt.Errorf("snapshot failed on every reachable member: %w", errors.Join(errs...))
}

// takeFrom streams a snapshot from one endpoint into f. n is the number of
// bytes that arrived, also on error.
func takeFrom(ctx context.Context, cfg Config, cc clientv3.Config, ep string, f *os.File, tee io.Writer, opts Options) (n int64, storageVersion, sha string, err error) {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	cli, err := newClient(streamCtx, cc, ep)
	if err != nil {
		return 0, "", "", explain("connect to", ep, cfg, err)
	}
	defer cli.Close()

	// Until the first message arrives the watchdog in save is not running:
	// the stall timeout covers the start too (OpenStream waits for the
	// first message).
	startTimer := time.AfterFunc(opts.StallTimeout, cancel)
	s, err := OpenStream(streamCtx, cli)
	if !startTimer.Stop() && ctx.Err() == nil {
		if s != nil {
			_ = s.Close()
		}
		err = fmt.Errorf("%w: the stream did not start within %s", ErrStalled, opts.StallTimeout)
		return 0, "", "", explain("start snapshot stream from", ep, cfg, err)
	}
	if err != nil {
		return 0, "", "", explain("start snapshot stream from", ep, cfg, err)
	}
	defer s.Close()

	n, sha, err = save(ctx, s, f, tee, opts)
	if err != nil {
		var se *streamError
		switch {
		case ctx.Err() != nil:
			return n, "", "", fmt.Errorf("snapshot stream from %s: %w", ep, err)
		case errors.As(err, &se) && n > 0:
			// Mid-stream, a reset or EOF is the member going away, not a
			// TLS mismatch (the stream had started).
			err = fmt.Errorf("snapshot stream from %s broke off (the member stopped, restarted or lost its connection): %w", ep, err)
			return n, "", "", &MemberError{Endpoint: ep, Err: err}
		case errors.As(err, &se):
			return n, "", "", explain("snapshot stream from", ep, cfg, err)
		case errors.Is(err, ErrStalled):
			return n, "", "", &MemberError{Endpoint: ep, Err: explain("snapshot stream from", ep, cfg, err)}
		case errors.Is(err, ErrTrailer):
			return n, "", "", &MemberError{Endpoint: ep, Err: fmt.Errorf("snapshot stream from %s: %w", ep, err)}
		}
		return n, "", "", fmt.Errorf("snapshot stream from %s: %w", ep, err)
	}
	return n, s.Version(), sha, nil
}

// ErrCompacted is wrapped by LiveHashKV when the member has compacted past
// the requested revision: its hash at that revision is gone. This is the
// one legitimate reason a live comparison cannot be made; any other
// failure is an error.
var ErrCompacted = errors.New("revision compacted on the member")

// futureRevWait bounds how long LiveHashKV waits for a member that has not
// applied the requested revision yet (a follower a few entries behind the
// one that was snapshotted).
const futureRevWait = 5 * time.Second

// LiveHashKV asks the member at endpoint for the hash of its key-value store
// at revision rev (0 for its current revision) and returns the hash and the
// member's compact revision (-1 if it never compacted). Hashes of two members, or of a member and a
// restored snapshot, are comparable only when their compact revisions agree.
// A member that has not applied rev yet is asked again for a few seconds;
// one that compacted past rev returns an error wrapping ErrCompacted.
func LiveHashKV(ctx context.Context, cfg Config, endpoint string, rev int64) (hash uint32, compactRev int64, err error) {
	cc, err := cfg.ClientConfig()
	if err != nil {
		return 0, 0, err
	}
	cfg = cfg.withDefaults()
	if err := probe(ctx, endpoint, cc.TLS); err != nil {
		return 0, 0, redact(explain("connect to", endpoint, cfg, err), cfg.Password)
	}
	cli, err := newClient(ctx, cc, endpoint)
	if err != nil {
		return 0, 0, redact(explain("connect to", endpoint, cfg, err), cfg.Password)
	}
	defer cli.Close()
	op := fmt.Sprintf("hashkv at revision %d from", rev)
	wait := time.NewTimer(futureRevWait)
	defer wait.Stop()
	for {
		resp, err := cli.HashKV(ctx, endpoint, rev)
		switch {
		case err == nil:
			return resp.Hash, resp.CompactRevision, nil
		case errors.Is(err, rpctypes.ErrCompacted):
			return 0, 0, fmt.Errorf("%s %s: %w: %w", op, endpoint, ErrCompacted, err)
		case errors.Is(err, rpctypes.ErrFutureRev):
			select {
			case <-wait.C:
				return 0, 0, fmt.Errorf("%s %s: the member did not reach the revision within %s: %w", op, endpoint, futureRevWait, err)
			case <-ctx.Done():
				return 0, 0, fmt.Errorf("%s %s: %w", op, endpoint, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return 0, 0, redact(explain(op, endpoint, cfg, err), cfg.Password)
		}
	}
}

// PrepareSpoolDir makes sure dir exists (creating it 0700 if needed) and that
// a file can be written in it. An existing directory keeps its mode.
func PrepareSpoolDir(dir string) error {
	if dir == "" {
		return errors.New("spool dir: empty; set --spool-dir")
	}
	const hint = "choose a writable directory with --spool-dir"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spool dir %s (%s): %w", dir, hint, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("spool dir %s (%s): %w", dir, hint, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("spool dir %s: not a directory (%s)", dir, hint)
	}
	// The probe has no name (as the spool file): nothing to leave behind.
	f, err := createAnonymous(dir)
	if err != nil {
		return fmt.Errorf("spool dir %s: not writable (%s): %w", dir, hint, err)
	}
	_, werr := f.Write([]byte{0})
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("spool dir %s: not writable (%s): %w", dir, hint, err)
	}
	return nil
}
