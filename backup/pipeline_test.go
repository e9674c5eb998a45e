package backup

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// fillCluster writes about mib MiB of values.
func fillCluster(t *testing.T, c *etcdtest.Cluster, mib int) {
	t.Helper()
	cli := c.Client(t)
	val := strings.Repeat("v", 64<<10)
	for i := range mib * 16 {
		if _, err := cli.Put(t.Context(), fmt.Sprintf("/registry/configmaps/default/cm-%04d", i), val); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSnapshotMemberDiesMidStream (issue 11, item 22): the member streaming
// the snapshot breaks off half way. The backup is retried from scratch from
// the next healthy member and succeeds; the log names the member that
// failed. When every member breaks off, the error names the stream, not the
// store, and nothing is stored.
func TestSnapshotMemberDiesMidStream(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	fillCluster(t, c, 6)

	newJob := func(t *testing.T, endpoints []string) Job {
		st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		return Job{
			// "any": endpoint order, so the first (cut) endpoint streams first.
			Etcd:     snapshot.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Member: snapshot.MemberAny},
			SpoolDir: filepath.Join(t.TempDir(), "spool"),
			Backups:  &repository.Repo{Store: st, Cluster: jobtest.Cluster},
			Encoding: repository.Encoding{Compression: "zstd"},
			Version:  "test",
		}
	}

	t.Run("one member fails", func(t *testing.T) {
		cut := etcdtest.NewProxy(t, c.Members[0].ClientURL, etcdtest.ProxyOptions{CutAfter: 1 << 20})
		job := newJob(t, []string{cut.URL, c.Members[1].ClientURL, c.Members[2].ClientURL})
		lg, logs := jobtest.Logger(t)
		m, err := Run(t.Context(), job, lg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if cut.Cuts() == 0 {
			t.Fatal("the proxy never cut a stream: the database is too small for the test")
		}
		if m.Endpoint == cut.URL {
			t.Errorf("manifest says the backup came from the member that failed (%s)", m.Endpoint)
		}
		out := logs.String()
		for _, want := range []string{"retrying the backup from the next member", cut.URL, "member=m0"} {
			if !strings.Contains(out, want) {
				t.Errorf("log does not mention %q", want)
			}
		}
		if got := jobtest.Manifests(t, job.Backups); len(got) != 1 || got[0] != m.ID {
			t.Errorf("manifests = %v, want only %s", got, m.ID)
		}
		if keys := jobtest.AllKeys(t, job.Backups.Store); len(keys) != 2 {
			t.Errorf("store holds %v, want the object and the manifest of %s only", keys, m.ID)
		}
		if left := jobtest.DirEntries(t, job.SpoolDir); len(left) != 0 {
			t.Errorf("spool dir not empty: %v", left)
		}
	})

	t.Run("every member fails", func(t *testing.T) {
		var eps []string
		for _, mem := range c.Members {
			eps = append(eps, etcdtest.NewProxy(t, mem.ClientURL, etcdtest.ProxyOptions{CutAfter: 1 << 20}).URL)
		}
		job := newJob(t, eps)
		lg, _ := jobtest.Logger(t)
		_, err := Run(t.Context(), job, lg)
		if err == nil {
			t.Fatal("Run succeeded although every stream was cut")
		}
		t.Logf("error: %v", err)
		msg := err.Error()
		if strings.Contains(msg, "store stopped reading") || strings.Contains(msg, "store backup") {
			t.Errorf("error blames the store: %v", err)
		}
		for _, want := range append([]string{"snapshot stream from"}, eps...) {
			if !strings.Contains(msg, want) {
				t.Errorf("error does not name %q: %v", want, err)
			}
		}
		if keys := jobtest.AllKeys(t, job.Backups.Store); len(keys) != 0 {
			t.Errorf("store holds %v after a failed backup", keys)
		}
		if left := jobtest.DirEntries(t, job.SpoolDir); len(left) != 0 {
			t.Errorf("spool dir not empty: %v", left)
		}
	})
}

// TestSnapshotEncoderFeedCorrupted (issue 11, item 3): a byte flipped
// between the spool file and the encoder (what a bug in the tail, or bad
// memory, would do) fails the backup before the commit: the verified
// bytes are not the stored bytes. Nothing is stored, the upload is
// aborted.
func TestSnapshotEncoderFeedCorrupted(t *testing.T) {
	const flipAt = 100_000
	var flipped atomic.Int32
	feedHook = func(off int64, p []byte) {
		if off <= flipAt && flipAt < off+int64(len(p)) {
			p[flipAt-off] ^= 0x20
			flipped.Add(1)
		}
	}
	t.Cleanup(func() { feedHook = nil })
	srv := s3test.Start(t)
	for _, ts := range []struct {
		name string
		open func(t *testing.T) (uploader.Store, func() []string)
	}{
		{"dir", func(t *testing.T) (uploader.Store, func() []string) {
			d, err := uploader.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return d, func() []string { return nil }
		}},
		{"s3", func(t *testing.T) (uploader.Store, func() []string) {
			st, bucket := jobtest.NewS3Store(t, srv, false)
			client := srv.Client(t)
			return st, func() []string {
				out, err := client.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
				if err != nil {
					t.Fatalf("ListMultipartUploads: %v", err)
				}
				var keys []string
				for _, u := range out.Uploads {
					keys = append(keys, aws.ToString(u.Key))
				}
				return keys
			}
		}},
	} {
		t.Run(ts.name, func(t *testing.T) {
			st, uploads := ts.open(t)
			f := jobtest.NewFixture(t, st, 200)
			job := Job{
				Etcd: f.EtcdConfig(), SpoolDir: f.Spool, Backups: f.Backups,
				Encoding: repository.Encoding{Compression: "zstd"}, Version: "test",
			}
			lg, _ := jobtest.Logger(t)
			flipped.Store(0)
			m, err := Run(t.Context(), job, lg)
			if flipped.Load() != 1 {
				t.Fatalf("the hook flipped %d bytes, want 1", flipped.Load())
			}
			if err == nil {
				t.Fatalf("Run committed %s although the encoder was fed a flipped byte", m.ID)
			}
			t.Logf("error: %v", err)
			if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "crc32c") {
				t.Errorf("error = %v, want ErrVerify naming the checksums", err)
			}
			if keys := jobtest.AllKeys(t, f.Backups.Store); len(keys) != 0 {
				t.Errorf("store holds %v", keys)
			}
			if left := uploads(); len(left) != 0 {
				t.Errorf("multipart uploads left: %v", left)
			}
			if left := jobtest.DirEntries(t, f.Spool); len(left) != 0 {
				t.Errorf("spool dir not empty: %v", left)
			}
		})
	}
}

// TestSnapshotDialsEachMemberOnce (issue 12, move 3): one backup of a
// 3-member cluster with user/password auth, with TLS client certificates
// and without, dials each member at most once (one connection, so one TLS
// handshake) and logs in once: a counting proxy stands in front of each
// member, and etcd's own gRPC server metrics count the Authenticate calls.
func TestSnapshotDialsEachMemberOnce(t *testing.T) {
	for _, tls := range []bool{true, false} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) { testSnapshotDialsEachMemberOnce(t, tls) })
	}
}

func testSnapshotDialsEachMemberOnce(t *testing.T, tls bool) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, TLS: tls, Auth: true})
	fillCluster(t, c, 1)
	var (
		proxies []*etcdtest.Proxy
		eps     []string
	)
	for _, m := range c.Members {
		p := etcdtest.NewProxy(t, m.ClientURL, etcdtest.ProxyOptions{})
		proxies = append(proxies, p)
		eps = append(eps, p.URL)
	}
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	job := Job{
		Etcd: snapshot.Config{Endpoints: eps, CACert: c.CAFile, Cert: c.CertFile, Key: c.KeyFile,
			User: c.User, Password: snapshot.Secret(c.Password)},
		SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Backups:  &repository.Repo{Store: st, Cluster: jobtest.Cluster},
		Encoding: repository.Encoding{Compression: "zstd"},
		Version:  "test",
	}
	authBefore := etcdtest.Authentications(t)
	lg, _ := jobtest.Logger(t)
	m, err := Run(t.Context(), job, lg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m.HashKVEndpoint == "" || m.HashKVEndpoint == m.Endpoint {
		t.Errorf("live HashKV asked of %q, want another member than the snapshot's %s", m.HashKVEndpoint, m.Endpoint)
	}
	auths := etcdtest.Authentications(t) - authBefore
	var counts []int
	for _, p := range proxies {
		counts = append(counts, p.Accepted())
	}
	t.Logf("connections per member %v, Authenticate calls %d", counts, auths)
	total := 0
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		t.Fatal("the proxies counted no connection: the backup went around them or the counting is broken")
	}
	for i, n := range counts {
		if n > 1 {
			t.Errorf("member %s was dialed %d times in one backup, want at most once", c.Members[i].Name, n)
		}
	}
	if auths != 1 {
		t.Errorf("%d Authenticate calls in one backup, want 1", auths)
	}
}
