package replica_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func dirRepo(t *testing.T) *repository.Repo {
	t.Helper()
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return repository.New(st, jobtest.Cluster)
}

// s3Copy is a copy on a real versitygw behind a fault proxy.
type s3Copy struct {
	srv   *s3test.Server
	proxy *s3test.Proxy
	repo  *repository.Repo
}

func newS3Copy(t *testing.T) s3Copy {
	t.Helper()
	srv := s3test.Start(t)
	srv.Env(t)
	srv.CreateBucket(t, "lifeboat-dr", false)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{
		Bucket: "lifeboat-dr", Prefix: "lifeboat", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true,
		PartSize: uploader.MinS3PartSize, Concurrency: 2, MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond, ReadTimeout: 2 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s3Copy{srv: srv, proxy: proxy, repo: repository.New(st, jobtest.Cluster)}
}

// watching is a real store that, when a backup's manifest is written,
// checks the data object it names is already there and whole, and
// records every Put in order.
type watching struct {
	uploader.Store
	t    *testing.T
	mu   sync.Mutex
	puts []string
}

func (w *watching) Put(ctx context.Context, key string, r io.Reader, o uploader.PutOptions) (uploader.ObjectInfo, error) {
	if strings.Contains(key, "/snapshots/") && strings.HasSuffix(key, ".json") {
		data, err := io.ReadAll(r)
		if err != nil {
			return uploader.ObjectInfo{}, err
		}
		m, err := repository.ParseManifest(data)
		if err != nil {
			w.t.Errorf("manifest %s: %v", key, err)
		} else if size, sum := digest(w.t, w.Store, m.Object); size != m.ObjectSize || sum != m.ObjectSHA256 {
			w.t.Errorf("manifest %s written while its object has %d bytes of %s, manifest says %d of %s", key, size, sum, m.ObjectSize, m.ObjectSHA256)
		}
		r = strings.NewReader(string(data))
	}
	w.mu.Lock()
	w.puts = append(w.puts, key)
	w.mu.Unlock()
	return w.Store.Put(ctx, key, r, o)
}

func digest(t *testing.T, st uploader.Store, key string) (int64, string) {
	t.Helper()
	b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
	n, sum, err := repository.ObjectDigest(t.Context(), b, &repository.Manifest{Object: key})
	if err != nil {
		return -1, err.Error()
	}
	return n, sum
}

// putKit stores a kubeadm kit in b's store and returns its id.
func putKit(t *testing.T, b *repository.Repo) string {
	t.Helper()
	root := t.TempDir()
	kittest.Kubeadm(t, root, t0, t0.AddDate(1, 0, 0))
	k, err := kit.Collect(root, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := kittest.Identity(t, t.TempDir())
	res, err := kit.Repo{Store: b.Store, Cluster: b.Cluster}.Put(t.Context(), k, kit.Encryption{
		Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}, []string{"kubeadm"}, t0, "test")
	if err != nil {
		t.Fatal(err)
	}
	return res.Manifest.ID
}

func ids(t *testing.T, b *repository.Repo) []string {
	t.Helper()
	got, orphans := jobtest.Listed(t, b)
	if len(orphans) != 0 {
		t.Errorf("orphans in %s: %v", b.Store, orphans)
	}
	slices.Sort(got)
	return got
}

func TestCopyCommitsInOrder(t *testing.T) {
	primary := dirRepo(t)
	kitID := putKit(t, primary)
	var want []string
	for i := range 3 {
		m := jobtest.PutObject(t, primary, t0.Add(time.Duration(i)*time.Hour), uploader.PutOptions{})
		m.Kit = kitID
		if err := primary.PutManifest(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		want = append(want, m.ID)
	}
	c := newS3Copy(t)
	w := &watching{Store: c.repo.Store, t: t}
	to := repository.New(w, jobtest.Cluster)
	lg, _ := jobtest.Logger(t)
	dry, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to, DryRun: true}, lg)
	if err != nil || len(dry.Copied) != 4 || len(w.puts) != 0 {
		t.Fatalf("dry run: %v, plans %+v (want 3 backups and the kit once), wrote %v", err, dry.Copied, w.puts)
	}
	res, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to, Now: func() time.Time { return t0.Add(4 * time.Hour) }}, lg)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, c.repo); !cmp.Equal(got, want) {
		t.Errorf("copy holds %v, want %v", got, want)
	}
	// Per backup: data object, (kit object, kit manifest once), manifest.
	var kinds []string
	for _, k := range w.puts {
		switch {
		case strings.Contains(k, "/kits/") && strings.HasSuffix(k, ".json"):
			kinds = append(kinds, "kit manifest")
		case strings.Contains(k, "/kits/"):
			kinds = append(kinds, "kit")
		case strings.HasSuffix(k, ".json"):
			kinds = append(kinds, "manifest")
		default:
			kinds = append(kinds, "object")
		}
	}
	wantKinds := []string{"object", "kit", "kit manifest", "manifest", "object", "manifest", "object", "manifest"}
	if !cmp.Equal(kinds, wantKinds) {
		t.Errorf("puts in order %v, want %v (%v)", kinds, wantKinds, w.puts)
	}
	if res.Bytes == 0 || res.Backups != 3 || res.RecoveryPoint.IsZero() {
		t.Errorf("result %+v", res)
	}
	if _, err := (kit.Repo{Store: c.repo.Store, Cluster: jobtest.Cluster}).Manifest(t.Context(), kitID); err != nil {
		t.Errorf("kit in the copy: %v", err)
	}

	t.Run("again copies nothing", func(t *testing.T) {
		w.puts = nil
		res, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to}, lg)
		if err != nil || len(res.Copied) != 0 || len(w.puts) != 0 {
			t.Errorf("second run: %v, copied %v, puts %v", err, res.Copied, w.puts)
		}
	})
}

func TestCopyStoreKilledMidCopy(t *testing.T) {
	primary := dirRepo(t)
	var want []string
	for i := range 4 {
		want = append(want, jobtest.PutBackup(t, primary, t0.Add(time.Duration(i)*time.Hour), uploader.PutOptions{}, false).ID)
	}
	c := newS3Copy(t)
	// The copy's server dies as the third data object goes up.
	var once sync.Once
	var objects atomic.Int32
	c.proxy.SetFault(func(r *http.Request, _ int) s3test.Fault {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/snapshots/") && !strings.HasSuffix(r.URL.Path, ".json") && objects.Add(1) == 3 {
			once.Do(c.srv.Stop)
			return s3test.Reset(10)
		}
		return s3test.Fault{}
	})
	lg, _ := jobtest.Logger(t)
	job := replica.Job{Name: "dr", From: primary, To: c.repo}
	res, err := replica.Run(t.Context(), job, lg)
	if err == nil {
		t.Fatalf("a copy whose store died succeeded: %+v", res)
	}
	c.proxy.SetFault(nil)
	c.srv.Restart(t)
	// Newest first: the two newest are committed, nothing else is listed.
	got, _ := jobtest.Listed(t, c.repo)
	slices.Sort(got)
	if !cmp.Equal(got, want[2:]) {
		t.Errorf("after the kill the copy lists %v, want exactly the committed %v", got, want[2:])
	}
	res, err = replica.Run(t.Context(), job, lg)
	if err != nil {
		t.Fatalf("catch-up: %v", err)
	}
	if got := ids(t, c.repo); !cmp.Equal(got, want) {
		t.Errorf("after catching up the copy holds %v, want %v", got, want)
	}
	if res.Backups != 4 {
		t.Errorf("result %+v", res)
	}
}

func TestCopyLeftovers(t *testing.T) {
	primary := dirRepo(t)
	good := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	bad := jobtest.PutBackup(t, primary, t0.Add(time.Hour), uploader.PutOptions{}, false)
	to := dirRepo(t)
	put := func(key, data string) {
		if _, err := to.Store.Put(t.Context(), key, strings.NewReader(data), uploader.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := primary.Store.Get(t.Context(), good.Object)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	put(good.Object, string(data))                            // a killed run's, whole
	put(bad.Object, strings.Repeat("x", int(bad.ObjectSize))) // the right size, wrong bytes
	lg, _ := jobtest.Logger(t)
	res, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to}, lg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Adopted != 1 || res.Replaced != 1 {
		t.Errorf("adopted %d, replaced %d, want 1 and 1", res.Adopted, res.Replaced)
	}
	if got := ids(t, to); !cmp.Equal(got, []string{good.ID, bad.ID}) {
		t.Errorf("copy holds %v", got)
	}
	if n, sum := digest(t, to.Store, bad.Object); n != bad.ObjectSize || sum != bad.ObjectSHA256 {
		t.Errorf("the replaced object has %d bytes of %s", n, sum)
	}
}

func TestCopyRefusesDamagedPrimary(t *testing.T) {
	primary := dirRepo(t)
	m := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	// Damage the primary's object behind its manifest (same size).
	path := filepath.Join(primary.Store.(*uploader.Dir).Root(), filepath.FromSlash(m.Object))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[0] ^= 1
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	to := dirRepo(t)
	lg, _ := jobtest.Logger(t)
	_, err = replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to}, lg)
	if !errors.Is(err, replica.ErrMismatch) {
		t.Fatalf("copy of a damaged object: %v, want ErrMismatch", err)
	}
	if keys := jobtest.AllKeys(t, to.Store); len(keys) != 0 {
		t.Errorf("the copy holds %v after refusing", keys)
	}
}

func TestCopyRetention(t *testing.T) {
	primary := dirRepo(t)
	var all []string
	for i := range 6 {
		all = append(all, jobtest.PutBackup(t, primary, t0.Add(time.Duration(i)*time.Hour), uploader.PutOptions{}, false).ID)
	}
	to := dirRepo(t)
	lg, _ := jobtest.Logger(t)
	job := replica.Job{Name: "dr", From: primary, To: to, Policy: &retention.Policy{Last: 2}, Now: func() time.Time { return t0.Add(6 * time.Hour) }, DryRun: true}
	res, err := replica.Run(t.Context(), job, lg)
	if err != nil {
		t.Fatal(err)
	}
	var planned []string
	for _, p := range res.Copied {
		planned = append(planned, p.ID)
	}
	if want := []string{all[5], all[4]}; !cmp.Equal(planned, want) {
		t.Errorf("dry run plans %v, want %v", planned, want)
	}
	if keys := jobtest.AllKeys(t, to.Store); len(keys) != 0 {
		t.Errorf("a dry run wrote %v", keys)
	}
	job.DryRun = false
	if _, err := replica.Run(t.Context(), job, lg); err != nil {
		t.Fatal(err)
	}
	if got, want := ids(t, to), all[4:]; !cmp.Equal(got, want) {
		t.Errorf("copy holds %v, want %v", got, want)
	}
}

// TestCopyRetentionLevelsOff: over 90 days in compressed time, with a
// backup every 6 hours, the primary keeping 7 days and the copy 30 days
// and 3 months, each pruned by its own policy: the copy holds what its
// own policy keeps (more than the primary), both level off, and nothing
// the copy's policy would not keep is ever copied again.
func TestCopyRetentionLevelsOff(t *testing.T) {
	primary, to := dirRepo(t), dirRepo(t)
	lg, _ := jobtest.Logger(t)
	pPolicy := retention.Policy{Last: 2, Daily: 7}
	cPolicy := retention.Policy{Last: 2, Daily: 30, Monthly: 3}
	var sizes [][2]int
	copiedTotal := 0
	for step := range 90 * 4 {
		now := t0.Add(time.Duration(step) * 6 * time.Hour)
		jobtest.PutBackup(t, primary, now, uploader.PutOptions{}, false)
		clock := func() time.Time { return now.Add(time.Minute) }
		if _, err := prune.Run(t.Context(), prune.Job{Backups: primary, Policy: pPolicy, OrphanGrace: time.Hour, Now: clock}, lg); err != nil {
			t.Fatalf("prune the primary at %s: %v", now, err)
		}
		res, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to, Policy: &cPolicy, Now: clock}, lg)
		if err != nil {
			t.Fatalf("copy at %s: %v", now, err)
		}
		copiedTotal += len(res.Copied)
		if _, err := prune.Run(t.Context(), prune.Job{Backups: to, Policy: cPolicy, OrphanGrace: time.Hour, Now: clock}, lg); err != nil {
			t.Fatalf("prune the copy at %s: %v", now, err)
		}
		if step%40 == 39 {
			sizes = append(sizes, [2]int{len(ids(t, primary)), len(ids(t, to))})
		}
	}
	if copiedTotal != 90*4 {
		t.Errorf("%d backups copied over 360 backups taken: each once, no more", copiedTotal)
	}
	last := sizes[len(sizes)-1]
	if last[0] > 9 || last[1] < 30 || last[1] > 2+30+3 {
		t.Errorf("in the end the primary holds %d (keep-last 2, keep-daily 7) and the copy %d (keep-last 2, keep-daily 30, keep-monthly 3)", last[0], last[1])
	}
	for _, s := range sizes[3:] {
		if s != last && (s[0] != last[0] || s[1] < last[1]-1 || s[1] > last[1]+1) {
			t.Errorf("sizes every 10 days %v: not levelled off", sizes)
			break
		}
	}
}

// TestCopyRepairsMissingObject: a committed backup in the copy whose data
// object is gone is copied again from the primary; one of the wrong size
// is left (verify reports it).
func TestCopyRepairsMissingObject(t *testing.T) {
	primary, to := dirRepo(t), dirRepo(t)
	gone := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	lg, _ := jobtest.Logger(t)
	job := replica.Job{Name: "dr", From: primary, To: to}
	if _, err := replica.Run(t.Context(), job, lg); err != nil {
		t.Fatal(err)
	}
	if err := to.Store.Delete(t.Context(), gone.Object); err != nil {
		t.Fatal(err)
	}
	res, err := replica.Run(t.Context(), job, lg)
	if err != nil || len(res.Copied) != 1 {
		t.Fatalf("repair: %v, copied %v", err, res.Copied)
	}
	if n, sum := digest(t, to.Store, gone.Object); n != gone.ObjectSize || sum != gone.ObjectSHA256 {
		t.Errorf("repaired object has %d bytes of %s", n, sum)
	}
	if res.Backups != 1 {
		t.Errorf("the copy holds %d intact backups after the repair", res.Backups)
	}
}
