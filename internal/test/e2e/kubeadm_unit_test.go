package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// unitUID is the uid the unit's User= (a sysusers system user) runs as
// here: no such user exists on the test machine.
const unitUID = 65532

// unitFile is what unitCommand reads of a unit of deploy/systemd.
type unitFile struct {
	execStart []string          // ExecStart=, split on blanks
	creds     map[string]string // LoadCredential= NAME:SOURCE
	name      string            // the unit's name: lifeboat.service
	stateDir  string            // /var/lib/ + StateDirectory=
	workDir   string            // WorkingDirectory=
	notify    bool              // Type=notify
	watchdog  time.Duration     // WatchdogSec=
	startIn   time.Duration     // TimeoutStartSec=
	env       []string          // Environment=
	rwPaths   []string          // ReadWritePaths= (without the optional's -)
}

// readUnit parses the unit's keys unitFile holds; an ExecStart the test
// cannot run as it stands (quotes, a prefix, variables) fails the test.
func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{creds: map[string]string{}, name: filepath.Base(path)}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch k {
		case "ExecStart":
			if strings.ContainsAny(v, `"'\$%`) || !strings.HasPrefix(v, "/") {
				t.Fatalf("%s: ExecStart=%s: quotes, variables, specifiers or a prefix: the test runs it as it stands and cannot", path, v)
			}
			u.execStart = strings.Fields(v)
		case "LoadCredential":
			name, src, _ := strings.Cut(v, ":")
			u.creds[name] = src
		case "StateDirectory":
			u.stateDir = "/var/lib/" + v
		case "WorkingDirectory":
			u.workDir = v
		case "Type":
			u.notify = v == "notify"
		case "WatchdogSec":
			u.watchdog = unitDuration(t, k, v)
		case "TimeoutStartSec":
			u.startIn = unitDuration(t, k, v)
		case "Environment":
			u.env = append(u.env, v)
		case "ReadWritePaths":
			for _, p := range strings.Fields(v) {
				u.rwPaths = append(u.rwPaths, strings.TrimPrefix(p, "-"))
			}
		}
	}
	if len(u.execStart) == 0 || len(u.creds) == 0 || u.stateDir == "" || u.workDir != u.stateDir {
		t.Fatalf("%s: want ExecStart, LoadCredential and StateDirectory= the WorkingDirectory, got %+v", path, u)
	}
	return u
}

// unitDuration is a time span of the unit: 2min, 30s, 90.
func unitDuration(t *testing.T, key, v string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(strings.Replace(v, "min", "m", 1))
	if err != nil {
		t.Fatalf("%s=%s: %v", key, v, err)
	}
	return d
}

// configPath is the --config of ExecStart.
func (u unitFile) configPath(t *testing.T) string {
	for i, a := range u.execStart {
		if a == "--config" && i+1 < len(u.execStart) {
			return u.execStart[i+1]
		}
	}
	t.Fatalf("ExecStart %q has no --config FILE", u.execStart)
	return ""
}

// unitRun is the unit's ExecStart running on the node.
type unitRun struct {
	unit    unitFile
	start   time.Time
	notify  *notifySocket
	cmd     *exec.Cmd
	out     *syncbuf.Buffer
	exited  chan struct{}
	waitErr error
	metrics string // the agent's /metrics from the host
}

// unitCommand is the ExecStart of deploy/systemd/SERVICE, word for word,
// as systemd would run it on the kubeadm node, without systemd: inside
// the node's network namespace; in a mount namespace of its own where
// ExecStart's binary directory holds bin (the lifeboat under test), the
// --config file's directory holds deploy/systemd/config.yaml as
// unitConfig changes it (cluster name cluster), the credentials directory
// (/run/credentials/SERVICE) holds copies of the unit's LoadCredential
// sources (kubeadm's files: they must exist on a kubeadm node) owned by
// the service user, StateDirectory (the working directory) and each
// ReadWritePaths are directories of the test (rw maps each to it), and
// /run/systemd holds the notify socket; as the unprivileged user
// (unitUID) with no capabilities and no_new_privs; with the unit's
// Environment= and the S3 keys, as the EnvironmentFile gives them;
// NOTIFY_SOCKET and WATCHDOG_USEC as Type=notify and WatchdogSec= make
// systemd set them. The rest of the sandbox (SystemCallFilter,
// ProtectSystem, ...) is systemd's and is not applied.
func unitCommand(t *testing.T, ctx context.Context, n *kubeadmtest.Node, bin string, s3 *s3test.Server, service, cluster string) (u unitFile, cmd *exec.Cmd, notify *notifySocket, rw map[string]string) {
	t.Helper()
	repo := kubeadmtest.Repo(t)
	u = readUnit(t, filepath.Join(repo, "deploy/systemd", service))
	cfgPath := u.configPath(t)
	dirs := map[string]string{ // mount point: the test's directory
		filepath.Dir(u.execStart[0]): unitDir(t, 0o755, 0),
		filepath.Dir(cfgPath):        unitDir(t, 0o755, 0),
		"/run/credentials/" + u.name: unitDir(t, 0o500, unitUID),
		u.stateDir:                   unitDir(t, 0o700, unitUID),
	}
	rw = map[string]string{}
	for _, p := range u.rwPaths {
		rw[p] = unitDir(t, 0o755, unitUID)
		dirs[p] = rw[p]
	}
	copyFile(t, bin, filepath.Join(dirs[filepath.Dir(u.execStart[0])], filepath.Base(u.execStart[0])), 0o755, 0)
	for name, src := range u.creds {
		copyFile(t, src, filepath.Join(dirs["/run/credentials/"+u.name], name), 0o400, unitUID)
	}
	cfg := unitConfig(t, filepath.Join(repo, "deploy/systemd/config.yaml"), n.IP, s3, cluster)
	if err := os.WriteFile(filepath.Join(dirs[filepath.Dir(cfgPath)], filepath.Base(cfgPath)), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	notify = listenNotify(t, unitDir(t, 0o755, unitUID))
	dirs["/run/systemd"] = filepath.Dir(notify.path)
	// The mount points exist on the host (empty; the mounts are private).
	var mounts []string
	for point, src := range dirs {
		mountPoint(t, point)
		mounts = append(mounts, fmt.Sprintf("mount --bind %s %s", src, point))
	}
	script := "set -e; " + strings.Join(mounts, "; ") + "; cd " + u.workDir + "; exec setpriv --reuid=" + strconv.Itoa(unitUID) +
		" --regid=" + strconv.Itoa(unitUID) + ` --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"`
	cmd = n.Command(context.WithoutCancel(ctx), "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh"}, u.execStart...)...)
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + u.stateDir,
		"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}, u.env...)
	if u.notify {
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET=/run/systemd/notify")
	}
	if u.watchdog > 0 {
		cmd.Env = append(cmd.Env, "WATCHDOG_USEC="+strconv.FormatInt(u.watchdog.Microseconds(), 10))
	}
	t.Logf("%s's ExecStart on the node: %s", service, strings.Join(u.execStart, " "))
	return u, cmd, notify, rw
}

// runUnit starts lifeboat.service's ExecStart on the node (unitCommand,
// cluster "unit"): the daemon, a snapshot at start and a drill every 20 s;
// its agent.listen as shipped (0.0.0.0:9469, so the node's address from
// the host).
func runUnit(t *testing.T, ctx context.Context, n *kubeadmtest.Node, bin string, s3 *s3test.Server) *unitRun {
	t.Helper()
	u, cmd, notify, _ := unitCommand(t, ctx, n, bin, s3, "lifeboat.service", "unit")
	r := &unitRun{unit: u, notify: notify, cmd: cmd, out: &syncbuf.Buffer{Max: 1 << 20}, exited: make(chan struct{}), metrics: "http://" + n.IP + ":9469/metrics"}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.start = time.Now()
	if err := etcdtest.StartChild(r.cmd, r.exited, &r.waitErr); err != nil {
		t.Fatalf("the unit's ExecStart on the node: %v", err)
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// runOnce runs lifeboat-once.service's ExecStart (what lifeboat-once.timer
// starts) on the node to its end (unitCommand, cluster "once"): it must
// exit 0, store a backup l finds, and write its metrics to the --textfile
// in the unit's ReadWritePaths (node_exporter's directory): the store up,
// the snapshot's revision that backup's.
func runOnce(t *testing.T, ctx context.Context, n *kubeadmtest.Node, bin string, s3 *s3test.Server, l *lifeboat) {
	t.Helper()
	u, cmd, _, rw := unitCommand(t, ctx, n, bin, s3, "lifeboat-once.service", "once")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lifeboat-once.service's ExecStart: %v\n%s", err, out)
	}
	listed := listStore(t, l)
	if len(listed.Backups) != 1 || listed.Backups[0].State != "ok" {
		t.Fatalf("after lifeboat-once.service: backups %+v, want one ok\n%s", listed.Backups, out)
	}
	var textfile string
	for i, a := range u.execStart {
		if a == "--textfile" && i+1 < len(u.execStart) {
			textfile = u.execStart[i+1]
		}
	}
	dir, ok := rw[filepath.Dir(textfile)]
	if !ok {
		t.Fatalf("lifeboat-once.service: --textfile %q is not in its ReadWritePaths %q", textfile, u.rwPaths)
	}
	data, err := os.ReadFile(filepath.Join(dir, filepath.Base(textfile)))
	rev := float64(listed.Backups[0].Manifest.Revision)
	if err != nil || metricValue(string(data), "lifeboat_store_up") != 1 || metricValue(string(data), "lifeboat_snapshot_revision") != rev {
		t.Errorf("lifeboat-once.service's textfile %s: %v, want lifeboat_store_up 1 and lifeboat_snapshot_revision %v:\n%s", textfile, err, rev, data)
	}
	t.Logf("lifeboat-once.service: backup %s at revision %d, textfile %s written", listed.Backups[0].ID, listed.Backups[0].Manifest.Revision, textfile)
}

// unitDir is a directory of the test with mode and owner uid.
func unitDir(t *testing.T, mode os.FileMode, uid int) string {
	t.Helper()
	d := t.TempDir()
	if err := os.Chmod(d, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, uid, uid); err != nil {
		t.Fatal(err)
	}
	return d
}

// copyFile copies src to dst with mode and owner uid.
func copyFile(t *testing.T, src, dst string, mode os.FileMode, uid int) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("the unit's file: %v", err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// mountPoint makes the directory path on the host when it is missing
// (each missing parent too) and removes what it made at the test's end.
func mountPoint(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	mountPoint(t, filepath.Dir(path))
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil {
			t.Errorf("the unit's mount point %s: %v", path, err)
		}
	})
}

// unitConfig is deploy/systemd/config.yaml with the node's etcd, the
// node's S3 store (no SSE: versitygw), the cluster name, a snapshot at start
// and a drill every 20 s without jitter; every other key as shipped.
func unitConfig(t *testing.T, path, node string, s3 *s3test.Server, cluster string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	section := func(k string) map[string]any {
		m, ok := cfg[k].(map[string]any)
		if !ok {
			t.Fatalf("%s: no %s: section", path, k)
		}
		return m
	}
	cfg["cluster"] = cluster
	section("etcd")["endpoints"] = []string{"https://" + node + ":2379"}
	section("store")["url"] = "s3://lifeboat/k"
	section("store")["s3"] = map[string]any{"endpoint": s3.Endpoint, "path_style": true, "region": s3.Region}
	sch := section("schedule")
	sch["run_at_start"], sch["jitter"], sch["drill"] = true, "0s", "@every 20s"
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// check waits until the unit's agent stored a backup and drilled it
// (passed), reading the store with l, and that its /metrics answers on
// the node's address; then stops it as systemd does (SIGTERM) and wants
// exit 0.
func (r *unitRun) check(t *testing.T, l *lifeboat) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		listed := listStore(t, l)
		if len(listed.Backups) > 0 && listed.Backups[0].State == "ok" && listed.Backups[0].DrillState == "passed" {
			t.Logf("the unit's backup %s at revision %d, drill passed", listed.Backups[0].ID, listed.Backups[0].Manifest.Revision)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unit's agent: no backup with a passed drill in 3 min: %+v\n%s", listed.Backups, r.out.String())
		}
		select {
		case <-r.exited:
			t.Fatalf("the unit's agent exited: %v\n%s", r.waitErr, r.out.String())
		case <-time.After(2 * time.Second): // polling the store against a deadline
		}
	}
	resp, err := http.Get(r.metrics)
	if err != nil {
		t.Fatalf("the unit's /metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := metricValue(string(body), "lifeboat_drill_last_result"); got != 1 {
		t.Errorf("the unit's lifeboat_drill_last_result = %v, want 1 (passed)", got)
	}
	r.checkNotify(t)
	t.Logf("the unit's warnings and errors:\n%s", grepLines(r.out.String(), `"level":"WARN"`, `"level":"ERROR"`, "level=WARN", "level=ERROR"))
}

// stop sends SIGTERM and wants exit 0 within the unit's TimeoutStopSec
// (1 min).
func (r *unitRun) stop(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		var exit *exec.ExitError
		if r.waitErr != nil && (!errors.As(r.waitErr, &exit) || exit.ExitCode() != 0) {
			t.Errorf("the unit's agent after SIGTERM: %v\n%s", r.waitErr, r.out.String())
		}
	case <-time.After(time.Minute):
		_ = r.cmd.Process.Kill()
		<-r.exited
		t.Errorf("the unit's agent did not stop within a minute of SIGTERM\n%s", r.out.String())
	}
}

// notifySocket is the service manager's end of NOTIFY_SOCKET: the
// datagrams the unit sent, and when.
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []notifyMsg
}

type notifyMsg struct {
	at    time.Time
	state string
}

// listenNotify listens on dir/notify (owned by the service user, who
// sends to it) until the test ends.
func listenNotify(t *testing.T, dir string) *notifySocket {
	t.Helper()
	s := &notifySocket{path: filepath.Join(dir, "notify")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(s.path, unitUID, unitUID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, notifyMsg{time.Now(), string(buf[:k])})
			s.mu.Unlock()
		}
	}()
	return s
}

// first is when state was first sent (zero: never).
func (s *notifySocket) first(state string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if slices.Contains(strings.Split(m.state, "\n"), state) {
			return m.at
		}
	}
	return time.Time{}
}

// checkNotify: as systemd would judge the unit: READY=1 within
// TimeoutStartSec, WATCHDOG=1 within WatchdogSec of the start (waited
// for, up to then), then SIGTERM and STOPPING=1 and exit 0 within
// TimeoutStopSec.
func (r *unitRun) checkNotify(t *testing.T) {
	t.Helper()
	if !r.unit.notify {
		r.stop(t)
		return
	}
	if ready := r.notify.first("READY=1"); ready.IsZero() || ready.Sub(r.start) > r.unit.startIn {
		t.Errorf("the unit (Type=notify) sent READY=1 at %v after its start, want within TimeoutStartSec %v", ready.Sub(r.start), r.unit.startIn)
	}
	if r.unit.watchdog > 0 {
		for r.notify.first("WATCHDOG=1").IsZero() && time.Since(r.start) < r.unit.watchdog+5*time.Second {
			time.Sleep(time.Second) // systemd's own deadline: WatchdogSec
		}
		if w := r.notify.first("WATCHDOG=1"); w.IsZero() || w.Sub(r.start) > r.unit.watchdog {
			t.Errorf("the unit sent no WATCHDOG=1 within WatchdogSec %v of its start: systemd would kill it", r.unit.watchdog)
		}
	}
	r.stop(t)
	if r.notify.first("STOPPING=1").IsZero() {
		t.Errorf("the unit (Type=notify) sent no STOPPING=1 on SIGTERM")
	}
}
