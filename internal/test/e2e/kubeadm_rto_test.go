package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
)

// BenchmarkKubeadmRestore100MB is the recovery time of `lifeboat restore
// --kubeadm` at a 100 MB database (docs/benchmarks.md, "kubeadm restore:
// recovery time"): the node's etcd seeded with ~100 MB of Kubernetes-like
// keys (10 KiB objects of a resource no apiserver serves, so it does not
// decode them) beside namespace shop; a backup; then three times per
// b.N namespace shop deleted and the backup restored, each restore timed
// from the command to a ready apiserver (s-apiserver/restore, the RTO the
// command prints) and to the Deployment's two pods ready again in new
// containers (s-deployment/restore). Run it alone, as root, with 1x (the
// testing package runs a benchmark function once with N=1 before any
// larger N: 3x would bring the node up twice):
//
//	go test -run '^$' -bench BenchmarkKubeadmRestore100MB -benchtime 1x -timeout 40m ./internal/test/e2e
//
// LIFEBOAT_BENCH_KUBEADM_MB sets another size.
func BenchmarkKubeadmRestore100MB(b *testing.B) {
	mb := 100
	if s := os.Getenv("LIFEBOAT_BENCH_KUBEADM_MB"); s != "" {
		if _, err := fmt.Sscan(s, &mb); err != nil {
			b.Fatalf("LIFEBOAT_BENCH_KUBEADM_MB=%q: %v", s, err)
		}
	}
	l := newLifeboat(b)
	n := kubeadmtest.Start(b)
	ctx, cancel := context.WithTimeout(b.Context(), 35*time.Minute)
	defer cancel()
	kubectl := nodeKubectl(ctx, b, n)
	pause := pauseImage(ctx, b, n, kubectl)
	manifest := filepath.Join(b.TempDir(), "shop.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(shopManifest, "PAUSE", pause)), 0o600); err != nil {
		b.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	kubectl("wait", "-n", "shop", "--for=condition=Available", "deployment/web", "--timeout=180s")

	seedStart := time.Now()
	cli := nodeEtcd(b, n)
	const size = 10 << 10
	keys := mb << 20 / size
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			v := make([]byte, size*3/4)
			for i := w; i < keys; i += 8 {
				_, _ = rand.Read(v)
				if _, err := cli.Put(ctx, fmt.Sprintf("/registry/bench.lifeboat.dev/widgets/bench-%d/widget-%06d", i%50, i), base64.StdEncoding.EncodeToString(v)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("seed: %v", err)
	}
	st, err := cli.Status(ctx, "https://"+n.IP+":2379")
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d keys of %d KiB in %.1fs: the database is %.1f MB (%.1f MB in use) at revision %d",
		keys, size>>10, time.Since(seedStart).Seconds(), float64(st.DbSize)/1e6, float64(st.DbSizeInUse)/1e6, st.Header.Revision)

	l.flags = append(l.flags, "--cacert", nodePKI+"etcd/ca.crt", "--cert", nodePKI+"apiserver-etcd-client.crt", "--key", nodePKI+"apiserver-etcd-client.key")
	id, rev := l.snapshot(b, "https://"+n.IP+":2379")
	b.Logf("backup %s at revision %d", id, rev)

	old := webContainers(kubectl)
	var apiserver, deployment float64
	b.ResetTimer()
	restores := b.N * 3 // -benchtime 1x: three restores on one node (the node is brought up once per run of the function)
	for range restores {
		b.StopTimer()
		kubectl("delete", "namespace", "shop", "--timeout=120s") // the mistake: its pods go with it
		b.StartTimer()
		code, _, took := kubeadmRestore(b, l, n, nil, id)
		if code != 0 {
			b.Fatalf("restore: exit %d", code)
		}
		start := time.Now()
		old = append(old, checkShop(b, kubectl, old)...)
		ready := took.Seconds() + time.Since(start).Seconds()
		b.Logf("RTO at %d MB: %.1fs to a ready apiserver, %.1fs to the Deployment available", mb, took.Seconds(), ready)
		apiserver += took.Seconds()
		deployment += ready
	}
	b.StopTimer()
	b.ReportMetric(apiserver/float64(restores), "s-apiserver/restore")
	b.ReportMetric(deployment/float64(restores), "s-deployment/restore")
}
