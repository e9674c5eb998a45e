package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// The soak's compressed time: capture every 150 ms, a scheduled
// snapshot (and so a rollover) every 10 s, prune every 5 s keeping the
// changes of the last minute, compaction levels of 1 s, 5 s and 10 s
// whose replaced segments stay 10 s, every generation rolling over.
const (
	soakInterval        = 150 * time.Millisecond
	soakSnapshotEvery   = 10 * time.Second
	soakPruneEvery      = 5 * time.Second
	soakChangesWithin   = time.Minute
	soakCompaction      = "1s,5s,10s"
	soakCompactionGrace = 10 * time.Second
	soakRun             = 240 * time.Second // the writer's run: 4 retention periods
	soakSampleEvery     = 3 * time.Second
	soakScrapeEvery     = time.Second
	soakBucket          = "soak"
	soakChangesPrefix   = "lb/default/changes/"
	soakLevelTolerance  = 1.25
	soakSwingTolerance  = 1.5 // the bytes' top of swing (levels)
	soakWriteRate       = 30  // the writer's requests per second
	// soakLockTTL is the leader lock's TTL: a SIGKILLed leader's lock
	// expires after it. Twice the floor (5 s), so that a loaded machine
	// does not hand the lock over on its own.
	soakLockTTL = 10 * time.Second
)

// TestCaptureSoak is issue 20's proof in compressed time: two `lifeboat
// agent` processes share the leader lock and capture a steady
// Kubernetes-like writer (objects created, updated in transactions and
// deleted, Events on short leases that expire or are revoked, node
// leases) into versitygw through a fault proxy, age-encrypted, with
// rollovers, compaction and prune running, for 4 retention periods.
// Faults come at known times: the leader SIGKILLed (the other takes the
// lock and continues the generation), the store stopped and restarted,
// PutObject replies lost, a lock handover (SIGTERM), and the store
// disconnected (503s and resets) long enough for compaction passes to
// fail. None of them may cost a gap.
//
// It asserts: (1) the change objects under changes/ level off: the
// largest count of the last period's samples and the median of their
// bytes are within 1.25x of the largest in the rollover and prune
// interval after the first period, the largest bytes within 1.5x; (2) five revisions of the
// retained windows (the oldest one's start, a rollover boundary, the
// newest, two random) pass `lifeboat drill --to-revision R` (HashKV of the
// replay equal to the live cluster's at R; the writer never compacts);
// (3) lifeboat_capture_gaps_total of every agent process is 0, no window
// is sealed for anything but a rollover, and the windows overlap or meet
// from the oldest retained to the newest; (4) `lifeboat verify --changes`
// exits 0.
func TestCaptureSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: about 4 minutes of real etcd, versitygw and two agents")
	}
	fail := newFailures(t) // first: its summary prints last
	bin := needLifeboat(t)
	// The etcd binary, not an in-process member: on a loaded machine
	// the test's own goroutines (the writer, the samplers) must not delay
	// etcd's lease expiry checks and keepalives, which hold the lock.
	src := etcdtest.StartBinary(t, etcdtest.Current.Need(t))
	endpoint := src.ClientURL
	cli := src.Client(t)
	srv := s3test.Start(t)
	srv.CreateBucket(t, soakBucket, false)
	proxy := s3test.NewProxy(t, srv.Endpoint)

	dir := t.TempDir()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(dir, "identity.txt")
	if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(dir, "no-such-aws-file")
	lb := &lifeboat{
		bin:   bin,
		store: "s3://" + soakBucket + "/lb",
		spool: filepath.Join(dir, "spool"),
		flags: []string{"--s3-endpoint", proxy.URL, "--s3-path-style", "--s3-region", srv.Region,
			"--recipient", id.Recipient().String(), "--identity-file", idFile,
			"--scratch-dir", filepath.Join(dir, "scratch")},
		env: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
			"AWS_CONFIG_FILE=" + none, "AWS_SHARED_CREDENTIALS_FILE=" + none, "AWS_EC2_METADATA_DISABLED=true"},
	}
	// The agents' flags (the file sets a lock TTL of 5 s: overridden):
	// compressed time. The orphan grace's floor is
	// (snapshot_retries + 1) x snapshot.timeout: 20 s here. Three S3
	// attempts per request, so that a store fault reaches capture and
	// compaction within the fault, not after it.
	agentArgs := []string{
		"--capture-interval", soakInterval.String(),
		"--capture-compaction-levels", soakCompaction,
		"--capture-rollover", "0",
		"--capture-compaction-grace", soakCompactionGrace.String(),
		"--snapshot-schedule", "@every " + soakSnapshotEvery.String(),
		"--prune-schedule", "@every " + soakPruneEvery.String(),
		"--changes-within", soakChangesWithin.String(),
		"--keep-last", "2",
		"--orphan-grace", "30s",
		"--snapshot-retries", "0",
		"--timeout", "20s",
		"--s3-max-attempts", "3",
		"--lock-ttl", soakLockTTL.String(),
	}

	s := &soak{t: t, fail: fail, lb: lb, endpoints: []string{endpoint}, args: agentArgs, srv: srv, cli: cli}
	s.slots[0], s.slots[1] = s.start(), s.start()
	t.Cleanup(func() {
		proxy.SetFault(nil)
		if t.Failed() {
			s.diagnose()
		}
	})

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	w := &kubeWriter{cli: cli, rng: rand.New(rand.NewPCG(20, uint64(time.Now().UnixNano())))}
	var bg sync.WaitGroup
	bg.Go(func() { w.run(ctx) })
	bg.Go(func() { s.sample(ctx) })
	bg.Go(func() { s.scrapeLoop(ctx) })
	stopAll := sync.OnceFunc(func() { stop(); bg.Wait() })
	defer stopAll()

	// The clock starts once a window is durable past the writer's first
	// revisions: capture is running.
	first := s.leader(time.Minute)
	first.waitCaptured(t, currentRevision(t, cli))
	s.begin(time.Now())
	t.Logf("soak: capture running (leader agent %d); faults follow", first.n)

	// The faults, each at a known time after the start: none in the
	// first retention period and the rollover and prune after it (the
	// figure the store must level off at), and the last one (the
	// disconnection, which stops segments for 15 s and so lowers the
	// count of the minute after it) more than a minute before the last
	// period.
	s.at(76*time.Second, "SIGKILL of the leader", func() {
		s.replace(s.leader(30*time.Second), true)
	})
	s.at(86*time.Second, "store stopped for 8 s, then restarted", func() {
		srv.Stop()
		time.Sleep(8 * time.Second) // the length of the outage
		srv.Restart(t)
	})
	s.at(100*time.Second, "PutObject replies lost for 4 s", func() {
		proxy.SetFault(func(r *http.Request, _ int) s3test.Fault {
			if s3test.Op(r) == "PutObject" {
				return s3test.Drop()
			}
			return s3test.None
		})
		time.Sleep(4 * time.Second) // the length of the fault
		proxy.SetFault(nil)
	})
	s.at(112*time.Second, "lock handover (SIGTERM of the leader)", func() {
		s.replace(s.leader(30*time.Second), false)
	})
	s.at(122*time.Second, "store disconnected (503 and resets) for 15 s", func() {
		l := s.leader(30 * time.Second)
		before := l.metric("lifeboat_capture_compaction_errors_total")
		proxy.SetFault(func(_ *http.Request, n int) s3test.Fault {
			if n%2 == 0 {
				return s3test.Reset(0)
			}
			return s3test.Status(http.StatusServiceUnavailable)
		})
		time.Sleep(15 * time.Second) // the length of the disconnection
		during := l.metric("lifeboat_capture_compaction_errors_total")
		proxy.SetFault(nil)
		t.Logf("soak: compaction errors of agent %d: %v before the disconnection, %v at its end", l.n, before, during)
		if during <= before {
			fail.Errorf("no compaction pass failed during a 15 s disconnection of the store (lifeboat_capture_compaction_errors_total %v, then %v): did compaction run?", before, during)
		}
	})
	s.at(soakRun, "end of the writer", func() {})
	stopAll()
	if n := w.errs.Load(); n > 0 {
		fail.Errorf("the writer had %d failed requests of %d (last: %v)", n, w.ops.Load(), w.lastErr.Load())
	}
	end := currentRevision(t, cli)
	t.Logf("soak: the writer made %d requests; the cluster is at revision %d", w.ops.Load(), end)

	// Capture makes the end durable; then the agents stop (SIGTERM, exit
	// 0), so that no prune runs under the checks.
	s.leader(30*time.Second).waitCaptured(t, end)
	s.scrapeAll()
	gaps := map[string]float64{}
	for _, a := range s.all {
		for k, v := range a.values() {
			if strings.HasPrefix(k, "lifeboat_capture_gaps_total{") {
				gaps[k] += v
			}
		}
	}
	rollovers, compacted, compactErrs := s.sum("lifeboat_capture_rollovers_total"), s.sum("lifeboat_capture_compacted_segments_total"), s.sum("lifeboat_capture_compaction_errors_total")
	for _, a := range s.slots {
		a.stop(t)
	}
	t.Logf("soak: %d agent processes; rollovers %v, compacted segments %v, compaction errors %v, gaps %v", len(s.all), rollovers, compacted, compactErrs, gaps)

	// (3) No gap: none counted, none sealed in the store, and the windows
	// overlap or meet.
	for k, v := range gaps {
		if v != 0 {
			fail.Errorf("%s = %v, want 0: no fault of the soak may cost a gap", k, v)
		}
	}
	if rollovers == 0 || compacted == 0 {
		fail.Errorf("rollovers %v, compacted segments %v: want both > 0 in %v with snapshots every %v and levels %s", rollovers, compacted, soakRun, soakSnapshotEvery, soakCompaction)
	}
	ws := lb.windows(t)
	slices.SortFunc(ws, func(a, b window) int { return int(a.FromRevision - b.FromRevision) })
	for _, w := range ws {
		t.Logf("soak: window %s revisions %d-%d (%s to %s), %d segments, sealed %v %s %s", w.Generation, w.FromRevision, w.Through,
			w.FromTime.Format(time.TimeOnly), w.ThroughTime.Format(time.TimeOnly), w.Segments, w.Sealed, w.SealReason, w.Problem)
	}
	if len(ws) == 0 {
		t.Fatal("no capture window left")
	}
	for i, w := range ws {
		if !w.Recoverable || w.Problem != "" || (w.Sealed && w.SealReason != "rollover") {
			fail.Errorf("window %s (revisions %d-%d): recoverable %v, sealed %v %q, problem %q: want recoverable, no problem, sealed only for a rollover",
				w.Generation, w.FromRevision, w.Through, w.Recoverable, w.Sealed, w.SealReason, w.Problem)
		}
		if i > 0 && w.FromRevision > ws[i-1].Through+1 {
			fail.Errorf("gap between windows: %s ends at revision %d, the next (%s) starts at %d", ws[i-1].Generation, ws[i-1].Through, w.Generation, w.FromRevision)
		}
	}
	if last := ws[len(ws)-1]; last.Through < end {
		fail.Errorf("the newest window ends at revision %d, the cluster at %d", last.Through, end)
	}
	oldest, newest := ws[0], ws[len(ws)-1]
	if span := newest.ThroughTime.Sub(oldest.FromTime); span > soakChangesWithin+2*soakSnapshotEvery+soakPruneEvery+30*time.Second {
		fail.Errorf("the retained windows span %v (from %s to %s): retention keeps the changes within %v", span, oldest.FromTime, newest.ThroughTime, soakChangesWithin)
	}

	// (1) The change objects level off.
	s.levels()

	// (2) Revisions of the retained windows restore with the source's
	// HashKV: the start of the oldest, the revision just before the
	// newest rollover's snapshot (only the previous window has it), the
	// newest, and two at random.
	rng := rand.New(rand.NewPCG(uint64(end), 20))
	targets := []int64{oldest.FromRevision + 1, newest.Through}
	if len(ws) > 1 {
		targets = append(targets, newest.FromRevision-1)
	}
	for len(targets) < 5 {
		targets = append(targets, oldest.FromRevision+1+rng.Int64N(newest.Through-oldest.FromRevision))
	}
	for _, r := range targets {
		code, out, errOut := lb.runCode(t, "drill", "--to-revision", strconv.FormatInt(r, 10), "--endpoints", endpoint)
		if code != 0 || !strings.Contains(out, "PASSED") {
			fail.Errorf("drill --to-revision %d: exit %d\n%s\n%s", r, code, out, errOut)
			continue
		}
		for line := range strings.SplitSeq(out, "\n") {
			if strings.Contains(line, "hashkv at") || strings.Contains(line, "replayed") {
				t.Logf("soak: drill --to-revision %d: %s", r, strings.TrimSpace(line))
			}
		}
	}

	// (4) verify --changes is clean.
	if code, out, errOut := lb.runCode(t, "verify", "--changes"); code != 0 {
		fail.Errorf("verify --changes: exit %d\n%s\n%s", code, out, errOut)
	}
}

// soak holds the soak's agents, the samples of the store and the clock.
type soak struct {
	t         *testing.T
	fail      *failures
	lb        *lifeboat
	endpoints []string
	args      []string
	srv       *s3test.Server
	cli       *clientv3.Client

	mu      sync.Mutex
	slots   [2]*soakAgent // the running agents
	all     []*soakAgent  // every agent process started
	t0      time.Time     // when capture was running
	samples []soakSample
}

// soakAgent is one agent process with its last scraped metrics, kept
// after it was killed.
type soakAgent struct {
	*captureAgent
	n int

	mu   sync.Mutex
	last map[string]float64
}

// soakSample is the change objects in the store at one time.
type soakSample struct {
	at             time.Duration // since t0
	revision       int64         // the cluster's
	objects, bytes int64
	compacted      int64 // objects of them that are compacted segments (.L<n>-)
	generations    int   // generations they belong to
}

// start starts an agent process.
func (s *soak) start() *soakAgent {
	a := &soakAgent{captureAgent: s.lb.capture(s.t, s.endpoints, s.args...), last: map[string]float64{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	a.n = len(s.all)
	s.all = append(s.all, a)
	return a
}

func (s *soak) begin(t0 time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t0 = t0
}

// at waits until d after t0 and injects fault f.
func (s *soak) at(d time.Duration, name string, f func()) {
	s.t.Helper()
	time.Sleep(time.Until(s.t0.Add(d))) // the fault's scheduled time
	s.t.Logf("soak: %6.1fs %s", time.Since(s.t0).Seconds(), name)
	f()
}

// replace ends agent a, with SIGKILL or SIGTERM, waits for the other to
// take the lock, and starts a new agent in a's place.
func (s *soak) replace(a *soakAgent, kill bool) {
	s.t.Helper()
	a.scrape()
	if kill {
		a.kill()
	} else {
		a.stop(s.t)
	}
	next := s.leader(30 * time.Second)
	s.t.Logf("soak: %6.1fs agent %d leads", time.Since(s.t0).Seconds(), next.n)
	s.mu.Lock()
	i := slices.Index(s.slots[:], a)
	s.mu.Unlock()
	b := s.start()
	s.mu.Lock()
	s.slots[i] = b
	s.mu.Unlock()
}

// leader returns the running agent whose lifeboat_leader is 1, polling
// until within; none fails the test.
func (s *soak) leader(within time.Duration) *soakAgent {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		slots := s.slots
		s.mu.Unlock()
		for _, a := range slots {
			select {
			case <-a.exited:
				continue
			default:
			}
			if a.scrape() && a.metric("lifeboat_leader") == 1 && a.metric("lifeboat_capture_up") == 1 {
				return a
			}
		}
		if time.Now().After(deadline) {
			s.fail.Fatalf("no agent leads and captures within %v", within)
		}
		time.Sleep(200 * time.Millisecond) // polling the agents against a deadline
	}
}

// scrapeLoop scrapes the running agents' metrics until ctx ends, so that
// a killed agent's last counters are known.
func (s *soak) scrapeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(soakScrapeEvery):
		}
		s.scrapeAll()
	}
}

func (s *soak) scrapeAll() {
	s.mu.Lock()
	slots := s.slots
	s.mu.Unlock()
	for _, a := range slots {
		a.scrape()
	}
}

// sum adds metric name over every agent process.
func (s *soak) sum(name string) float64 {
	var v float64
	for _, a := range s.all {
		v += a.metric(name)
	}
	return v
}

// scrape reads a's /metrics; false when it does not answer.
func (a *soakAgent) scrape() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.listen+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	if sc.Err() != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = m
	return true
}

// metric is the last scraped value of a metric (name with its labels).
func (a *soakAgent) metric(name string) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last[name]
}

func (a *soakAgent) values() map[string]float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[string]float64, len(a.last))
	for k, v := range a.last {
		m[k] = v
	}
	return m
}

// sample counts the change objects in the store (straight at versitygw,
// not through the proxy) every soakSampleEvery until ctx ends; while the
// store is down there is no sample.
func (s *soak) sample(ctx context.Context) {
	c := s.srv.Client(s.t)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(soakSampleEvery):
		}
		s.mu.Lock()
		t0 := s.t0
		s.mu.Unlock()
		if t0.IsZero() {
			continue
		}
		var n, size, compacted int64
		gens := map[string]bool{}
		p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(soakBucket), Prefix: aws.String(soakChangesPrefix)})
		ok := true
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				ok = false
				break
			}
			for _, o := range page.Contents {
				n++
				size += aws.ToInt64(o.Size)
				key := strings.TrimPrefix(aws.ToString(o.Key), soakChangesPrefix)
				if g, name, ok := strings.Cut(key, "/"); ok {
					gens[g] = true
					if strings.Contains(name, ".L") {
						compacted++
					}
				}
			}
		}
		var rev int64
		if r, err := s.cli.Get(ctx, "/e2e/revision"); err == nil {
			rev = r.Header.Revision
		}
		if ok {
			s.mu.Lock()
			s.samples = append(s.samples, soakSample{at: time.Since(t0), revision: rev, objects: n, bytes: size, compacted: compacted, generations: len(gens)})
			s.mu.Unlock()
		}
	}
}

// levels asserts that the change objects level off. The count: the
// largest of the last retention period's samples is within
// soakLevelTolerance of the largest after one period. The bytes swing
// more than the count between samples: a compacted segment and the
// segments it replaced are both stored for the compaction grace (10 s),
// and prune drops a generation (10 s of changes) whole every 5 s, so one
// sample may hold a generation and a grace more than the next, about
// 30 % of a period in this compressed time. Their level is the median of
// the last period's samples, within soakLevelTolerance of the largest
// after one period; the top of their swing, the last period's largest,
// within soakSwingTolerance. Growth over the three periods after the
// first moves both.
func (s *soak) levels() {
	s.t.Helper()
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	var series []string
	for _, x := range samples {
		series = append(series, fmt.Sprintf("%.0fs:r%d:%d(%dL)/%dg/%dKiB", x.at.Seconds(), x.revision, x.objects, x.compacted, x.generations, x.bytes>>10))
	}
	s.t.Logf("soak: time:cluster revision:change objects (compacted ones)/generations/bytes: %s", strings.Join(series, " "))
	// The count after one period is the largest of the samples of one
	// rollover and one prune interval after it: retention keeps every
	// generation that overlaps the period, whole, until the next prune,
	// so the store holds up to a period, a rollover and a prune interval
	// of changes, in a sawtooth of one rollover (prune deletes a
	// generation whole) whose low a single sample may hit.
	const after = soakChangesWithin + soakSnapshotEvery + soakPruneEvery
	var base, top soakSample
	var nBase int
	var lastBytes []int64
	for _, x := range samples {
		if x.at >= soakChangesWithin && x.at <= after {
			base.objects, base.bytes, nBase = max(base.objects, x.objects), max(base.bytes, x.bytes), nBase+1
		}
		if x.at >= soakRun-soakChangesWithin {
			top.objects, top.bytes = max(top.objects, x.objects), max(top.bytes, x.bytes)
			lastBytes = append(lastBytes, x.bytes)
		}
	}
	if nBase == 0 || len(lastBytes) < 5 {
		s.fail.Errorf("too few samples of the store to tell whether it levels off: %d after one period, %d in the last", nBase, len(lastBytes))
		return
	}
	slices.Sort(lastBytes)
	level := lastBytes[len(lastBytes)/2]
	ratio := func(a, b int64) float64 { return float64(a) / float64(b) }
	s.t.Logf("soak: change objects after one period (%v to %v): %d, %d KiB; the last period's largest: %d (%.2fx), %d KiB (%.2fx); its median bytes %d KiB (%.2fx)",
		soakChangesWithin, after, base.objects, base.bytes>>10,
		top.objects, ratio(top.objects, base.objects), top.bytes>>10, ratio(top.bytes, base.bytes), level>>10, ratio(level, base.bytes))
	if ratio(top.objects, base.objects) > soakLevelTolerance {
		s.fail.Errorf("change objects do not level off: %d in the last period, %d after one period (over %.2fx)", top.objects, base.objects, soakLevelTolerance)
	}
	if ratio(level, base.bytes) > soakLevelTolerance {
		s.fail.Errorf("change bytes do not level off: a median of %d in the last period, %d after one period (over %.2fx)", level, base.bytes, soakLevelTolerance)
	}
	if ratio(top.bytes, base.bytes) > soakSwingTolerance {
		s.fail.Errorf("change bytes swing too high: %d at most in the last period, %d after one period (over %.2fx)", top.bytes, base.bytes, soakSwingTolerance)
	}
}

// diagnose logs what a failed soak needs: each agent's stderr tail, the
// windows and the samples.
func (s *soak) diagnose() {
	for _, a := range s.all {
		out := a.stderr.String()
		if len(out) > 12<<10 {
			out = "…" + out[len(out)-12<<10:]
		}
		var ms []string
		for k, v := range a.values() {
			if strings.HasPrefix(k, "lifeboat_capture_") || strings.HasPrefix(k, "lifeboat_leader") || strings.HasPrefix(k, "lifeboat_job_runs_total") {
				ms = append(ms, fmt.Sprintf("%s %v", k, v))
			}
		}
		slices.Sort(ms)
		s.t.Logf("agent %d (exited: %v) last metrics:\n%s\nstderr tail:\n%s", a.n, isClosed(a.exited), strings.Join(ms, "\n"), out)
	}
	code, out, errOut := s.lb.runCode(s.t, "list", "-o", "json")
	s.t.Logf("lifeboat list -o json: exit %d\n%s\n%s", code, out, errOut)
	s.mu.Lock()
	s.t.Logf("samples: %+v", s.samples)
	s.mu.Unlock()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// kubeWriter writes like kube-apiserver: objects under
// /registry/<resource>/<namespace>/<name> created, updated in
// transactions guarded by their mod revision and deleted; Events on
// leases of a few seconds that expire or are revoked; node leases
// renewed. It never compacts.
type kubeWriter struct {
	cli     *clientv3.Client
	rng     *rand.Rand
	ops     atomic.Int64
	errs    atomic.Int64
	lastErr atomic.Value
}

func (w *kubeWriter) run(ctx context.Context) {
	resources := []string{"configmaps", "secrets", "pods", "deployments", "services"}
	var leases []clientv3.LeaseID
	var leaseAt time.Time
	// A steady rate: requests are due at soakWriteRate from the start and
	// a slow one is caught up after (a loaded machine slows requests, not
	// the rate), so that the store's figures compare equal work.
	start := time.Now()
	for seq := 0; ; seq++ {
		due := start.Add(time.Duration(seq) * time.Second / soakWriteRate)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(due)):
		}
		op, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		key := fmt.Sprintf("/registry/%s/ns%d/obj-%d", resources[w.rng.IntN(len(resources))], w.rng.IntN(4), w.rng.IntN(25))
		switch x := w.rng.IntN(100); {
		case x < 50: // create or update, guarded like the apiserver's
			var r *clientv3.GetResponse
			if r, err = w.cli.Get(op, key); err == nil {
				var mod int64
				if len(r.Kvs) > 0 {
					mod = r.Kvs[0].ModRevision
				}
				_, err = w.cli.Txn(op).If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
					Then(clientv3.OpPut(key, w.value(seq))).Else(clientv3.OpGet(key)).Commit()
			}
		case x < 60:
			_, err = w.cli.Delete(op, key)
		case x < 88: // an Event on a short lease, a new lease each second
			if time.Since(leaseAt) > time.Second || len(leases) == 0 {
				var l *clientv3.LeaseGrantResponse
				if l, err = w.cli.Grant(op, int64(3+w.rng.IntN(3))); err == nil {
					leases, leaseAt = append(leases, l.ID), time.Now()
				}
			}
			if err == nil {
				ev := fmt.Sprintf("/registry/events/ns%d/obj-%d.%x", w.rng.IntN(4), w.rng.IntN(25), seq)
				_, err = w.cli.Put(op, ev, w.value(seq), clientv3.WithLease(leases[len(leases)-1]))
			}
		case x < 91: // revoke a lease, its Events with it
			if len(leases) > 1 {
				id := leases[0]
				leases = leases[1:]
				if _, err = w.cli.Revoke(op, id); err != nil && strings.Contains(err.Error(), "lease not found") {
					err = nil // it expired first
				}
			}
		default: // a node's heartbeat
			_, err = w.cli.Put(op, fmt.Sprintf("/registry/leases/kube-node-lease/node-%d", w.rng.IntN(5)), w.value(seq))
		}
		if len(leases) > 10 {
			leases = leases[len(leases)-10:]
		}
		cancel()
		w.ops.Add(1)
		if err != nil && ctx.Err() == nil {
			w.errs.Add(1)
			w.lastErr.Store(err.Error())
		}
	}
}

// value is an object of a few hundred bytes to 2 KiB, partly repetitive
// as protobuf objects are.
func (w *kubeWriter) value(seq int) string {
	return fmt.Sprintf(`k8s\x00{"seq":%d,"uid":"%016x","spec":"%s"}`, seq, w.rng.Uint64(), strings.Repeat(strconv.Itoa(w.rng.IntN(10)), 200+w.rng.IntN(1800)))
}
