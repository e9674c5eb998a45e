package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// inspectBench is one backup in S3 (versitygw) of a database of
// Kubernetes-like objects (internal/seed) plus 10 000 real ConfigMaps
// (protobuf) under /registry/configmaps/bench/.
type inspectBench struct {
	args    []string // store and cluster
	env     map[string]string
	dbBytes int64
	keys    int
}

// benchObjects is the number of seeded objects: 60 000 (about 217 MiB),
// or LIFEBOAT_INSPECT_OBJECTS (300 000 gives about 1 GiB, the size of the
// issue's targets).
func benchObjects(b *testing.B) int {
	if v := os.Getenv("LIFEBOAT_INSPECT_OBJECTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("LIFEBOAT_INSPECT_OBJECTS=%q: want a positive number", v)
		}
		return n
	}
	return 60000
}

func setupInspectBench(b *testing.B) *inspectBench {
	e, err := func() (*inspectBench, error) {
		c := etcdtest.Start(b, etcdtest.Options{Members: 1})
		cli := c.Client(b)
		if _, err := seed.Kubernetes(b.Context(), cli, seed.Options{Objects: benchObjects(b), Seed: 3, Deletes: -1, Overwrites: -1}); err != nil {
			return nil, err
		}
		ops := make([]clientv3.Op, 0, 100)
		for i := range 10000 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Namespace: "bench", UID: "u",
				Labels: map[string]string{"app": "bench"}}, Data: map[string]string{"config.yaml": fmt.Sprintf("replicas: %d\nimage: nginx:1.27\n", i)}}
			ops = append(ops, clientv3.OpPut("/registry/configmaps/bench/"+cm.Name, string(kubeObject(b, cm))))
			if len(ops) == cap(ops) {
				if _, err := cli.Txn(b.Context()).Then(ops...).Commit(); err != nil {
					return nil, err
				}
				ops = ops[:0]
			}
		}
		srv := s3test.Start(b)
		srv.CreateBucket(b, "backups", false)
		dir := b.TempDir()
		none := filepath.Join(dir, "none")
		env := map[string]string{
			"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey,
			"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
			"AWS_PROFILE": "", "AWS_REGION": "", "AWS_ENDPOINT_URL_S3": "", "AWS_ENDPOINT_URL": "",
		}
		for k, v := range env {
			b.Setenv(k, v)
		}
		e := &inspectBench{env: env, args: []string{"--store", "s3://backups/etcd", "--s3-endpoint", srv.Endpoint, "--s3-path-style",
			"--s3-region", srv.Region, "--cluster", "bench", "--log-level", "error", "--spool-dir", filepath.Join(dir, "spool")}}
		var stdout, stderr io.Writer = io.Discard, io.Discard
		if code := run(b.Context(), append([]string{"snapshot", "--endpoints", c.Endpoints()[0]}, e.args...), stdout, stderr); code != 0 {
			return nil, fmt.Errorf("snapshot exit %d", code)
		}
		st, err := openBackups(b.Context(), mustConfig(b, e.args), slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, err
		}
		m, err := st.Resolve(b.Context(), "latest")
		if err != nil {
			return nil, err
		}
		e.dbBytes, e.keys = m.DBSize, m.TotalKeys
		return e, nil
	}()
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func mustConfig(b *testing.B, args []string) *Config {
	cfg := DefaultConfig()
	cfg.Cluster = "bench"
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--store":
			cfg.Store.URL = args[i+1]
		case "--s3-endpoint":
			cfg.Store.S3.Endpoint = args[i+1]
		case "--s3-region":
			cfg.Store.S3.Region = args[i+1]
		}
	}
	cfg.Store.S3.PathStyle = true
	return &cfg
}

func benchRun(b *testing.B, args ...string) {
	b.Helper()
	if code := run(b.Context(), args, io.Discard, io.Discard); code != 0 {
		b.Fatalf("%v: exit %d", args, code)
	}
}

// BenchmarkInspect: get and ls from the cache, the first get of a backup
// from S3 against lifeboat fetch of the same backup, and (with
// LIFEBOAT_BIN) the peak RSS of each as a process of its own.
func BenchmarkInspect(b *testing.B) {
	e := setupInspectBench(b)
	b.Logf("database: %d keys, %.1f MiB", e.keys, float64(e.dbBytes)/(1<<20))
	cache := b.TempDir()
	with := func(extra ...string) []string {
		return append(extra, append([]string{"--cache-dir", cache}, e.args...)...)
	}
	const key = "/registry/configmaps/bench/cm-04242"
	benchRun(b, with("get", "latest", key)...) // fill the cache

	b.Run("get-cached", func(b *testing.B) {
		for b.Loop() {
			benchRun(b, with("get", "latest", key)...)
		}
	})
	b.Run("ls-10000-cached", func(b *testing.B) {
		for b.Loop() {
			benchRun(b, with("ls", "latest", "/registry/configmaps/bench/")...)
		}
	})
	b.Run("first-get-vs-fetch", func(b *testing.B) {
		var get, fetch time.Duration
		i := 0
		for b.Loop() {
			fresh := filepath.Join(b.TempDir(), "cache")
			out := filepath.Join(b.TempDir(), "snap.db")
			timed := func(d *time.Duration, args ...string) {
				t := time.Now()
				benchRun(b, append(args, e.args...)...)
				*d += time.Since(t)
			}
			// Alternated, so that neither always runs second (the page
			// cache, the store's warmth).
			if i%2 == 0 {
				timed(&get, "get", "latest", key, "--cache-dir", fresh)
				timed(&fetch, "fetch", "latest", out)
			} else {
				timed(&fetch, "fetch", "latest", out)
				timed(&get, "get", "latest", key, "--cache-dir", fresh)
			}
			i++
			os.RemoveAll(fresh)
			os.Remove(out)
		}
		b.ReportMetric(float64(get.Milliseconds())/float64(b.N), "first-get-ms")
		b.ReportMetric(float64(fetch.Milliseconds())/float64(b.N), "fetch-ms")
		b.ReportMetric(float64(get)/float64(fetch), "ratio")
	})
	bin := os.Getenv("LIFEBOAT_BIN")
	if bin == "" {
		b.Log("LIFEBOAT_BIN unset: no peak RSS")
		return
	}
	// The peak RSS of a child is measured by /usr/bin/time: a child
	// started from this (large) process inherits its high-water mark in
	// ru_maxrss (Go starts children with vfork).
	timeBin, err := exec.LookPath("/usr/bin/time")
	if err != nil {
		b.Logf("no /usr/bin/time: no peak RSS")
		return
	}
	b.Run("peak-rss", func(b *testing.B) {
		fresh := filepath.Join(b.TempDir(), "cache")
		rss := func(args ...string) float64 {
			cmd := exec.Command(timeBin, append([]string{"-f", "%M", bin}, append(args, e.args...)...)...)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			if err := cmd.Run(); err != nil {
				b.Fatalf("%v: %v\n%s", args, err, errOut.Bytes())
			}
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			kib, err := strconv.ParseFloat(lines[len(lines)-1], 64)
			if err != nil {
				b.Fatalf("%v: /usr/bin/time said %q", args, errOut.String())
			}
			return kib / 1024
		}
		for b.Loop() {
			os.RemoveAll(fresh)
			b.ReportMetric(rss("get", "latest", key, "--cache-dir", fresh), "first-get-MiB")
			b.ReportMetric(rss("get", "latest", key, "--cache-dir", fresh), "cached-get-MiB")
			b.ReportMetric(rss("ls", "latest", "/registry/configmaps/bench/", "--cache-dir", fresh), "cached-ls-MiB")
			out := filepath.Join(b.TempDir(), "snap.db")
			b.ReportMetric(rss("fetch", "latest", out), "fetch-MiB")
			os.Remove(out)
		}
	})
}
