package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// dist is a distribution of durations or sizes, in the unit of its fields.
type dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func distOf(xs []float64) dist {
	if len(xs) == 0 {
		return dist{}
	}
	sort.Float64s(xs)
	at := func(p float64) float64 { return xs[int(p*float64(len(xs)-1))] }
	return dist{N: len(xs), P50: at(0.5), P99: at(0.99), Max: xs[len(xs)-1]}
}

// kubeResult is what kube prints.
type kubeResult struct {
	Writes     int     `json:"writes"`
	Deletes    int     `json:"deletes"`
	Errors     int     `json:"errors"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"writes_per_s"`
	ValueBytes int64   `json:"value_bytes"`
	FirstRev   int64   `json:"first_revision"`
	LastRev    int64   `json:"last_revision"`
	// LatencyMs is the latency of the writes.
	LatencyMs dist `json:"latency_ms"`
	// LagMetric is lifeboat_capture_lag_seconds as scraped every
	// --scrape during the load (seconds).
	LagMetric *dist `json:"lag_metric_s,omitempty"`
	// LagMetricAfter is the same without the scrapes of the first
	// --warmup of the load (a new generation's lag counts from its anchor
	// snapshot until the first segment).
	LagMetricAfter *dist `json:"lag_metric_after_warmup_s,omitempty"`
	// LagDurable is, for the sampled writes, the time from the write's
	// response to the first listing of the store's progress markers that
	// shows a marker through its revision (seconds; an upper bound by up
	// to one poll interval plus one listing).
	LagDurable *dist `json:"lag_durable_s,omitempty"`
	// Unresolved counts sampled writes no marker covered before the end.
	Unresolved int `json:"lag_durable_unresolved,omitempty"`
	// CaptureGauges is the highest value scraped of each other
	// lifeboat_capture_* gauge.
	CaptureGauges map[string]float64 `json:"capture_max,omitempty"`
}

// runKube writes Kubernetes-like changes (internal/seed.Changes: updates
// of the objects of a seeded database, 1–4 KiB values, 5 % deletes) at a
// steady rate, one put or delete per revision, and optionally measures
// the capture's recovery point: it scrapes the agent's metrics and polls
// the store's progress markers.
func runKube(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kube", flag.ExitOnError)
	ep := fs.String("endpoints", "http://127.0.0.1:2379", "etcd endpoint")
	rate := fs.Int("rate", 500, "writes per second (0: as fast as --inflight allows)")
	dur := fs.Duration("duration", 60*time.Second, "how long (or until SIGTERM)")
	count := fs.Int("count", 0, "stop after this many writes (0: --duration only)")
	objects := fs.Int("objects", 180000, "objects of the seeded database the writes update")
	minV := fs.Int("min-value", 1024, "min value bytes")
	maxV := fs.Int("max-value", 4096, "max value bytes")
	inflight := fs.Int("inflight", 128, "writes in flight at most")
	metrics := fs.String("metrics", "", "agent metrics URL to scrape (e.g. http://127.0.0.1:9469/metrics)")
	scrape := fs.Duration("scrape", 250*time.Millisecond, "scrape and poll interval")
	store := fs.String("store", "", "s3://bucket/prefix of the capture: poll its progress markers")
	s3ep := fs.String("s3-endpoint", "", "S3 endpoint of --store")
	cluster := fs.String("cluster", "default", "cluster name in --store")
	sample := fs.Float64("sample", 0.1, "share of writes whose durability is timed")
	drain := fs.Duration("drain", 30*time.Second, "after the load, how long to wait for markers to cover the sampled writes")
	warmup := fs.Duration("warmup", 10*time.Second, "the lag is also reported without the scrapes of this first part of the load")
	fs.Parse(args)

	changes, err := seed.NewChanges(seed.Options{Objects: *objects, MinValue: *minV, MaxValue: *maxV, Seed: 42})
	if err != nil {
		return err
	}
	cli, err := connect(*ep)
	if err != nil {
		return err
	}
	defer cli.Close()

	var poll *markerPoll
	if *store != "" {
		poll, err = newMarkerPoll(ctx, *store, *s3ep, *cluster)
		if err != nil {
			return err
		}
	}
	var scr *scraper
	if *metrics != "" {
		scr = &scraper{url: *metrics, max: map[string]float64{}, start: time.Now(), warmup: *warmup}
	}
	// The scrapes and polls run from before the load until the end of
	// the drain.
	bgctx, bgstop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	scrapingLoad := make(chan struct{}) // closed when the load ends
	if scr != nil {
		bg.Add(1)
		go func() { defer bg.Done(); scr.run(bgctx, *scrape, scrapingLoad) }()
	}
	if poll != nil {
		bg.Add(1)
		go func() { defer bg.Done(); poll.run(bgctx, *scrape) }()
	}

	lctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	var (
		mu       sync.Mutex
		lats     []float64
		errs     int
		first    int64 = math.MaxInt64
		last     int64
		deletes  int
		valBytes int64
	)
	pick := rand.New(rand.NewPCG(1, 2))
	sem := make(chan struct{}, *inflight)
	start := time.Now()
	n := 0
loop:
	for *count == 0 || n < *count {
		if *rate > 0 {
			due := start.Add(time.Duration(n) * time.Second / time.Duration(*rate))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-lctx.Done():
					t.Stop()
					break loop
				case <-t.C:
				}
			}
		}
		select {
		case <-lctx.Done():
			break loop
		case sem <- struct{}{}:
		}
		key, v, del := changes.Next()
		value := string(v)
		sampled := poll != nil && pick.Float64() < *sample
		n++
		if del {
			deletes++
		}
		valBytes += int64(len(value))
		go func() {
			defer func() { <-sem }()
			t := time.Now()
			pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
			var rev int64
			var err error
			if del {
				var r *clientv3.DeleteResponse
				if r, err = cli.Delete(pctx, key); err == nil {
					rev = r.Header.Revision
				}
			} else {
				var r *clientv3.PutResponse
				if r, err = cli.Put(pctx, key, value); err == nil {
					rev = r.Header.Revision
				}
			}
			pcancel()
			done := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				return
			}
			lats = append(lats, float64(done.Sub(t).Microseconds())/1000)
			first, last = min(first, rev), max(last, rev)
			if sampled {
				poll.wait(rev, done)
			}
		}()
	}
	for i := 0; i < cap(sem); i++ {
		sem <- struct{}{}
	}
	elapsed := time.Since(start).Seconds()
	close(scrapingLoad)
	if poll != nil {
		poll.drain(ctx, *drain)
	}
	bgstop()
	bg.Wait()

	res := kubeResult{Writes: len(lats), Deletes: deletes, Errors: errs, Seconds: elapsed,
		Rate: float64(len(lats)) / elapsed, ValueBytes: valBytes, LatencyMs: distOf(lats), LastRev: last}
	if first != math.MaxInt64 {
		res.FirstRev = first
	}
	if scr != nil {
		d := distOf(scr.lags)
		res.LagMetric = &d
		a := distOf(scr.after)
		res.LagMetricAfter = &a
		res.CaptureGauges = scr.max
	}
	if poll != nil {
		d, unresolved := poll.result()
		res.LagDurable = &d
		res.Unresolved = unresolved
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// scraper reads the agent's lifeboat_capture_* gauges.
type scraper struct {
	url  string
	lags []float64
	// after holds the lags scraped from start+warmup on.
	after  []float64
	start  time.Time
	warmup time.Duration
	max    map[string]float64
}

// run scrapes every interval; lags are kept only until load is closed.
func (s *scraper) run(ctx context.Context, every time.Duration, load <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-load:
			return
		case <-t.C:
		}
		vals, err := scrapeCapture(ctx, s.url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtool: scrape:", err)
			continue
		}
		for name, v := range vals {
			if name == "lifeboat_capture_lag_seconds" {
				if !math.IsNaN(v) {
					s.lags = append(s.lags, v)
					if time.Since(s.start) >= s.warmup {
						s.after = append(s.after, v)
					}
				}
				continue
			}
			if old, ok := s.max[name]; !ok || v > old {
				s.max[name] = v
			}
		}
	}
}

// scrapeCapture returns the unlabelled lifeboat_capture_* samples of the
// Prometheus text at url.
func scrapeCapture(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "lifeboat_capture_") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		out[name] = v
	}
	return out, sc.Err()
}

// markerPoll lists the store's progress markers every interval and times,
// for each sampled write, its response to the first listing that shows a
// marker through its revision. A marker is written only after the
// segments through its revision are stored, so this is an upper bound of
// the write's time to durability, measured from the store alone.
type markerPoll struct {
	repo *repository.Repo

	mu       sync.Mutex
	through  int64
	pending  []pendingWrite
	lags     []float64
	lastPoll time.Time
}

type pendingWrite struct {
	rev int64
	at  time.Time
}

func newMarkerPoll(ctx context.Context, storeURL, endpoint, cluster string) (*markerPoll, error) {
	rest, ok := strings.CutPrefix(storeURL, "s3://")
	if !ok {
		return nil, fmt.Errorf("store %q: only s3:// is polled", storeURL)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	st, err := uploader.NewS3(ctx, uploader.S3Config{Bucket: bucket, Prefix: prefix, Endpoint: endpoint, PathStyle: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	return &markerPoll{repo: repository.New(st, cluster)}, nil
}

// wait registers a write of rev answered at at.
func (p *markerPoll) wait(rev int64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, pendingWrite{rev, at})
}

func (p *markerPoll) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := p.once(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "benchtool: poll markers:", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *markerPoll) once(ctx context.Context) error {
	byGen, _, err := p.repo.ListProgress(ctx)
	if err != nil {
		return err
	}
	seen := time.Now() // after the listing: an upper bound
	var through int64
	for _, ms := range byGen {
		for _, m := range ms {
			through = max(through, m.Through)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.through = max(p.through, through)
	p.lastPoll = seen
	keep := p.pending[:0]
	for _, w := range p.pending {
		if w.rev <= p.through {
			p.lags = append(p.lags, seen.Sub(w.at).Seconds())
		} else {
			keep = append(keep, w)
		}
	}
	p.pending = keep
	return nil
}

// drain waits until every sampled write is covered, at most d.
func (p *markerPoll) drain(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *markerPoll) result() (dist, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return distOf(append([]float64(nil), p.lags...)), len(p.pending)
}

// runScrape prints the lifeboat_capture_* gauges of url once as JSON (for
// scripts waiting for the capture to run).
func runScrape(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scrape", flag.ExitOnError)
	url := fs.String("metrics", "http://127.0.0.1:9469/metrics", "agent metrics URL")
	fs.Parse(args)
	vals, err := scrapeCapture(ctx, *url)
	if err != nil {
		return err
	}
	for k, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			delete(vals, k) // JSON has no NaN
		}
	}
	return json.NewEncoder(os.Stdout).Encode(vals)
}
