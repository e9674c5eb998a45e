package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// BenchmarkFleetRead reads a fleet in versitygw: FLEET_CLUSTERS
// clusters (default 20), each with FLEET_HOURS hourly backups (default
// 48), a daily drill report, an agent status document, the index its
// agent writes after its jobs and, unless FLEET_CAPTURE=0, what a week
// of capture at 1 s leaves (jobtest.SevenDaysOfCapture: 8 generations,
// 262 change objects, 8 markers). One
// iteration is one read of the whole fleet; hub reports the hub's peak
// RSS over its first three refreshes. FLEET_BENCH=hub,cold,... runs
// only those sub-benchmarks (all by default; the seeding is the long
// part).
func BenchmarkFleetRead(b *testing.B) {
	clusters, hours, capture := envInt("FLEET_CLUSTERS", 20), envInt("FLEET_HOURS", 48), envInt("FLEET_CAPTURE", 1) == 1
	// FLEET_S3=fast: versitygw as S3 serves (connections kept alive, no
	// request log); by default as the tests start it.
	srv := s3test.StartWith(b, s3test.Options{KeepAlive: os.Getenv("FLEET_S3") == "fast", Quiet: os.Getenv("FLEET_S3") == "fast"})
	st, bucket := jobtest.NewS3Store(b, srv, false)
	now := time.Now().UTC()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for c := range clusters {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("cluster-%03d", c)
			repo := repository.New(st, name)
			var last *repository.Manifest
			for h := hours; h >= 1; h-- {
				last = jobtest.PutBackup(b, repo, now.Truncate(time.Hour).Add(-time.Duration(h-1)*time.Hour), uploader.PutOptions{}, false)
				if h%24 == 1 {
					r := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: last.ID, Cluster: name,
						StartedAt: last.CreatedAt.Add(time.Minute), FinishedAt: last.CreatedAt.Add(2 * time.Minute), Passed: true, RecoverySeconds: 9}
					if err := repo.PutDrillReport(b.Context(), r); err != nil {
						b.Error(err)
					}
				}
			}
			if capture {
				// A week of capture at 1 s, compacted, rolled over daily.
				jobtest.SevenDaysOfCapture(b, repo, now.Add(-7*24*time.Hour-13*time.Hour))
			}
			status(b, st, name, "@hourly", now)
			writeIndex(b, st, name, nil, now) // as the agent does after its jobs
		})
	}
	wg.Wait()
	src := []Source{{Name: "bucket", Store: st}}
	read := func(b *testing.B, r *Reader) {
		cs, err := r.Read(b.Context(), src, nil)
		if err != nil || len(cs) != clusters {
			b.Fatalf("Read: %v, %d clusters", err, len(cs))
		}
		if rep := NewReport(cs, DefaultPolicy(), now); rep.Problems() != 0 {
			b.Fatalf("%d clusters with problems: %+v", rep.Problems(), rep.Clusters[0].Problems)
		}
	}
	run := func(name string, f func(b *testing.B)) {
		if only := os.Getenv("FLEET_BENCH"); only == "" || slices.Contains(strings.Split(only, ","), name) {
			b.Run(name, f)
		}
	}
	// hub: the hub's peak RSS (Linux VmHWM, reset after the seeding)
	// over a cold refresh and two refreshes with nothing changed, with
	// what the process held before (base), under the soft memory limit
	// lifeboat fleet serve runs with (hubMemoryLimit), its documents in
	// memory (no fleet.cache_dir); hub-nolimit without the limit;
	// hub-cachedir and hub-cachedir-nolimit with fleet.cache_dir.
	run("hub", func(b *testing.B) { hubRSS(b, src, clusters, now, hubMemoryLimit, false) })
	run("hub-nolimit", func(b *testing.B) { hubRSS(b, src, clusters, now, math.MaxInt64, false) })
	run("hub-cachedir", func(b *testing.B) { hubRSS(b, src, clusters, now, hubMemoryLimit, true) })
	run("hub-cachedir-nolimit", func(b *testing.B) { hubRSS(b, src, clusters, now, math.MaxInt64, true) })
	// serve, serve-nocache: the peak RSS of the real hub, `lifeboat
	// fleet serve` (LIFEBOAT_BIN) with and without fleet.cache_dir (it
	// then keeps its documents in a temporary directory), over
	// its first serveRefreshes refreshes (one full, then nothing
	// changed), and their times.
	serve := []string{"fleet", "serve", "--store", "s3://" + bucket + "/team", "--s3-endpoint", srv.Endpoint,
		"--s3-region", srv.Region, "--s3-path-style", "--listen", "127.0.0.1:0", "--interval", "1s", "--log-format", "json"}
	run("serve", func(b *testing.B) { serveRSS(b, append(serve, "--fleet-cache-dir", b.TempDir())) })
	// status-bin, status-bin-full: `lifeboat fleet status` (LIFEBOAT_BIN)
	// as a user runs it, cold (through the agents' indexes) and with
	// --full, side by side: the whole process's wall time and peak RSS.
	status := []string{"fleet", "status", "--store", "s3://" + bucket + "/team", "--s3-endpoint", srv.Endpoint,
		"--s3-region", srv.Region, "--s3-path-style", "-o", "json"}
	run("status-bin", func(b *testing.B) { statusRun(b, srv.Pid(), status) })
	run("status-bin-full", func(b *testing.B) { statusRun(b, srv.Pid(), append(status, "--full")) })
	run("serve-nocache", func(b *testing.B) { serveRSS(b, serve) })
	// cold: what one `fleet status` costs (each cluster read through its
	// agent's index); cold-full: the same listing every object and
	// reading every document (`fleet status --full`, and what cold cost
	// before the index), side by side.
	run("cold", func(b *testing.B) {
		for b.Loop() {
			read(b, NewReader())
		}
	})
	run("cold-full", func(b *testing.B) {
		for b.Loop() {
			r := NewReader()
			r.NoIndex = true
			read(b, r)
		}
	})
	// restart: a new hub process with fleet.cache_dir, the cache file
	// written by an earlier read (nothing changed since).
	run("restart", func(b *testing.B) {
		dir := b.TempDir()
		r, err := NewCachedReader(dir)
		if err != nil {
			b.Fatal(err)
		}
		read(b, r)
		for b.Loop() {
			r, err := NewCachedReader(dir)
			if err != nil {
				b.Fatal(err)
			}
			read(b, r)
		}
	})
	// full: the hub's full read (every fleet.full_every), nothing
	// changed: every object listed, none read.
	// warm is one Reader after a cold read, shared by full, refresh and
	// refresh-agents (a cold read of a large fleet is the long part).
	var warm *Reader
	warmed := func(b *testing.B) *Reader {
		if warm == nil {
			warm = NewReader()
			read(b, warm)
		}
		return warm
	}
	// times runs f rounds times per iteration and reports the mean and
	// the slowest round in seconds.
	times := func(b *testing.B, rounds int, f func(i int)) {
		var total, slowest time.Duration
		for i := range rounds {
			start := time.Now()
			f(i)
			d := time.Since(start)
			total, slowest = total+d, max(slowest, d)
		}
		b.ReportMetric(total.Seconds()/float64(rounds), "mean-s")
		b.ReportMetric(slowest.Seconds(), "max-s")
	}
	run("full", func(b *testing.B) {
		r := warmed(b)
		for b.Loop() {
			times(b, 3, func(int) { read(b, r) })
		}
	})
	// refresh: the hub's refresh between full reads (Reader.Refresh),
	// nothing changed: the root's names and each cluster's agents/ area
	// listed, nothing read. Ten refreshes an iteration.
	refresh := func(b *testing.B, r *Reader) {
		cs, err := r.Refresh(b.Context(), src, nil)
		if err != nil || len(cs) != clusters {
			b.Fatalf("Refresh: %v, %d clusters", err, len(cs))
		}
	}
	run("refresh", func(b *testing.B) {
		r := warmed(b)
		for b.Loop() {
			times(b, 10, func(int) { refresh(b, r) })
		}
	})
	// refresh-agents: the same after every agent wrote its status
	// document again with no job done (a daemon writes one a minute):
	// each cluster's new document read too. The writes are not timed
	// (mean-s and max-s are the refreshes alone).
	run("refresh-agents", func(b *testing.B) {
		r := warmed(b)
		for b.Loop() {
			var total, slowest time.Duration
			for i := range 5 {
				rewriteStatus(b, st, clusters, now.Add(time.Duration(i+1)*time.Millisecond))
				start := time.Now()
				refresh(b, r)
				d := time.Since(start)
				total, slowest = total+d, max(slowest, d)
			}
			b.ReportMetric(total.Seconds()/5, "mean-s")
			b.ReportMetric(slowest.Seconds(), "max-s")
		}
	})
}

// rewriteStatus writes every cluster's status document again, written
// at written, as its agent does every minute.
func rewriteStatus(b *testing.B, st uploader.Store, clusters int, written time.Time) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for c := range clusters {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			status(b, st, fmt.Sprintf("cluster-%03d", c), "@hourly", written)
		})
	}
	wg.Wait()
}

// hubMemoryLimit is the soft memory limit lifeboat fleet serve runs with
// (cmd/lifeboat's memoryHeadroom: it uploads nothing), unless GOMEMLIMIT
// is set.
const hubMemoryLimit = 32 << 20

// hubRSS runs a new hub's first three refreshes of src under the soft
// memory limit and reports the process's peak RSS (VmHWM, reset first)
// and what it held before (base). Its clock is now, the seeding's (the
// agents' status documents were written then).
func hubRSS(b *testing.B, src []Source, clusters int, now time.Time, limit int64, cacheDir bool) {
	old := debug.SetMemoryLimit(limit)
	defer debug.SetMemoryLimit(old)
	for b.Loop() {
		runtime.GC()
		debug.FreeOSMemory()
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			b.Skipf("cannot reset the peak RSS (Linux /proc/self/clear_refs): %v", err)
		}
		base := procStatusKiB(b, "VmHWM")
		reader := NewReader()
		if cacheDir {
			var err error
			if reader, err = NewCachedReader(b.TempDir()); err != nil {
				b.Fatal(err)
			}
		}
		h := NewHub(HubConfig{Sources: src, Reader: reader, Now: func() time.Time { return now }}, nil)
		for range 3 {
			if err := h.Refresh(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		if rep := h.Report(); len(rep.Clusters) != clusters || rep.Problems() != 0 {
			b.Fatalf("the hub's report: %d clusters, %d with problems: %+v", len(rep.Clusters), rep.Problems(), rep.Clusters[0].Problems)
		}
		b.ReportMetric(float64(base)/1024, "base-RSS-MiB")
		b.ReportMetric(float64(procStatusKiB(b, "VmHWM"))/1024, "peak-RSS-MiB")
		runtime.KeepAlive(h)
	}
}

// procStatusKiB is a field of /proc/self/status in KiB (VmHWM: the peak
// resident set).
func procStatusKiB(b *testing.B, field string) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	return statusKiB(b, string(data), field)
}

// statusKiB is a field of a /proc/PID/status text in KiB.
func statusKiB(b *testing.B, data, field string) int64 {
	b.Helper()
	for line := range strings.Lines(data) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return n
			}
		}
	}
	b.Fatalf("/proc/self/status has no %s", field)
	return 0
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// serveRefreshes is how many refreshes serveRSS waits for: the cold
// one, then those with nothing changed.
const serveRefreshes = 8

// serveRSS runs `lifeboat fleet serve` (LIFEBOAT_BIN) with args until it
// logged serveRefreshes refreshes and reports its peak RSS (VmHWM), the
// seconds of its first (cold) refresh and the mean and slowest of the
// others (nothing changed), as it logged them.
func serveRSS(b *testing.B, args []string) {
	bin := os.Getenv("LIFEBOAT_BIN")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("LIFEBOAT_BIN is not set: the hub's RSS needs the built binary")
		}
		b.Skip("LIFEBOAT_BIN is not set: the hub's RSS needs the built binary")
	}
	for b.Loop() {
		cmd := exec.CommandContext(b.Context(), bin, args...)
		out, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var took []float64
		sc := bufio.NewScanner(out)
		for len(took) < serveRefreshes && sc.Scan() {
			var line struct {
				Msg     string  `json:"msg"`
				Seconds float64 `json:"seconds"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "fleet refreshed" {
				took = append(took, line.Seconds)
			}
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		cmd.Process.Kill()
		cmd.Wait()
		if len(took) < serveRefreshes || err != nil {
			b.Fatalf("lifeboat fleet serve: %d refreshes logged, /proc: %v", len(took), err)
		}
		b.ReportMetric(float64(statusKiB(b, string(status), "VmHWM"))/1024, "peak-RSS-MiB")
		b.ReportMetric(took[0], "cold-s")
		rest := took[1:]
		sum := 0.0
		for _, s := range rest {
			sum += s
		}
		b.ReportMetric(sum/float64(len(rest)), "refresh-mean-s")
		b.ReportMetric(slices.Max(rest), "refresh-max-s")
	}
}

// statusRun runs `lifeboat fleet status` (LIFEBOAT_BIN) with args and
// reports its wall time, its peak RSS (its VmHWM, read every 10 ms while
// it runs: the rusage of a child counts the parent's pages at the fork),
// and the CPU seconds it and the S3 server (process s3pid) spent.
func statusRun(b *testing.B, s3pid int, args []string) {
	bin := os.Getenv("LIFEBOAT_BIN")
	if bin == "" {
		b.Skip("LIFEBOAT_BIN is not set")
	}
	var wall, cpu, s3cpu time.Duration
	var rss int64
	for b.Loop() {
		s3before := procCPU(b, s3pid)
		cmd := exec.CommandContext(b.Context(), bin, args...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		exited, done := make(chan struct{}), make(chan struct{})
		var hwm int64
		go func() {
			defer close(done)
			for {
				if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil && strings.Contains(string(data), "VmHWM") {
					hwm = max(hwm, statusKiB(b, string(data), "VmHWM"))
				}
				select {
				case <-exited:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		err := cmd.Wait()
		wall += time.Since(start)
		close(exited)
		<-done
		if err != nil || !strings.Contains(out.String(), `"clusters"`) {
			b.Fatalf("lifeboat fleet status: %v\n%.2000s", err, errOut.String())
		}
		rss = max(rss, hwm)
		cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		s3cpu += procCPU(b, s3pid) - s3before
	}
	b.ReportMetric(wall.Seconds()/float64(b.N), "wall-s")
	b.ReportMetric(float64(rss)/1024, "peak-RSS-MiB")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s")
	b.ReportMetric(s3cpu.Seconds()/float64(b.N), "s3-cpu-s")
}

// procCPU is the user and system CPU time process pid has used.
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 a second).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}
