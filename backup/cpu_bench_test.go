package backup

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// BenchmarkBackupS3 is the whole backup pipeline as `lifeboat snapshot`
// runs it with S3 and age (issue 24): a real etcd (the binary, so that its
// CPU is not in this process's profile) seeded with Kubernetes-like keys of
// 2–4 KiB, the stream into the spool, verification (bbolt walk, HashKV,
// trailer), zstd and age, the upload to versitygw (another process) with
// its read-back, and the manifest. It reports lifeboat's CPU per backup
// (user+sys of this process, from getrusage), the database size and the
// process's peak RSS. Profile it with
//
//	go test ./backup -run '^$' -bench BackupS3 -benchtime 5x -cpuprofile cpu.out
//
// or, to leave the seeding out of the profile, LIFEBOAT_BENCH_CPUPROFILE=cpu.out
// (the backups only). LIFEBOAT_BENCH_KEYS sets the number of keys (default 20000, ~80 MiB;
// 80000 makes the issue's ~315 MiB database). LIFEBOAT_BENCH_SIGNED=1 signs
// the manifests and checks the store's (issue 28's cost).
func BenchmarkBackupS3(b *testing.B) {
	keys := 20000
	if s := os.Getenv("LIFEBOAT_BENCH_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("LIFEBOAT_BENCH_KEYS: %v", err)
		}
		keys = n
	}
	p := etcdtest.StartBinary(b, etcdtest.NeedBinary(b, "ETCD_BIN", "etcd"))
	cli := p.Client(b)
	if _, err := seed.Kubernetes(b.Context(), cli, seed.Options{Objects: keys, MinValue: 2048, MaxValue: 4096, Compact: true, Seed: 42, Concurrency: 8}); err != nil {
		b.Fatalf("seed: %v", err)
	}
	st, _ := jobtest.NewS3Store(b, s3test.Start(b), false)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	job := Job{
		Etcd:     snapshot.Config{Endpoints: []string{p.ClientURL}, DialTimeout: 5 * time.Second},
		SpoolDir: filepath.Join(b.TempDir(), "spool"),
		Backups:  &repository.Repo{Store: st, Cluster: jobtest.Cluster},
		Encoding: repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}},
		Version:  "bench",
	}
	if os.Getenv("LIFEBOAT_BENCH_SIGNED") != "" {
		// Signed and checked (issue 28): the manifest is signed, the
		// store's manifests are checked when the lineage is claimed.
		key, err := signing.Generate()
		if err != nil {
			b.Fatal(err)
		}
		job.Backups.Signer, job.Backups.Trust = key, &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
	}
	lg := slog.New(slog.DiscardHandler)
	jobtest.ClearHWM()
	stopProfile := profileLoop(b)
	cpu0 := cpuTime()
	var dbSize int64
	for b.Loop() {
		m, err := Run(b.Context(), job, lg)
		if err != nil {
			b.Fatalf("Run: %v", err)
		}
		dbSize = m.DBSize
		// One backup per revision and second: write a key for the next.
		b.StopTimer()
		if _, err := cli.Put(b.Context(), "/bench/next", strconv.Itoa(b.N)); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		b.StartTimer()
	}
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	stopProfile()
	b.ReportMetric(float64(dbSize)/(1<<20), "db-MiB")
	if hwm, err := jobtest.VmHWM(); err == nil {
		b.ReportMetric(float64(hwm)/(1<<20), "VmHWM-MiB")
	}
}

// cpuTime is this process's user+sys CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profileLoop starts a CPU profile into $LIFEBOAT_BENCH_CPUPROFILE when it
// is set; the function it returns stops it.
func profileLoop(b *testing.B) func() {
	path := os.Getenv("LIFEBOAT_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatalf("LIFEBOAT_BENCH_CPUPROFILE (not with -cpuprofile): %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}
