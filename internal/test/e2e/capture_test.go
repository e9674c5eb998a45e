package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// captureInterval is capture.interval of the tests' agent.
const captureInterval = time.Second

// captureAgent is `lifeboat agent --config F` with capture enabled, the
// daemon as an operator runs it.
type captureAgent struct {
	lb      *lifeboat
	stderr  *syncbuf.Buffer
	listen  string // agent.listen: host:port of /metrics
	exited  chan struct{}
	waitErr error
	cmd     *exec.Cmd
}

// capture starts `lifeboat agent` on a config file that enables capture
// of the cluster at endpoints into l's store (cluster "default", zstd:
// the defaults) at a 1 s interval, with no snapshot, prune or drill
// schedule: its only job is capture, which starts a generation from a
// fresh snapshot of its own (the anchor). The agent holds the leader lock
// in etcd as always. Flags in args (and l.flags) override the file:
// schedules, retention, the interval. It is stopped at test cleanup, or
// earlier by stop or kill.
func (l *lifeboat) capture(t *testing.T, endpoints []string, args ...string) *captureAgent {
	t.Helper()
	dir := t.TempDir()
	eps, err := json.Marshal(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// JSON is YAML: every string quoted.
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`cluster: default
log:
  level: info
  format: json
etcd:
  endpoints: %s
snapshot:
  spool_dir: %s
store:
  url: %s
schedule:
  snapshot: ""
  prune: ""
  drill: ""
agent:
  listen: %s
  lock_ttl: 5s
capture:
  enabled: true
  interval: %s
`, eps, q(filepath.Join(dir, "spool")), q(l.store), q(listen), captureInterval) + l.agentConfig
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &captureAgent{lb: l, stderr: &syncbuf.Buffer{Max: 1 << 20}, listen: listen, exited: make(chan struct{})}
	a.cmd = exec.Command(l.bin, append(append([]string{"agent", "--config", path}, l.flags...), args...)...)
	a.cmd.Env = append(cleanEnv(), l.env...)
	a.cmd.Stderr = a.stderr
	if err := etcdtest.StartChild(a.cmd, a.exited, &a.waitErr); err != nil {
		t.Fatalf("start lifeboat agent: %v", err)
	}
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop ends the agent with SIGTERM, as systemd does, and fails the test
// unless it exits 0 within a minute.
func (a *captureAgent) stop(t *testing.T) {
	t.Helper()
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
		if a.waitErr != nil {
			t.Errorf("lifeboat agent after SIGTERM: %v\n%s", a.waitErr, a.stderr.String())
		}
	case <-time.After(time.Minute):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Errorf("lifeboat agent did not stop within a minute of SIGTERM\n%s", a.stderr.String())
	}
}

// kill ends the agent with SIGKILL (a crash, an OOM kill) and waits for
// it to exit.
func (a *captureAgent) kill() {
	_ = a.cmd.Process.Kill()
	<-a.exited
}

// waitCaptured polls `lifeboat list` until the newest window is
// recoverable through revision rev at least (capture made every revision
// up to rev durable) and returns it; a minute without, or the agent
// exiting, fails the test.
func (a *captureAgent) waitCaptured(t *testing.T, rev int64) window {
	t.Helper()
	return a.waitCapturedIn(t, a.lb, rev)
}

// waitCapturedIn is waitCaptured polling l's store: a copy the agent
// keeps, read as l's flags say.
func (a *captureAgent) waitCapturedIn(t *testing.T, l *lifeboat, rev int64) window {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ws := l.windows(t)
		if n := len(ws); n > 0 && ws[n-1].Recoverable && ws[n-1].Problem == "" && ws[n-1].Through >= rev {
			return ws[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture not durable through revision %d in %s in a minute: windows %+v\nagent:\n%s", rev, l.store, ws, a.stderr.String())
		}
		select {
		case <-a.exited:
			t.Fatalf("lifeboat agent exited: %v\n%s", a.waitErr, a.stderr.String())
		case <-time.After(200 * time.Millisecond): // polling the store against a deadline
		}
	}
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
	SealReason   string    `json:"seal_reason"`
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
