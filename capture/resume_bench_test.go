package capture

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// BenchmarkSevenDayWindow: what an agent's resume (capture continuing
// the live generation: the store's backups, every window, the newest
// marker and the chain head) and `lifeboat list` cost on versitygw with
// a simulated week of capture at 1 s (the target: 2 s each).
// With LIFEBOAT_BIN set it also runs the binary's list.
func BenchmarkSevenDayWindow(b *testing.B) {
	srv := s3test.Start(b)
	st, bucket := jobtest.NewS3Store(b, srv, false)
	repo := repository.New(st, "bench")
	live := jobtest.SevenDaysOfCapture(b, repo, time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC))
	r := &runner{job: Job{Repo: repo, Token: func() (int64, bool) { return 1, true }}, lg: slog.New(slog.DiscardHandler)}
	b.Run("resume", func(b *testing.B) {
		for b.Loop() {
			g, err := r.resume(b.Context())
			if err != nil || g == nil || g.id != live {
				b.Fatalf("resume: %v, %v; want generation %s", g, err, live)
			}
		}
	})
	bin := os.Getenv("LIFEBOAT_BIN")
	if bin == "" {
		return
	}
	b.Run("lifeboat-list", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin, "list", "--store", "s3://"+bucket+"/team", "--cluster", "bench", "--s3-endpoint", srv.Endpoint,
				"--s3-region", srv.Region, "--s3-path-style")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil || !strings.Contains(out.String(), live) {
				b.Fatalf("lifeboat list: %v\n%s", err, out.String())
			}
		}
	})
}
