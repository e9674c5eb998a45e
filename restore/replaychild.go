package restore

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math"
	"path/filepath"
	"runtime/debug"
	"strings"

	"filippo.io/age"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// ReplayGCPercent is the Go GC target of a replay: the replay makes
// short-lived copies of every value, and at Go's default (100) the GC
// took ~26 % of its CPU. End to end onto the 1 GiB bench base, 149 889
// revisions: 22 056 revisions/s at 400 vs 17 760 at 100, for 2.2 GiB
// peak RSS instead of 1.7 GiB (the mapped file is most of either). A
// one-shot replay (lifeboat restore --to-revision) sets it unless GOGC
// is set; a drill's replay child always.
const ReplayGCPercent = 400

// The replay child's protocol. On stdin: the job (replayJob) as one JSON
// line, then for each segment the tag 'S', the segment's store key and
// its raw form (decrypted and decompressed by the parent, which parsed
// only its header: repository.ReadSegmentRaw; the child parses it whole,
// repository.ParseSegment), each a uvarint length and the bytes, then the
// tag 'E' once the parent has sent every segment. Input
// that ends before 'E' (the parent stopped: its read or check of a
// segment failed) fails the replay. On its output (stderr): exactly one
// result line, and one error line when it failed, whatever else etcd's
// code printed.
const (
	replayResultPrefix = "lifeboat-replay-result: "
	// An error that wraps ErrReplay (the changes do not land as
	// recorded) and any other error have their own prefix, so that the
	// parent's error wraps ErrReplay exactly when the child's did.
	replayDivergedPrefix = "lifeboat-replay-diverged: "
	replayErrorPrefix    = "lifeboat-replay-error: "
	// The input ended before its 'E': the parent stopped sending, and
	// its own error says why.
	replayStoppedPrefix = "lifeboat-replay-stopped: "
	// A segment's records are damaged (the parent parsed only its
	// header).
	replayBadSegmentPrefix = "lifeboat-replay-bad-segment: "
	// maxReplayKey and maxReplaySegment bound a segment key and a
	// segment's raw form in the stream.
	maxReplayKey     = 4 << 10
	maxReplaySegment = 2 << 30
)

// replayErrorKinds are the replay child's error lines, the first whose
// sentinel its error wraps (the last, nil, for any other): the parent's
// error wraps the same sentinel.
var replayErrorKinds = []struct {
	prefix string
	kind   error
}{
	{replayDivergedPrefix, ErrReplay},
	{replayBadSegmentPrefix, repository.ErrBadSegment},
	{replayStoppedPrefix, errReplayStopped},
	{replayErrorPrefix, nil},
}

// replayErrorLines is replayErrorKinds for child.Process.Wait.
var replayErrorLines = func() map[string]error {
	m := map[string]error{}
	for _, k := range replayErrorKinds {
		m[k.prefix] = k.kind
	}
	return m
}()

// errReplayStopped is wrapped when the replay child's input ended before
// the last segment.
var errReplayStopped = errors.New("the input ended before the last segment: the parent stopped sending")

// replayResult is the child's result line: what it applied, and the
// memory settings it ran with.
type replayResult struct {
	Stats ReplayStats `json:"stats"`
	// GCPercent and MemoryLimit are the Go runtime's settings in the
	// child (debug.SetGCPercent, debug.SetMemoryLimit).
	GCPercent   int   `json:"gc_percent"`
	MemoryLimit int64 `json:"memory_limit"`
}

// RunReplay is the child side of a drill's replay: it reads the job and
// the segments from in (the protocol above), applies them with the
// replay's checks (the revision after each revision, every write as the
// store wrote it, the deleted keys at the end, leases recreated), and writes its result line and, on
// failure, its error line to out, where etcd's storage code also logs its
// errors. It lifts any soft memory limit and sets the GC target to
// ReplayGCPercent, for the rest of the process.
func RunReplay(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	res := replayResult{MemoryLimit: math.MaxInt64, GCPercent: ReplayGCPercent}
	debug.SetMemoryLimit(res.MemoryLimit)
	debug.SetGCPercent(res.GCPercent)
	err := func() error {
		if len(args) > 0 {
			return fmt.Errorf("%s: unexpected arguments %q", child.ReplayCommand, args)
		}
		br := bufio.NewReaderSize(in, 256<<10)
		line, err := br.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("%s: read the job: %w", child.ReplayCommand, err)
		}
		var job replayJob
		if err := json.Unmarshal(line, &job); err != nil {
			return fmt.Errorf("%s: read the job: %w", child.ReplayCommand, err)
		}
		// etcd's own errors (and its fatal or panic lines, which the
		// parent names when the child crashes), as JSON.
		lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(out), zap.ErrorLevel))
		// Each segment is parsed while the one before is applied.
		stream := func(context.Context) iter.Seq2[checkedSegment, error] { return readReplayStream(br) }
		res.Stats, err = applySegments(ctx, job, ahead(ctx, stream), lg)
		return err
	}()
	b, _ := json.Marshal(res)
	fmt.Fprintln(out, replayResultPrefix+string(b))
	if err != nil {
		for _, k := range replayErrorKinds {
			if k.kind == nil || errors.Is(err, k.kind) {
				child.WriteErrorLine(out, k.prefix, err)
				break
			}
		}
	}
	return err
}

// readReplayStream yields the segments of the child's input, and an
// error when the input is not the protocol or ends before its 'E'.
func readReplayStream(br *bufio.Reader) iter.Seq2[checkedSegment, error] {
	bufs := newSegBuffers()
	return func(yield func(checkedSegment, error) bool) {
		fail := func(err error) {
			yield(checkedSegment{}, fmt.Errorf("%s: read the changes: %w", child.ReplayCommand, err))
		}
		for {
			tag, err := br.ReadByte()
			if err == io.EOF {
				fail(errReplayStopped)
				return
			}
			if err != nil {
				fail(err)
				return
			}
			switch tag {
			case 'E':
				return
			case 'S':
			default:
				fail(fmt.Errorf("unknown tag %#x", tag))
				return
			}
			n, err := binary.ReadUvarint(br)
			if err == nil && n > maxReplayKey {
				err = fmt.Errorf("segment key of %d bytes", n)
			}
			key := make([]byte, n)
			if err == nil {
				_, err = io.ReadFull(br, key)
			}
			if err == nil {
				n, err = binary.ReadUvarint(br)
			}
			if err == nil && n > maxReplaySegment {
				err = fmt.Errorf("segment of %d bytes", n)
			}
			var raw []byte
			if err == nil {
				// Read as it comes (memory grows with the bytes
				// read, not with the length claimed), into a
				// recycled buffer.
				raw, err = readN(br, bufs.get(), n)
			}
			if err != nil {
				fail(err)
				return
			}
			// The values stay slices of raw.
			seg, err := repository.ParseSegmentBytes(raw)
			if err != nil {
				// As ReadSegment says it in the parent.
				yield(checkedSegment{}, fmt.Errorf("replay: read segment %s: %w", key, err))
				return
			}
			if !yield(checkedSegment{key: string(key), seg: seg, done: bufs.release(raw)}, nil) {
				return
			}
		}
	}
}

// ReplayInChild is Replay with the changes applied in a child process of
// this program (child.ReplayCommand): this process reads the segments from the
// store with ids, decodes them and checks their chain as Replay does (from
// their headers: it does not parse their records, which keeps its own
// work and garbage small under the soft memory limit), and streams the
// decoded segments to the child, which parses them, applies them to
// dbPath with Replay's checks and reports its stats and its error, whose
// text comes back as it is (wrapping ErrReplay or
// repository.ErrBadSegment when the child's did). A child that
// crashes (etcd's storage code panicked or exited) or is killed is a
// *child.Crash, with the end of its output (wrapping ErrKilled when it was
// killed from outside). The child runs without a soft
// memory limit at ReplayGCPercent, whatever this process's settings.
func ReplayInChild(ctx context.Context, dbPath string, p *PointInTimePlan, repo *repository.Repo, ids []age.Identity, lg *slog.Logger) (ReplayStats, error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return replay(ctx, dbPath, p, repo, ids, lg, true, func(ctx context.Context, job replayJob, segs iter.Seq2[checkedSegment, error]) (ReplayStats, error) {
		return applyInChild(ctx, job, segs, lg)
	})
}

// applyInChild is the applyFunc of ReplayInChild.
func applyInChild(ctx context.Context, job replayJob, segs iter.Seq2[checkedSegment, error], lg *slog.Logger) (ReplayStats, error) {
	st := ReplayStats{From: job.From, To: job.From}
	db, err := filepath.Abs(job.DB)
	if err != nil {
		return st, fmt.Errorf("replay: snapshot file %s: %w", job.DB, err)
	}
	job.DB = db // the child may run in another directory
	c, err := child.Start(ctx, "replay", []string{child.ReplayCommand}, true)
	if err != nil {
		return st, fmt.Errorf("replay: %w", err)
	}
	srcErr, sendErr := sendReplay(c.Stdin, job, segs)
	// Closed without the end tag when the source failed: the child then
	// fails too, after reporting what it applied.
	c.Stdin.Close()
	err = c.Wait(ctx, replayErrorLines)
	var res replayResult
	found := false
	for _, line := range strings.Split(c.Output(), "\n") {
		if r, ok := strings.CutPrefix(line, replayResultPrefix); ok {
			found = json.Unmarshal([]byte(r), &res) == nil
		}
	}
	if found {
		st = res.Stats
		lg.Debug("replay process ended", "pid", c.Pid(), "gc_percent", res.GCPercent, "memory_limit_bytes", res.MemoryLimit)
	}
	switch {
	case err != nil && !errors.Is(err, errReplayStopped):
		// The child failed on its own before the end of what it was
		// sent: in this process that error would come first too.
		return st, err
	case srcErr != nil:
		return st, srcErr
	case sendErr != nil:
		return st, fmt.Errorf("replay: send the changes to the replay process: %w", sendErr)
	case err != nil:
		return st, err
	case !found:
		return st, errors.New("replay: the replay process exited without its result")
	}
	return st, nil
}

// sendReplay writes the job and segs to the child's stdin w (the
// protocol above), ending with 'E' unless segs failed (srcErr) or a write
// failed (sendErr: the child has gone, and its own error says why).
func sendReplay(w io.Writer, job replayJob, segs iter.Seq2[checkedSegment, error]) (srcErr, sendErr error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	b, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("replay: %w", err), nil
	}
	bw.Write(append(b, '\n'))
	// The job at once: the child opens the file while the first segment
	// is read.
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	var num [binary.MaxVarintLen64]byte
	for cs, err := range segs {
		if err != nil {
			// What was sent before reaches the child: it applies it
			// (and reports a failure there first, as Replay would).
			bw.Flush()
			return err, nil
		}
		bw.WriteByte('S')
		bw.Write(binary.AppendUvarint(num[:0], uint64(len(cs.key))))
		bw.WriteString(cs.key)
		bw.Write(binary.AppendUvarint(num[:0], uint64(len(cs.raw))))
		if _, err := bw.Write(cs.raw); err != nil {
			return nil, err
		}
		if cs.done != nil {
			cs.done() // written (bufio copies what it keeps)
		}
	}
	bw.WriteByte('E')
	return nil, bw.Flush()
}

// readN reads n bytes from r into buf's memory (from its start), growing
// it as the bytes arrive.
func readN(r io.Reader, buf []byte, n uint64) ([]byte, error) {
	buf = buf[:0]
	for uint64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m := min(uint64(cap(buf)-len(buf)), n-uint64(len(buf)))
		k, err := io.ReadFull(r, buf[len(buf):len(buf)+int(m)])
		buf = buf[:len(buf)+k]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
