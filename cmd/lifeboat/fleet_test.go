package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/agent"
	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/fleet"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestFleetStatusCommand: clusters written by lifeboat snapshot and
// agent --once against a real etcd, plus an older one gone quiet, in
// two directory stores: fleet status shows each (table and JSON), exits
// 1 because of the quiet one, --problems shows it alone, and
// --fleet-store reads several stores.
func TestFleetStatusCommand(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 50)
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	etcd := []string{"--endpoints", strings.Join(c.Endpoints(), ","), "--spool-dir", filepath.Join(dir, "spool")}
	cli := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, nil, args...)
		if code != want {
			t.Fatalf("lifeboat %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out
	}
	cli(0, append([]string{"snapshot", "--store", "file://" + one, "--cluster", "plain"}, etcd...)...)
	cli(0, append([]string{"agent", "--once", "--store", "file://" + one, "--cluster", "cron", "--snapshot-schedule", "@every 10m",
		"--prune-schedule", "", "--drill-schedule", "", "--lock=false"}, etcd...)...)

	// Healthy: both clusters, the CronJob's status document read.
	out := cli(0, "fleet", "status", "--store", "file://"+one, "-o", "json")
	var r fleet.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("fleet status -o json: %v\n%s", err, out)
	}
	if len(r.Clusters) != 2 {
		t.Fatalf("clusters: %s", out)
	}
	for _, s := range r.Clusters {
		if len(s.Problems) != 0 || s.Newest == nil {
			t.Errorf("%s: problems %v, newest %v", s.Name, s.Problems, s.Newest)
		}
		if s.Name == "cron" && (s.Agent == nil || s.Agent.Mode != repository.AgentOnce || s.ExpectedBy != "schedule @every 10m") {
			t.Errorf("cron: agent %+v, expected by %q", s.Agent, s.ExpectedBy)
		}
	}

	// An older agent's cluster in the second store, quiet for three days.
	st, err := uploader.NewDir(two)
	if err != nil {
		t.Fatal(err)
	}
	jobtest.PutBackup(t, repository.New(st, "quiet"), time.Now().Add(-72*time.Hour), uploader.PutOptions{}, false)

	out = cli(1, "fleet", "status", "--fleet-store", "file://"+one, "--fleet-store", "file://"+two)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "STORE") || !strings.Contains(lines[1], "quiet") || !strings.Contains(lines[1], "stale: the newest backup") ||
		!strings.HasPrefix(lines[5], "1 of 3 clusters read through their agents' indexes") {
		t.Errorf("table: want the header, the quiet cluster first with its problem, then the others, and a note that the agent's cluster (cron) was read through its index:\n%s", out)
	}
	// --full: every object listed, no note.
	out = cli(1, "fleet", "status", "--fleet-store", "file://"+one, "--fleet-store", "file://"+two, "--full")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || strings.Contains(out, "indexes") {
		t.Errorf("--full: want the header and three rows, no note:\n%s", out)
	}
	out = cli(1, "fleet", "status", "--fleet-store", "file://"+one, "--fleet-store", "file://"+two, "--problems", "-o", "json")
	r = fleet.Report{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.Clusters {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"quiet"}, names); diff != "" || r.Clusters[0].Problems[0].Kind != fleet.ProblemStale {
		t.Errorf("--problems (-want +got):\n%s%s", diff, out)
	}
	cli(2, "fleet", "status", "--fleet-store", "file://"+filepath.Join(dir, "missing"))
}

// TestFleetServeCommand: fleet serve reads the store, serves the
// clusters over HTTP and stops when its context ends. Without
// fleet.cache_dir it keeps its documents in a temporary directory
// (0700), removed when it stops.
func TestFleetServeCommand(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir := t.TempDir()
	st, err := uploader.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	jobtest.PutBackup(t, repository.New(st, "quiet"), time.Now().Add(-72*time.Hour), uploader.PutOptions{}, false)
	cfg := DefaultConfig()
	cfg.Store.URL = "file://" + dir
	lg, _ := jobtest.Logger(t)
	ctx, cancel := context.WithCancel(t.Context())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- runFleetServe(ctx, &cfg, lg, fleetServeOptions{listen: "127.0.0.1:0", interval: time.Minute}, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("fleet serve: %v", err)
	}
	var r fleet.Report
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/api/v1/clusters")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report within 10s: %d %s", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(r.Clusters) != 1 || r.Clusters[0].Name != "quiet" || len(r.Clusters[0].Problems) == 0 {
		t.Errorf("served report: %+v", r.Clusters)
	}
	caches, _ := filepath.Glob(filepath.Join(tmp, "lifeboat-fleet-cache-*"))
	if len(caches) != 1 {
		t.Fatalf("temporary document caches while serving: %q, want one", caches)
	}
	if fi, err := os.Stat(caches[0]); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the temporary document cache: %v, %v; want mode 0700", fi, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("fleet serve returned %v after cancel", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fleet serve did not stop within 15s of cancel")
	}
	if _, err := os.Stat(caches[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary document cache after the hub stopped: %v, want it removed", err)
	}
}

// TestFleetSeesADeadAgent: two live agent daemons of two clusters
// against a real etcd write backups and status documents into one
// store; one is stopped (its process gone, as with its node): it, and
// only it, becomes stale by its own schedule and silent, while the other
// stays clean. The policy's floors are shortened so that a schedule of
// a second shows in seconds what an hourly one shows in hours.
func TestFleetSeesADeadAgent(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 20)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lg, _ := jobtest.Logger(t)
	stops := map[string]func(){}
	for _, name := range []string{"alive", "killed"} {
		repo := repository.New(st, name)
		a, err := agent.New(agent.Config{
			Cluster: name, Backups: repo, Identity: name + "-node", Version: "test",
			Snapshot: &backup.Job{Etcd: snapshot.Config{Endpoints: c.Endpoints()}, SpoolDir: filepath.Join(t.TempDir(), "spool"),
				Backups: repo, Encoding: repository.Encoding{Compression: "zstd"}, Version: "test"},
			Schedules:   agent.Schedules{Snapshot: "@every 1s"},
			StatusEvery: 200 * time.Millisecond,
		}, lg.With("cluster", name))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent %s: %v", name, err)
			}
		}
		stops[name] = sync.OnceFunc(stop)
		t.Cleanup(stops[name])
	}
	p := fleet.DefaultPolicy()
	p.MinGrace, p.AgentSilentAfter = 4*time.Second, 4*time.Second
	problems := func() map[string][]string {
		cs, err := fleet.Read(t.Context(), []fleet.Source{{Name: "dir", Store: st}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, s := range fleet.NewReport(cs, p, time.Now()).Clusters {
			kinds := []string{}
			if s.Newest == nil || s.Agent == nil {
				kinds = append(kinds, "not yet")
			}
			for _, pr := range s.Problems {
				kinds = append(kinds, pr.Kind)
			}
			out[s.Name] = kinds
		}
		return out
	}
	waitFor := func(want map[string][]string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			got := problems()
			if cmp.Equal(want, got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("problems %v, want %v within %s", got, want, within)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitFor(map[string][]string{"alive": {}, "killed": {}}, 30*time.Second)
	stops["killed"]()
	killedAt := time.Now()
	waitFor(map[string][]string{"alive": {}, "killed": {fleet.ProblemStale, fleet.ProblemAgentSilent}}, 30*time.Second)
	t.Logf("the stopped agent's cluster was stale and silent %s after it stopped; the live one clean", time.Since(killedAt).Round(100*time.Millisecond))
}

// TestFleetIdentities: fleet.drills.identities is one identity file for
// every cluster, or a directory with a file per cluster (a cluster
// without one gets none; a name that leaves the directory is refused).
func TestFleetIdentities(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "prod")
	if err := os.WriteFile(file, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	one, err := fleetIdentities(file)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := one("anything"); err != nil || len(ids) != 1 {
		t.Errorf("one file, any cluster: %d identities, %v; want 1", len(ids), err)
	}
	byName, err := fleetIdentities(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := byName("prod"); err != nil || len(ids) != 1 {
		t.Errorf("directory, prod: %d identities, %v; want its file's 1", len(ids), err)
	}
	if ids, err := byName("staging"); err != nil || len(ids) != 0 {
		t.Errorf("directory, staging (no file): %d identities, %v; want none, no error", len(ids), err)
	}
	for _, bad := range []string{"..", "a/b", ""} {
		if _, err := byName(bad); err == nil {
			t.Errorf("directory, cluster %q: no error", bad)
		}
	}
	if _, err := fleetIdentities(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing identities path: no error")
	}
	if f, err := fleetIdentities(""); f != nil || err != nil {
		t.Errorf("no identities: %v, %v; want nil, nil", f != nil, err)
	}
}
