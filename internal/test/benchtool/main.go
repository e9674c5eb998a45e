// Command benchtool supports `make bench`: it seeds a real etcd with
// Kubernetes-like data and runs a steady write load while measuring its
// latency, so backups can be compared by their effect on the cluster.
//
//	benchtool seed --endpoints URL --objects N
//	benchtool load --endpoints URL --rate 200 --duration 30s [--slow 30ms]
//	benchtool stream --endpoints URL
//	benchtool seqpipe --endpoints URL --dir D --bucket B --s3-endpoint URL
//	benchtool kube --endpoints URL --rate 500 --duration 60s [--metrics URL] [--store s3://B/P --s3-endpoint URL]
//	benchtool scrape --metrics URL
//	benchtool capture --endpoints URL --store s3://B/P --s3-endpoint URL [--recipient age1…] [--interval 5s] [--listen ADDR]
//
// seqpipe is the naive baseline for S3: save the snapshot to disk (as
// etcdctl does), then compress it to a file, then upload that file. kube
// writes Kubernetes-like changes at a rate and measures the capture's
// recovery point (issue 13): the agent's lifeboat_capture_lag_seconds,
// scraped, and the time from a write's response to the first progress
// marker in the store through its revision. scrape prints the agent's
// lifeboat_capture_* gauges once. capture runs capture.Run in process
// with the agent's gauges (a check of the harness; the recorded figures
// come from `lifeboat agent --capture`). load --slow prints each put slower
// than the threshold to stderr (start time and latency), to see when during
// a backup the stalls happen. stream reads one member's snapshot stream and
// discards it: the least any online backup of that member costs the
// cluster, the floor for the p99 figure of a backup.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtool seed|load|stream|seqpipe|kube|scrape|capture [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "seed":
		err = runSeed(ctx, os.Args[2:])
	case "load":
		err = runLoad(ctx, os.Args[2:])
	case "stream":
		err = runStream(ctx, os.Args[2:])
	case "seqpipe":
		err = runSeqPipe(ctx, os.Args[2:])
	case "kube":
		err = runKube(ctx, os.Args[2:])
	case "scrape":
		err = runScrape(ctx, os.Args[2:])
	case "capture":
		err = runCapture(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

func connect(ep string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
}

func runSeed(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("seed", flag.ExitOnError)
	ep := fs.String("endpoints", "http://127.0.0.1:2379", "etcd endpoint")
	objects := fs.Int("objects", 250000, "objects")
	minV := fs.Int("min-value", 3000, "min value bytes")
	maxV := fs.Int("max-value", 5500, "max value bytes")
	fs.Parse(args)
	cli, err := connect(*ep)
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	res, err := seed.Kubernetes(ctx, cli, seed.Options{Objects: *objects, MinValue: *minV, MaxValue: *maxV, Compact: true, Seed: 42, Concurrency: 8})
	if err != nil {
		return err
	}
	fmt.Printf("seeded %d keys, %d value bytes, revision %d, compacted at %d, in %s\n", res.Keys, res.ValueBytes, res.Revision, res.CompactRevision, time.Since(start).Round(time.Second))
	return nil
}

// loadResult is what load prints: latency of puts at a steady rate.
type loadResult struct {
	Puts   int     `json:"puts"`
	Errors int     `json:"errors"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func runLoad(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	ep := fs.String("endpoints", "http://127.0.0.1:2379", "etcd endpoint")
	rate := fs.Int("rate", 200, "puts per second")
	dur := fs.Duration("duration", 10*time.Second, "how long (or until SIGTERM)")
	slow := fs.Duration("slow", 0, "print each put slower than this to stderr (0: none)")
	fs.Parse(args)
	cli, err := connect(*ep)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	lat := make(chan time.Duration, 1<<16)
	errs := 0
	n := 0
	value := make([]byte, 1024)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	sem := make(chan struct{}, 64)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		n++
		key := fmt.Sprintf("/registry/leases/kube-system/load-%d", n%500)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			t := time.Now()
			pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cli.Put(pctx, key, string(value))
			pcancel()
			if err != nil {
				lat <- -1
				return
			}
			d := time.Since(t)
			if *slow > 0 && d > *slow {
				fmt.Fprintf(os.Stderr, "slow put %s %.1fms\n", t.UTC().Format(time.RFC3339Nano), float64(d.Microseconds())/1000)
			}
			lat <- d
		}()
	}
	for i := 0; i < cap(sem); i++ {
		sem <- struct{}{}
	}
	close(lat)
	var ds []time.Duration
	for d := range lat {
		if d < 0 {
			errs++
			continue
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	pct := func(p float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000
	}
	return json.NewEncoder(os.Stdout).Encode(loadResult{Puts: len(ds), Errors: errs, P50Ms: pct(0.5), P99Ms: pct(0.99), MaxMs: pct(1)})
}

// runStream reads the snapshot stream of one member to the end and
// discards it: no file, no check, no upload.
func runStream(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("stream", flag.ExitOnError)
	ep := fs.String("endpoints", "http://127.0.0.1:2379", "etcd endpoint")
	fs.Parse(args)
	cli, err := connect(*ep)
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "stream %s: %d bytes %s..%s\n", *ep, n, start.UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
	return nil
}

func runSeqPipe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("seqpipe", flag.ExitOnError)
	ep := fs.String("endpoints", "http://127.0.0.1:2379", "etcd endpoint")
	dir := fs.String("dir", os.TempDir(), "work directory")
	bucket := fs.String("bucket", "", "bucket")
	endpoint := fs.String("s3-endpoint", "", "S3 endpoint")
	fs.Parse(args)
	raw := filepath.Join(*dir, "seqpipe.db")
	zst := raw + ".zst"
	defer os.Remove(raw)
	defer os.Remove(zst)
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{*ep}, DialTimeout: 5 * time.Second}, raw); err != nil {
		return err
	}
	in, err := os.Open(raw)
	if err != nil {
		return err
	}
	out, err := os.Create(zst)
	if err != nil {
		return err
	}
	zw, err := zstd.NewWriter(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(zw, in); err != nil {
		return err
	}
	in.Close()
	if err := zw.Close(); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	out.Close()
	st, err := uploader.NewS3(ctx, uploader.S3Config{Bucket: *bucket, Prefix: "seqpipe", Endpoint: *endpoint, PathStyle: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	f, err := os.Open(zst)
	if err != nil {
		return err
	}
	defer f.Close()
	// Put never replaces an object: remove the previous run's.
	if err := st.Delete(ctx, "seqpipe.db.zst"); err != nil {
		return err
	}
	_, err = st.Put(ctx, "seqpipe.db.zst", f, uploader.PutOptions{})
	return err
}
