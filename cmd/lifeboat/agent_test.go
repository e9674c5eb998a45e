package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lifeboat-dev/lifeboat/agent"
	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// TestAgentConfigErrors: bad schedules and unknown keys stop the agent at
// start with exit 2, naming the key, before it touches etcd or the store.
func TestAgentConfigErrors(t *testing.T) {
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "store")
	unknown := filepath.Join(dir, "unknown.yaml")
	os.WriteFile(unknown, []byte("schedule:\n  snapshots: \"@every 1h\"\n"), 0o600)
	badFile := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badFile, []byte("schedule:\n  drill: \"61 * * * *\"\n"), 0o600)
	tests := []struct {
		name    string
		args    []string
		wantKey string
	}{
		{"bad snapshot schedule flag", []string{"--snapshot-schedule", "every hour"}, "schedule.snapshot"},
		{"bad drill schedule in file", []string{"--config", badFile}, "schedule.drill"},
		{"unknown key in file", []string{"--config", unknown}, "schedule.snapshots"},
		{"bad drill target", []string{"--drill-target", "oldest"}, "schedule.drill_target"},
		{"lock ttl too short", []string{"--lock-ttl", "1s"}, "agent.lock_ttl"},
		{"bad listen address", []string{"--listen", "9469"}, "agent.listen"},
		{"bad notify event", []string{"--notify-on", "drill_failed,sunrise"}, "notify.on"},
		{"prune without a policy", []string{"--prune-schedule", "@daily"}, "retention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"agent", "--once", "--store", store, "--endpoints", "http://127.0.0.1:1"}, tt.args...)
			code, out, errOut := runCLI(t, nil, args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitUsage, out, errOut)
			}
			if !strings.Contains(errOut, tt.wantKey) {
				t.Errorf("stderr does not name %s:\n%s", tt.wantKey, errOut)
			}
		})
	}
}

// TestAgentOnce runs `agent --once` against real etcd: a passing cycle
// exits 0 and writes the textfile and pushes; a failing drill exits 1 and
// its metrics say so.
func TestAgentOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd and drills")
	}
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 300)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var pushed []string
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		pushed = append(pushed, r.Method+" "+r.URL.Path)
		mu.Unlock()
	}))
	t.Cleanup(gw.Close)

	tests := []struct {
		name     string
		endpoint string // default: the cluster's
		args     []string
		wantCode int
		// metric series (text exposition) that must be in the textfile
		want []string
		// text that must be in the log
		wantLog string
	}{
		{
			name:     "passing cycle",
			args:     []string{"--keep-last", "1", "--prune-schedule", "@every 1h"},
			wantCode: exitOK,
			want: []string{
				`lifeboat_job_runs_total{job_name="snapshot",result="success"} 1`,
				`lifeboat_job_runs_total{job_name="prune",result="success"} 1`,
				`lifeboat_job_runs_total{job_name="drill",result="success"} 1`,
				`lifeboat_drill_last_result 1`,
				`lifeboat_backups{state="ok"} 1`,
			},
		},
		{
			name:     "drill check fails",
			args:     []string{"--prune-schedule", "", "--check-prefix", "/registry/no-such-resource/"},
			wantCode: exitFailed,
			want: []string{
				`lifeboat_job_runs_total{job_name="snapshot",result="success"} 1`,
				`lifeboat_job_runs_total{job_name="drill",result="failure"} 1`,
				`lifeboat_drill_last_result 0`,
			},
		},
		{
			name:     "encrypted without identity",
			args:     []string{"--prune-schedule", "", "--recipient", id.Recipient().String()},
			wantCode: exitUsage,
			// No identity is an error of the drill run, not a verdict on
			// the backup (issue 11, item 9), and keys that cannot decrypt
			// are a usage error everywhere (issue 29).
			want:    []string{`lifeboat_drill_errors_total 1`, `lifeboat_job_runs_total{job_name="drill",result="failure"} 1`},
			wantLog: "ENCRYPTION WARNING",
		},
		{
			name:     "snapshot fails",
			endpoint: "http://127.0.0.1:1",
			args:     []string{"--prune-schedule", "", "--drill-schedule", "", "--snapshot-retries", "0", "--dial-timeout", "1s", "--lock=false"},
			wantCode: exitFailed,
			want:     []string{`lifeboat_job_runs_total{job_name="snapshot",result="failure"} 1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			textfile := filepath.Join(dir, "lifeboat.prom")
			ep := tt.endpoint
			if ep == "" {
				ep = c.Endpoints()[0]
			}
			args := []string{"agent", "--once", "--cluster", "once",
				"--store", "file://" + filepath.Join(dir, "store"), "--spool-dir", filepath.Join(dir, "spool"),
				"--scratch-dir", filepath.Join(dir, "scratch"), "--endpoints", ep, "--log-format", "json",
				"--textfile", textfile, "--pushgateway", gw.URL}
			args = append(args, tt.args...)
			code, out, errOut := runCLI(t, nil, args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, out, errOut)
			}
			body, err := os.ReadFile(textfile)
			if err != nil {
				t.Fatalf("textfile: %v\nstderr: %s", err, errOut)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			if _, err := parser.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
				t.Errorf("textfile does not parse: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(body), w+"\n") {
					t.Errorf("textfile lacks %s", w)
				}
			}
			if strings.Contains(string(body), "go_goroutines") {
				t.Error("the textfile holds go_ metrics; node_exporter exports its own")
			}
			if tt.wantLog != "" && !strings.Contains(errOut, tt.wantLog) {
				t.Errorf("log lacks %q:\n%s", tt.wantLog, errOut)
			}
			mu.Lock()
			last := pushed[len(pushed)-1]
			mu.Unlock()
			if !strings.HasPrefix(last, "PUT /metrics/job/lifeboat/") || !strings.Contains(last, "/cluster/once") || !strings.Contains(last, "/instance/snapshot") {
				t.Errorf("push: %s", last)
			}
		})
	}
}

// TestAgentDaemon runs the daemon as main does, with a context that a
// signal would cancel: it becomes ready (READY=1 to NOTIFY_SOCKET), takes
// a backup at start, serves /metrics with the Go and process collectors,
// and exits 0 when cancelled.
func TestAgentDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 200)
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent", "--cluster", "d", "--store", "file://" + filepath.Join(dir, "store"),
			"--spool-dir", filepath.Join(dir, "spool"), "--scratch-dir", filepath.Join(dir, "scratch"),
			"--endpoints", c.Endpoints()[0], "--listen", addr, "--run-at-start", "--snapshot-schedule", "@every 1h",
			"--prune-schedule", "", "--drill-schedule", "", "--lock-ttl", "5s", "--log-format", "json"}, io.Discard, &stderr)
	}()
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("sd_notify: %q, %v\n%s", buf[:n], err, stderr.String())
	}
	base := "http://" + addr
	var st agent.Status
	deadline := time.Now().Add(time.Minute)
	for st.NewestBackup == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no backup at start\n%s", stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get(base + "/status")
		if err != nil {
			continue
		}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
	}
	if !st.Leader.IsLeader || !strings.HasPrefix(st.Leader.Holder, mustHostname(t)+"/") {
		t.Errorf("leader = %+v", st.Leader)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"go_goroutines ", "process_resident_memory_bytes ", `lifeboat_job_runs_total{job_name="snapshot",result="success"} 1`, "lifeboat_leader 1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d after cancellation\n%s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the agent did not stop")
	}
	n, _ = conn.Read(buf)
	if got := string(buf[:n]); got != "STOPPING=1" {
		t.Errorf("sd_notify after cancel: %q", got)
	}
}

func mustHostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
