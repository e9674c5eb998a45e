package restore

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// stepChild is this program running one of its hidden one-shot commands
// (RestoreCommand, ReplayCommand) in a process of its own, for one step
// of a drill: whatever etcd's code does there (panic, exit, grow its
// heap), it does it to the child. Its environment is the throwaway
// etcd's (childEnv): no GOMEMLIMIT or GOGC, no credentials. It dies with
// this process (childAttr). Its output (stdout and stderr) is kept, the
// last 64 KiB, for its error line or the summary of its crash.
type stepChild struct {
	what  string // "restore", "replay": names it in errors
	cmd   *exec.Cmd
	out   *syncbuf.Buffer
	stdin io.WriteCloser // nil unless asked for
	oom   int64          // oomKills when it started
}

// childStarted, when set (by tests), is called with each child of a
// drill (restore, replay, and the etcd StartEtcd runs) right after it
// started.
var childStarted func(*exec.Cmd)

// startStep starts this program with args (the hidden command first),
// with a pipe to its stdin when withStdin. The child ends when ctx does
// (SIGKILL). The calling goroutine stays on its OS thread until wait
// returns: Pdeathsig fires when the thread that started the child ends.
// Call wait exactly once after a nil error.
func startStep(ctx context.Context, what string, args []string, withStdin bool) (*stepChild, error) {
	self, err := selfExecutable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = childEnv(cmd.Environ())
	out := &syncbuf.Buffer{Max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr()
	c := &stepChild{what: what, cmd: cmd, out: out, oom: oomKills()}
	if withStdin {
		if c.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, fmt.Errorf("start the %s process: %w", what, err)
		}
	}
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("start the %s process %s: %w", what, self, err)
	}
	if childStarted != nil {
		childStarted(cmd)
	}
	return c, nil
}

// wait waits for the child to exit and returns how it ended: nil for
// exit status 0; ctx's error when ctx ended; else the first line of its
// output that starts with one of errorLines' prefixes, as a *childError
// with the rest of that line as its exact text and the prefix's error
// (nil: none) to unwrap; else, when it printed no such line (it
// panicked, exited on a fatal log, or was killed), a *childCrash, which
// wraps ErrKilled when a signal from outside killed it.
func (c *stepChild) wait(ctx context.Context, errorLines map[string]error) error {
	err := c.cmd.Wait()
	runtime.UnlockOSThread()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	out := c.out.String()
	for _, line := range strings.Split(out, "\n") {
		for prefix, kind := range errorLines {
			if msg, ok := strings.CutPrefix(line, prefix); ok {
				return &childError{msg: msg, kind: kind}
			}
		}
	}
	if note, killed := killNote(err, c.oom); killed {
		return &childCrash{what: c.what, how: note, summary: lastLines(out, 5), killed: true}
	}
	return &childCrash{what: c.what, how: err.Error(), summary: crashSummary(out)}
}

// output is what the child printed (its last 64 KiB).
func (c *stepChild) output() string { return c.out.String() }

// childError is the error a child reported on its error line: the text of
// the error the same step returns in this process, and the sentinel it
// wrapped when the child's protocol carries one (ErrReplay).
type childError struct {
	msg  string
	kind error
}

func (e *childError) Error() string { return e.msg }
func (e *childError) Unwrap() error { return e.kind }

// childCrash is a child that ended without its error line: etcd's code
// panicked or exited (etcdutl and the mvcc store do on some damaged
// data), or it was killed (killed: it then wraps ErrKilled). It took
// only the child down.
type childCrash struct {
	what, how, summary string
	killed             bool
}

func (e *childCrash) Error() string {
	if e.killed {
		return fmt.Sprintf("%s process ended (%s): %v: %s", e.what, e.how, ErrKilled, orNone(e.summary))
	}
	return fmt.Sprintf("%s process crashed (%s): %s", e.what, e.how, e.summary)
}

// Unwrap is ErrKilled for a child killed from outside, else nil.
func (e *childCrash) Unwrap() error {
	if e.killed {
		return ErrKilled
	}
	return nil
}

// oneLine is err's text on one line, for a child's error line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }
