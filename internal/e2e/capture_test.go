package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// captureInterval is capture.interval of the tests' capture.
const captureInterval = time.Second

// capture runs continuous capture of the cluster at endpoints into l's
// store (cluster "default", zstd, as the binary's defaults), starting
// with a fresh snapshot of its own (the generation's anchor), until stop
// is called or the test ends. stop returns once capture has ended and
// fails the test if it ended with an error.
//
// It runs capture.Run in this process: `lifeboat agent --capture` is not
// wired yet.
func (l *lifeboat) capture(t *testing.T, endpoints []string) (stop func()) {
	t.Helper()
	st, err := uploader.NewDir(strings.TrimPrefix(l.store, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	repo := repository.New(st, "default")
	enc := repository.Encoding{Compression: "zstd"}
	lg := slog.New(slog.DiscardHandler)
	cfg := snapshot.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second}
	sess, err := snapshot.Dial(t.Context(), cfg, lg)
	if err != nil {
		t.Fatal(err)
	}
	spool := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- capture.Run(ctx, capture.Job{
			Session: sess, Repo: repo, Encoding: enc, Interval: captureInterval,
			Token: func() (int64, bool) { return 1, true },
			Snapshot: func(ctx context.Context) (*repository.Manifest, error) {
				return backup.Run(ctx, backup.Job{Etcd: cfg, SpoolDir: spool, Backups: repo, Encoding: enc, Version: "e2e"}, lg)
			},
		}, lg)
	}()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("capture: %v", err)
		}
		sess.Close()
	}
	t.Cleanup(stop)
	return stop
}

// window is one capture window of `lifeboat list -o json`.
type window struct {
	Generation   string    `json:"generation"`
	Recoverable  bool      `json:"recoverable"`
	FromRevision int64     `json:"from_revision"`
	FromTime     time.Time `json:"from_time"`
	Through      int64     `json:"through_revision"`
	ThroughTime  time.Time `json:"through_time"`
	Segments     int       `json:"segments"`
	Sealed       bool      `json:"sealed"`
	Problem      string    `json:"problem"`
}

// windows returns the capture windows `lifeboat list -o json` shows.
func (l *lifeboat) windows(t *testing.T) []window {
	t.Helper()
	var list struct{ Windows []window }
	if err := json.Unmarshal([]byte(l.run(t, "list", "-o", "json")), &list); err != nil {
		t.Fatalf("lifeboat list -o json: %v", err)
	}
	return list.Windows
}

// waitCaptured polls `lifeboat list` until the newest window is
// recoverable through revision rev at least (capture made every revision
// up to rev durable) and returns it; a minute without fails the test.
func (l *lifeboat) waitCaptured(t *testing.T, rev int64) window {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ws := l.windows(t)
		if n := len(ws); n > 0 && ws[n-1].Recoverable && ws[n-1].Problem == "" && ws[n-1].Through >= rev {
			return ws[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture not durable through revision %d in a minute: windows %+v", rev, ws)
		}
		time.Sleep(200 * time.Millisecond) // polling the store against a deadline
	}
}

// change is one operation of `lifeboat log -o json`.
type change struct {
	Revision       int64     `json:"revision"`
	Received       time.Time `json:"received"`
	Op             string    `json:"op"`
	Key            string    `json:"key"`
	ValueSize      int       `json:"value_size"`
	Version        int64     `json:"version"`
	CreateRevision int64     `json:"create_revision"`
}

// log returns the changes `lifeboat log PREFIX -o json` prints.
func (l *lifeboat) log(t *testing.T, prefix string) []change {
	t.Helper()
	var cs []change
	if err := json.Unmarshal([]byte(l.run(t, "log", prefix, "-o", "json")), &cs); err != nil {
		t.Fatalf("lifeboat log %s -o json: %v", prefix, err)
	}
	return cs
}

// currentRevision returns the cluster's revision now.
func currentRevision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/e2e/revision")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
