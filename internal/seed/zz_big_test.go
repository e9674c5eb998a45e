package seed_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/seed"
)

func TestZZBig(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BIG_N"))
	conc, _ := strconv.Atoi(os.Getenv("BIG_C"))
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	start := time.Now()
	res, err := seed.Kubernetes(t.Context(), cli, seed.Options{Objects: n, MinValue: 3072, MaxValue: 5120, Compact: true, Concurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	st, _ := cli.Status(t.Context(), c.Members[0].ClientURL)
	t.Logf("%d keys, %d MiB values, db %d MiB, %v, %.1f MiB/s", res.Keys, res.ValueBytes>>20, st.DbSize>>20, el, float64(res.ValueBytes)/(1<<20)/el.Seconds())
}
