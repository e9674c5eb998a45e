package drill_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	lsnap "github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// benchFixture is one backup of a moderately sized Kubernetes-like
// database (LIFEBOAT_BENCH_OBJECTS objects, default 20000), shared by the
// benchmarks so that both work on the same snapshot.
var benchFixture struct {
	once    sync.Once
	err     error
	dir     string
	backups *repository.Repo
	m       *repository.Manifest
	raw     string // the fetched raw snapshot file
}

func closeBenchFixture() {
	if benchFixture.dir != "" {
		os.RemoveAll(benchFixture.dir)
	}
}

func benchBackup(b *testing.B) (*repository.Repo, *repository.Manifest, string) {
	b.Helper()
	f := &benchFixture
	f.once.Do(func() {
		objects := 20000
		if v, err := strconv.Atoi(os.Getenv("LIFEBOAT_BENCH_OBJECTS")); err == nil && v > 0 {
			objects = v
		}
		f.err = func() error {
			ctx := context.Background()
			dir, err := os.MkdirTemp("", "lifeboat-bench-")
			if err != nil {
				return err
			}
			f.dir = dir
			srv, err := child.StartEtcd(ctx, child.EtcdOptions{DataDir: filepath.Join(dir, "etcd"), QuotaBytes: 8 << 30})
			if err != nil {
				return err
			}
			defer srv.Close()
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return err
			}
			_, err = seed.Kubernetes(ctx, cli, seed.Options{Objects: objects, MinValue: 3000, MaxValue: 5500, Compact: true, Seed: 1})
			cli.Close()
			if err != nil {
				return err
			}
			st, err := uploader.NewDir(filepath.Join(dir, "store"))
			if err != nil {
				return err
			}
			f.backups = &repository.Repo{Store: st, Cluster: "bench"}
			f.m, err = backup.Run(ctx, backup.Job{
				Etcd:     lsnap.Config{Endpoints: []string{srv.ClientURL}, Member: "any"},
				SpoolDir: filepath.Join(dir, "spool"), Backups: f.backups, Encoding: repository.Encoding{Compression: "zstd"},
			}, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			f.raw = filepath.Join(dir, "raw.db")
			_, err = repository.Fetch(ctx, f.backups, f.m, f.raw, repository.FetchOptions{})
			return err
		}()
	})
	if f.err != nil {
		b.Fatalf("bench fixture: %v", f.err)
	}
	return f.backups, f.m, f.raw
}

// BenchmarkDrill is a whole drill of a local zstd backup: fetch, decode,
// restore, verify, boot, checks. Compare with
// BenchmarkBaselineRestoreBootHash on the same snapshot.
func BenchmarkDrill(b *testing.B) {
	backups, m, _ := benchBackup(b)
	scratch := b.TempDir()
	b.SetBytes(m.DBSize)
	phases := map[string]float64{}
	cpu := cpuTime()
	b.ResetTimer()
	for range b.N {
		rep, err := drill.Run(b.Context(), drill.Options{Backups: backups, Manifest: m, ScratchDir: scratch})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range rep.Phases {
			phases[p.Name] += p.Seconds
		}
	}
	b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
	for name, s := range phases {
		b.ReportMetric(s/float64(b.N), name+"-s/op")
	}
	b.ReportMetric(float64(m.DBSize)/(1<<20), "db-MiB")
}

// BenchmarkBaselineRestoreBootHash is what an operator does by hand with
// etcd's tools on the raw snapshot file: `etcdutl snapshot restore`, start
// etcd on the result, HashKV.
func BenchmarkBaselineRestoreBootHash(b *testing.B) {
	_, m, raw := benchBackup(b)
	b.SetBytes(m.DBSize)
	var restoreS, bootS, hashS float64
	cpu := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		dir := filepath.Join(b.TempDir(), fmt.Sprint(i))
		peer, err := child.FreeLoopbackURL()
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: raw, Name: "baseline", OutputDataDir: dir, PeerURLs: []string{peer},
			InitialCluster: "baseline=" + peer, InitialClusterToken: "baseline",
		})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		srv, err := child.StartEtcd(b.Context(), child.EtcdOptions{DataDir: dir, Name: "baseline", PeerURL: peer, Token: "baseline"})
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		h, err := cli.HashKV(b.Context(), srv.ClientURL, m.Revision)
		t3 := time.Now()
		cli.Close()
		srv.Close()
		if err != nil {
			b.Fatal(err)
		}
		if h.Hash != m.HashKV {
			b.Fatalf("hashkv 0x%08x, manifest 0x%08x", h.Hash, m.HashKV)
		}
		restoreS += t1.Sub(t0).Seconds()
		bootS += t2.Sub(t1).Seconds()
		hashS += t3.Sub(t2).Seconds()
		b.StopTimer()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric((cpuTime()-cpu).Seconds()/n, "cpu-s/op")
	b.ReportMetric(restoreS/n, "restore-s/op")
	b.ReportMetric(bootS/n, "boot-s/op")
	b.ReportMetric(hashS/n, "hashkv-s/op")
}

// cpuTime is the process's user and system CPU time so far: a measure
// that the load of a shared machine does not inflate as much as wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDrillS3 is BenchmarkDrill with the backup in a real versitygw.
func BenchmarkDrillS3(b *testing.B) {
	local, m, _ := benchBackup(b)
	srv := s3test.Start(b)
	s3b := restoretest.S3Repo(b, srv)
	s3b.Cluster = local.Cluster
	rc, err := local.Store.Get(b.Context(), m.Object)
	if err != nil {
		b.Fatal(err)
	}
	_, err = s3b.Store.Put(b.Context(), m.Object, rc, uploader.PutOptions{})
	rc.Close()
	if err != nil {
		b.Fatal(err)
	}
	if err := s3b.PutManifest(b.Context(), m); err != nil {
		b.Fatal(err)
	}
	scratch := b.TempDir()
	b.SetBytes(m.DBSize)
	phases := map[string]float64{}
	b.ResetTimer()
	for range b.N {
		rep, err := drill.Run(b.Context(), drill.Options{Backups: s3b, Manifest: m, ScratchDir: scratch})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range rep.Phases {
			phases[p.Name] += p.Seconds
		}
	}
	for name, s := range phases {
		b.ReportMetric(s/float64(b.N), name+"-s/op")
	}
}
