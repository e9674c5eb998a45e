package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
)

// scheduledBackup waits for a Job the CronJob controller made from the
// backup CronJob of release cron (every minute: one within about a minute
// and a half), waits until it completes, suspends the CronJob and finds
// the backup in the store l reads; then runs a Job from the drill CronJob
// and finds the backup's drill passed.
func scheduledBackup(t *testing.T, ctx context.Context, n *kubeadmtest.Node, kubectl func(...string) string, l *lifeboat) {
	t.Helper()
	start := time.Now()
	const cronjob = "cron-lifeboat-backup"
	var job string
	for deadline := time.Now().Add(3 * time.Minute); job == ""; time.Sleep(2 * time.Second) {
		out := kubectl("get", "jobs", "-n", installNS, "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}{"\n"}{end}`)
		for line := range strings.FieldsSeq(out) {
			if name, owner, _ := strings.Cut(line, "="); owner == "CronJob/"+cronjob {
				job = name
			}
		}
		if job == "" && time.Now().After(deadline) {
			t.Fatalf("no Job of cronjob/%s (schedule every minute) in 3 min: jobs %q\n%s", cronjob, out, installDiagnosis(ctx, n))
		}
	}
	if _, err := n.Kubectl(ctx, "wait", "-n", installNS, "--for=condition=Complete", "job/"+job, "--timeout=300s"); err != nil {
		logs, _ := n.Kubectl(ctx, "logs", "-n", installNS, "job/"+job, "--tail=40")
		t.Fatalf("job %s of cronjob/%s: %v\n%s\n%s", job, cronjob, err, logs, installDiagnosis(ctx, n))
	}
	t.Logf("job %s, made by the CronJob controller, complete %.1fs after the install", job, time.Since(start).Seconds())
	kubectl("patch", "cronjob", "-n", installNS, cronjob, "-p", `{"spec":{"suspend":true}}`)
	listed := listStore(t, l)
	if len(listed.Backups) == 0 || listed.Backups[0].State != "ok" {
		t.Fatalf("after the scheduled backup Job: backups %+v, want one ok at least", listed.Backups)
	}
	t.Logf("scheduled backup %s at revision %d", listed.Backups[0].ID, listed.Backups[0].Manifest.Revision)

	// The drill, in a restricted pod too (a Job from its CronJob: its
	// schedule is a day away).
	kubectl("create", "job", "-n", installNS, "drill-now", "--from=cronjob/cron-lifeboat-drill")
	if _, err := n.Kubectl(ctx, "wait", "-n", installNS, "--for=condition=Complete", "job/drill-now", "--timeout=300s"); err != nil {
		logs, _ := n.Kubectl(ctx, "logs", "-n", installNS, "job/drill-now", "--tail=40")
		t.Fatalf("the drill Job in the restricted namespace: %v\n%s\n%s", err, logs, installDiagnosis(ctx, n))
	}
	if listed = listStore(t, l); listed.Backups[0].DrillState != "passed" {
		t.Fatalf("after the drill Job: %+v, want the newest backup's drill passed", listed.Backups)
	}
}

// captureOnNode waits until the agent Deployment of release agent is
// available, writes a ConfigMap and waits until capture made its revision
// durable (a recoverable window through it in `lifeboat list`, from the
// host), then scrapes the pod's /metrics through the apiserver's pod proxy
// and finds capture up at that revision at least.
func captureOnNode(t *testing.T, ctx context.Context, n *kubeadmtest.Node, kubectl func(...string) string, l *lifeboat) window {
	t.Helper()
	if _, err := n.Kubectl(ctx, "rollout", "status", "-n", installNS, "deployment/agent-lifeboat", "--timeout=300s"); err != nil {
		t.Fatalf("the agent Deployment: %v\n%s", err, installDiagnosis(ctx, n))
	}
	rv := kubectl("create", "configmap", "-n", "default", "after-capture", "--from-literal=k=v", "-o", "jsonpath={.metadata.resourceVersion}")
	rev, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("the ConfigMap's resourceVersion %q: %v", rv, err)
	}
	var ws []window
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		ws = l.windows(t)
		if k := len(ws); k > 0 && ws[k-1].Recoverable && ws[k-1].Problem == "" && ws[k-1].Through >= rev {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := n.Kubectl(ctx, "logs", "-n", installNS, "deployment/agent-lifeboat", "--tail=40")
			t.Fatalf("capture in the agent pod not durable through revision %d in 2 min: windows %+v\n%s\n%s", rev, ws, logs, installDiagnosis(ctx, n))
		}
	}
	w := ws[len(ws)-1]
	t.Logf("capture window %s: revisions %d..%d, %d segments", w.Generation, w.FromRevision, w.Through, w.Segments)
	if w.Segments == 0 {
		t.Errorf("capture window through %d has no change segments", w.Through)
	}
	pod := kubectl("get", "pods", "-n", installNS, "-l", "app.kubernetes.io/instance=agent", "-o", "jsonpath={.items[0].metadata.name}")
	logs := kubectl("logs", "-n", installNS, pod)
	t.Logf("the agent pod's warnings and errors:\n%s", grepLines(logs, `"level":"WARN"`, `"level":"ERROR"`, "level=WARN", "level=ERROR"))
	metrics := kubectl("get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:9469/proxy/metrics", installNS, pod))
	if got := metricValue(metrics, "lifeboat_capture_up"); got != 1 {
		t.Errorf("the agent pod's lifeboat_capture_up = %v, want 1", got)
	}
	if got := metricValue(metrics, "lifeboat_capture_revision"); got < float64(rev) {
		t.Errorf("the agent pod's lifeboat_capture_revision = %v, want %d at least", got, rev)
	}
	return w
}

// notesCommands runs the kubectl commands the agent release's install
// notes print: `exec ... lifeboat list`, which must list the capture
// window w, and `port-forward svc/...` (to a free local port) with
// /status through it.
func notesCommands(t *testing.T, ctx context.Context, n *kubeadmtest.Node, notes string, w window) {
	t.Helper()
	command := func(sub string) []string {
		t.Helper()
		for line := range strings.SplitSeq(notes, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "kubectl" && strings.Contains(line, sub) {
				return f[1:]
			}
		}
		t.Fatalf("the install notes have no kubectl %s command:\n%s", sub, notes)
		return nil
	}
	out, err := n.Kubectl(ctx, command(" exec ")...)
	if err != nil || !strings.Contains(out, w.Generation) {
		t.Errorf("the notes' kubectl exec ... lifeboat list: %v, want the window %s listed:\n%s", err, w.Generation, out)
	}
	args := command(" port-forward ")
	if args[len(args)-1] == "&" {
		args = args[:len(args)-1]
	}
	_, remote, _ := strings.Cut(args[len(args)-1], ":")
	args[len(args)-1] = ":" + remote // a free local port
	status := portForwardGet(t, ctx, n, args, "/status")
	if !strings.Contains(status, `"capture"`) {
		t.Errorf("/status through the notes' port-forward has no capture:\n%s", status)
	}
}

// metricValue is the value of the unlabelled sample name in a Prometheus
// text exposition, or -1 when there is none.
func metricValue(exposition, name string) float64 {
	for line := range strings.SplitSeq(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// installDiagnosis is what the namespace's pods, Jobs and events say, and
// the node's logs, for a failure message.
func installDiagnosis(ctx context.Context, n *kubeadmtest.Node) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "cronjobs,jobs,pods", "-n", installNS, "-o", "wide"},
		{"get", "events", "-n", installNS, "--sort-by=.lastTimestamp"},
	} {
		out, err := n.Kubectl(ctx, args...)
		fmt.Fprintf(&b, "--- kubectl %s (%v)\n%s\n", strings.Join(args, " "), err, out)
	}
	return b.String() + n.Tails()
}

// grepLines is the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// portForwardGet runs `kubectl port-forward` with args (no local port:
// kubectl picks one and prints it), GETs path through it and stops it.
func portForwardGet(t *testing.T, ctx context.Context, n *kubeadmtest.Node, args []string, path string) string {
	t.Helper()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(pctx, filepath.Join(n.Bin, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	// "Forwarding from 127.0.0.1:PORT -> 9469"
	line, err := bufio.NewReader(stdout).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) < 3 || fields[0] != "Forwarding" {
		t.Fatalf("kubectl %s: %v: %q, want Forwarding from ADDRESS\n%s", strings.Join(args, " "), err, line, stderr.String())
	}
	resp, err := http.Get("http://" + fields[2] + path)
	if err != nil {
		t.Fatalf("GET %s through kubectl port-forward: %v\n%s", path, err, stderr.String())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
