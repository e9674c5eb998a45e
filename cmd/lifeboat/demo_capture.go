package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// demoCaptureInterval is the demo's capture interval: short, so that a
// change is durable a moment after it is made and the demo does not wait.
const demoCaptureInterval = 200 * time.Millisecond

// demoDurableTimeout bounds the wait for capture to store the deletion.
const demoDurableTimeout = 30 * time.Second

// demoCapture is capture.Run in the background, built as the agent builds
// it (captureFunc) but without the daemon: a lock-free token, and the
// demo's backup as its first anchor.
type demoCapture struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
	sess   *snapshot.Session
	once   sync.Once

	mu     sync.Mutex
	status capture.Status
	// anchors are the backups of this etcd a generation may start from:
	// the generation of another etcd (an earlier demo into the same
	// store) is not this one's.
	anchors map[string]bool
	gaps    []capture.Status
	changed chan struct{} // closed and replaced on every report
}

// startCapture starts capturing every change after the demo's backup.
func (d *demoRun) startCapture(ctx context.Context) (*demoCapture, error) {
	d.stepf("capturing every change after revision %d, as the agent does (lifeboat agent --capture --capture-interval %s)", d.backup.Revision, demoCaptureInterval)
	backups, err := createBackups(ctx, d.cfg, d.lg)
	if err != nil {
		return nil, err
	}
	enc, err := encodingFromConfig(d.cfg)
	if err != nil {
		return nil, err
	}
	sess, err := snapshot.Dial(ctx, etcdConfig(d.cfg), d.lg)
	if err != nil {
		return nil, fmt.Errorf("demo: capture: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	c := &demoCapture{cancel: cancel, done: make(chan struct{}), sess: sess,
		anchors: map[string]bool{d.backup.ID: true}, changed: make(chan struct{})}
	// Without a lock the agent's token is its start time (CaptureHooks).
	token := time.Now().UnixNano()
	job := capture.Job{
		Session: sess, Repo: backups, Encoding: enc, Interval: demoCaptureInterval,
		Token:    func() (int64, bool) { return token, true },
		Snapshot: c.snapshotFunc(d, backups, enc),
		Report:   c.report,
	}
	go func() {
		defer close(c.done)
		c.err = capture.Run(rctx, job, d.lg)
	}()
	return c, nil
}

// snapshotFunc is the job's Snapshot: the demo's backup, verified and
// committed a moment ago with nothing written since, the first time; a
// fresh backup after that (a gap needs a new anchor).
func (c *demoCapture) snapshotFunc(d *demoRun, backups *repository.Repo, enc repository.Encoding) func(context.Context) (*repository.Manifest, error) {
	var taken atomic.Bool
	return func(ctx context.Context) (*repository.Manifest, error) {
		m := d.backup
		if taken.Swap(true) {
			var err error
			if m, err = freshBackup(ctx, d, backups, enc); err != nil {
				return nil, err
			}
		}
		c.mu.Lock()
		c.anchors[m.ID] = true
		c.mu.Unlock()
		return m, nil
	}
}

// freshBackup takes a backup as the snapshot command does; a backup of
// the same revision stored in the same second (ids have a resolution of
// a second) is retried in the next, as the agent's capture snapshots are.
func freshBackup(ctx context.Context, d *demoRun, backups *repository.Repo, enc repository.Encoding) (*repository.Manifest, error) {
	for attempt := 0; ; attempt++ {
		m, err := backup.Run(ctx, *snapshotJob(d.cfg, backups, enc), d.lg)
		if !errors.Is(err, backup.ErrExists) || attempt >= 2 {
			return m, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
}

func (c *demoCapture) report(s capture.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status = s
	if s.Gap != "" {
		c.gaps = append(c.gaps, s)
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitDurable waits until capture has stored every revision through rev
// in a generation of this etcd, and returns that generation.
func (c *demoCapture) waitDurable(ctx context.Context, rev int64, out io.Writer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, demoDurableTimeout)
	defer cancel()
	for {
		c.mu.Lock()
		s, changed, ours, gaps := c.status, c.changed, c.anchors[c.status.Generation], c.gaps
		c.mu.Unlock()
		if ours && s.Revision >= rev {
			for _, g := range gaps {
				fmt.Fprintf(out, "    note: capture sealed generation %s (%s) and started a new one\n", g.Generation, g.Gap)
			}
			fmt.Fprintf(out, "    capture stored every revision through %d in generation %s\n", s.Revision, s.Generation)
			return s.Generation, nil
		}
		select {
		case <-changed:
		case <-c.done:
			return "", fmt.Errorf("demo: capture stopped before storing revision %d: %v (last error: %v)", rev, c.err, s.Err)
		case <-ctx.Done():
			return "", fmt.Errorf("demo: capture did not store revision %d within %s (stored through %d of generation %q; last error: %v): %w",
				rev, demoDurableTimeout, s.Revision, s.Generation, s.Err, ctx.Err())
		}
	}
}

// stop stops capture, waits until it has ended and closes its session.
// It is safe to call more than once; it returns Run's error.
func (c *demoCapture) stop() error {
	c.once.Do(func() {
		c.cancel()
		<-c.done
		c.sess.Close()
	})
	return c.err
}
