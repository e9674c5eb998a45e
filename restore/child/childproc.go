package child

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// Process is this program running one of its hidden one-shot commands
// (RestoreCommand, ReplayCommand) in a process of its own, for one step
// of a drill: whatever etcd's code does there (panic, exit, grow its
// heap), it does it to the child. Its environment is the throwaway
// etcd's (childEnv): no GOMEMLIMIT or GOGC, no credentials. It dies with
// this process (childAttr). Its output (stdout and stderr) is kept, the
// last 64 KiB, for its error line or the summary of its crash.
type Process struct {
	// Stdin is the pipe to the child's stdin (nil unless Start was
	// asked for it); close it to end the child's input.
	Stdin io.WriteCloser

	what string // "restore", "replay": names it in errors
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	oom  int64 // oomKills when it started
}

// onStart, when set (OnStart, by tests), is called with each child
// (restore, replay, and the etcd StartEtcd runs) right after it started.
var onStart func(*exec.Cmd)

// OnStart has f called with each child process (restore, replay, etcd)
// right after it started, until the returned undo is called. It is for
// tests, which must not start children in parallel meanwhile.
func OnStart(f func(*exec.Cmd)) (undo func()) {
	onStart = f
	return func() { onStart = nil }
}

// Start starts this program with args (the hidden command first),
// with a pipe to its stdin when withStdin. The child ends when ctx does
// (SIGKILL). The calling goroutine stays on its OS thread until Wait
// returns: Pdeathsig fires when the thread that started the child ends.
// Call Wait exactly once after a nil error. what names the child in
// errors ("restore", "replay").
func Start(ctx context.Context, what string, args []string, withStdin bool) (*Process, error) {
	self, err := selfExecutable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = childEnv(cmd.Environ())
	out := &syncbuf.Buffer{Max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr()
	c := &Process{what: what, cmd: cmd, out: out, oom: oomKills()}
	if withStdin {
		if c.Stdin, err = cmd.StdinPipe(); err != nil {
			return nil, fmt.Errorf("start the %s process: %w", what, err)
		}
	}
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("start the %s process %s: %w", what, self, err)
	}
	if onStart != nil {
		onStart(cmd)
	}
	return c, nil
}

// Wait waits for the child to exit and returns how it ended: nil for
// exit status 0; ctx's error when ctx ended; else the first line of its
// output that starts with one of errorLines' prefixes, as a *lineError
// with the rest of that line as its exact text and the prefix's error
// (nil: none) to unwrap; else, when it printed no such line (it
// panicked, exited on a fatal log, or was killed), a *Crash, which
// wraps ErrKilled when a signal from outside killed it.
func (c *Process) Wait(ctx context.Context, errorLines map[string]error) error {
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
				return &lineError{msg: msg, kind: kind}
			}
		}
	}
	if note, killed := killNote(err, c.oom); killed {
		return &Crash{what: c.what, how: note, summary: lastLines(out, 5), killed: true}
	}
	return &Crash{what: c.what, how: err.Error(), summary: crashSummary(out)}
}

// Output is what the child printed (its last 64 KiB).
func (c *Process) Output() string { return c.out.String() }

// Pid is the child's process id.
func (c *Process) Pid() int { return c.cmd.Process.Pid }

// lineError is the error a child reported on its error line: the text of
// the error the same step returns in this process, and the sentinel it
// wrapped when the child's protocol carries one (ErrReplay).
type lineError struct {
	msg  string
	kind error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.kind }

// Crash is a child that ended without its error line: etcd's code
// panicked or exited (etcdutl and the mvcc store do on some damaged
// data), or it was killed (killed: it then wraps ErrKilled). It took
// only the child down.
type Crash struct {
	what, how, summary string
	killed             bool
}

func (e *Crash) Error() string {
	if e.killed {
		return fmt.Sprintf("%s process ended (%s): %v: %s", e.what, e.how, ErrKilled, orNone(e.summary))
	}
	return fmt.Sprintf("%s process crashed (%s): %s", e.what, e.how, e.summary)
}

// Unwrap is ErrKilled for a child killed from outside, else nil.
func (e *Crash) Unwrap() error {
	if e.killed {
		return ErrKilled
	}
	return nil
}

// WriteErrorLine writes err on the child's error line to w: prefix, then
// err's text on one line, for the parent's Wait to read back.
func WriteErrorLine(w io.Writer, prefix string, err error) {
	fmt.Fprintln(w, prefix+strings.ReplaceAll(err.Error(), "\n", " "))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
