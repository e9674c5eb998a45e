package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/logfield"
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

// Take takes a snapshot of one etcd member. It streams
// Maintenance.Snapshot from the first member, in the order of the
// session's latest Members answer (asked now if Take has none: an answer
// serves one Take), that can serve it into a new file at spoolPath (0600,
// O_EXCL; its directory must exist, see PrepareSpoolDir) and, byte for
// byte, into tee (nil for none; e.g. a compressor), checking etcd's sha256
// trailer as the bytes arrive. If the stream cannot be started or fails
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
// failure, including cancellation of ctx, the spool file is removed and the
// error names the endpoint, the cause and what to check. The session's
// logger receives one line per fallback and one on success.
func (s *Session) Take(ctx context.Context, spoolPath string, tee io.Writer, opts Options) (Info, error) {
	var f *os.File
	info, err := s.take(ctx, func() (*os.File, error) {
		var err error
		f, err = createSpool(spoolPath)
		return f, err
	}, tee, opts)
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
func (s *Session) TakeFile(ctx context.Context, spool *os.File, tee io.Writer, opts Options) (Info, error) {
	return s.take(ctx, func() (*os.File, error) { return spool, nil }, tee, opts)
}

// take is Take and TakeFile: spool is called once a member is known.
func (s *Session) take(ctx context.Context, spool func() (*os.File, error), tee io.Writer, opts Options) (Info, error) {
	if err := opts.Validate(); err != nil {
		return Info{}, fmt.Errorf("snapshot: %w", err)
	}
	opts = opts.withDefaults()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	members := s.lastMembers()
	if members == nil {
		var err error
		if members, err = s.Members(ctx); err != nil {
			return Info{}, err
		}
		s.lastMembers()
	}
	for _, m := range members {
		if m.Err != nil {
			s.lg.Warn("etcd member unreachable, not using it", "endpoint", m.Endpoint, "err", redact(m.Err, s.cfg.Password))
		} else if m.LeaderID == 0 {
			s.lg.Warn("etcd member sees no leader (quorum lost?); used only when named with --member", "endpoint", m.Endpoint, "member", m.Name)
		}
	}
	members, err := usable(members, s.cfg.Member)
	if err != nil {
		return Info{}, err
	}
	f, err := spool()
	if err != nil {
		return Info{}, err
	}
	info, err := s.takeFirst(ctx, members, f, tee, opts)
	return info, redact(err, s.cfg.Password)
}

// takeFirst streams from the first member that can serve into f.
func (s *Session) takeFirst(ctx context.Context, members []MemberStatus, f *os.File, tee io.Writer, opts Options) (Info, error) {
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
		n, storageVersion, sha, err := s.takeFrom(ctx, m.Endpoint, f, tee, opts)
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
			s.lg.Info("snapshot taken", "endpoint", m.Endpoint, "member", m.Name,
				"leader", m.Leader, "bytes", n, "sha256", sha, "seconds", logfield.Seconds(info.Duration))
			return info, nil
		}
		if n > 0 || ctx.Err() != nil {
			var me *MemberError
			if errors.As(err, &me) {
				me.Member = m.Name
			}
			return Info{}, err
		}
		s.lg.Warn("snapshot from member failed before any data, trying the next member",
			"endpoint", m.Endpoint, "err", redact(err, s.cfg.Password))
		errs = append(errs, err)
	}
	if len(errs) == 0 && skipped > 0 {
		return Info{}, fmt.Errorf("no etcd member left to stream from: %d failed already, the others are unreachable", skipped)
	}
	if len(errs) == 0 {
		return Info{}, fmt.Errorf("no etcd member reachable at %v", s.cfg.Endpoints)
	}
	if len(errs) == 1 {
		return Info{}, errs[0]
	}
	return Info{}, fmt.Errorf("snapshot failed on every reachable member: %w", errors.Join(errs...))
}

// takeFrom streams a snapshot from one endpoint into f, over the session's
// connection to it. n is the number of bytes that arrived, also on error.
func (s *Session) takeFrom(ctx context.Context, ep string, f *os.File, tee io.Writer, opts Options) (n int64, storageVersion, sha string, err error) {
	cfg := s.cfg
	cli := s.client(ep)
	if cli == nil {
		return 0, "", "", fmt.Errorf("snapshot stream from %s: not one of the endpoints %v", ep, cfg.Endpoints)
	}
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Until the first message arrives the watchdog in save is not running:
	// the stall timeout covers the start too (openStream waits for the
	// first message).
	startTimer := time.AfterFunc(opts.StallTimeout, cancel)
	var st *Stream
	err = s.withToken(streamCtx, ep, func(ctx context.Context) error {
		var err error
		st, err = openStream(ctx, cli)
		return err
	})
	if !startTimer.Stop() && ctx.Err() == nil {
		if st != nil {
			_ = st.Close()
		}
		err = fmt.Errorf("%w: the stream did not start within %s", ErrStalled, opts.StallTimeout)
		return 0, "", "", explain("start snapshot stream from", ep, cfg, err)
	}
	if err != nil {
		return 0, "", "", explain("start snapshot stream from", ep, cfg, err)
	}
	defer st.Close()

	n, sha, err = save(ctx, st, f, tee, opts)
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
	return n, st.Version(), sha, nil
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
