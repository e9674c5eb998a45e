package scrub_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/scrub"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// store is a directory store with real backups (one encrypted to an old
// identity, two to the current one), captured segments and markers of the
// newest, and a recovery kit, all from a real etcd.
type store struct {
	dir      string
	repo     *repository.Repo
	old, cur *age.X25519Identity
	backups  []*repository.Manifest // oldest first
	segments []string               // keys, oldest first
	kit      *kit.Manifest
}

func newStore(t *testing.T) *store {
	t.Helper()
	ctx := t.Context()
	s := &store{dir: t.TempDir(), old: restoretest.NewIdentity(t), cur: restoretest.NewIdentity(t)}
	s.repo = restoretest.DirRepo(t, s.dir)
	src := restoretest.StartSource(t, 30)
	s.backups = append(s.backups, src.Backup(t, s.repo, restoretest.AgeEncoding(s.old)))
	for range 2 {
		time.Sleep(1100 * time.Millisecond) // backup ids are per second
		s.backups = append(s.backups, src.Backup(t, s.repo, restoretest.AgeEncoding(s.cur)))
	}
	cli := src.C.Client(t)
	c := changetest.Start(t, changetest.Options{Client: cli, Repo: s.repo, Anchor: s.backups[2], Encoding: restoretest.AgeEncoding(s.cur), SegmentRevisions: 2})
	for i := range 6 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/scrub/k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	c.Sync(t)
	segs, _, err := s.repo.ListSegments(ctx, s.backups[2].ID)
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments: %v, %v", segs, err)
	}
	for _, si := range segs {
		s.segments = append(s.segments, si.Object.Key)
	}
	root := t.TempDir()
	kittest.Kubeadm(t, root, time.Now(), time.Now().Add(90*24*time.Hour))
	k, err := kit.Collect(root, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	kr := kit.Repo{Store: s.repo.Store, Cluster: s.repo.Cluster}
	enc := kit.Encryption{Recipients: []age.Recipient{s.cur.Recipient()}, RecipientKeys: []string{s.cur.Recipient().String()}}
	put, err := kr.Put(ctx, k, enc, []string{"kubeadm"}, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	s.kit = put.Manifest
	return s
}

func (s *store) path(key string) string { return filepath.Join(s.dir, filepath.FromSlash(key)) }

// flip changes one byte in the middle of the object at key.
func (s *store) flip(t *testing.T, key string) {
	t.Helper()
	b, err := os.ReadFile(s.path(key))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)*2/3] ^= 0x40
	if err := os.WriteFile(s.path(key), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (s *store) job(ids ...age.Identity) scrub.Job {
	return scrub.Job{Repo: s.repo, Identities: ids, ReadData: 100}
}

func keys(fs []scrub.Finding) []string {
	var ks []string
	for _, f := range fs {
		ks = append(ks, f.Key)
	}
	sort.Strings(ks)
	return ks
}

// TestScrubFindsDamage: a sound store scrubs sound with both identities;
// then one byte flipped in an old segment, a backup's data object and the
// kit, one backup's data object removed and the identity rotated (the
// oldest backup encrypted to the old one only): the scrub names each
// damaged object with what is wrong, records the damage in the store, and
// with an identity that opens not even the newest backup it is a
// configuration error, not damage.
func TestScrubFindsDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	ctx := t.Context()
	s := newStore(t)
	lg := slog.New(slog.DiscardHandler)

	res, err := scrub.Run(ctx, s.job(s.old, s.cur), lg)
	if err != nil || !res.Sound() {
		t.Fatalf("sound store: %+v, %v", res, err)
	}
	if res.BytesRead < res.TotalBytes || res.ObjectsRead != res.Objects {
		t.Errorf("read_data 100%%: read %d of %d bytes, %d of %d objects", res.BytesRead, res.TotalBytes, res.ObjectsRead, res.Objects)
	}

	s.flip(t, s.segments[0])
	s.flip(t, s.backups[1].Object)
	s.flip(t, s.kit.Object)
	if err := os.Remove(s.path(s.backups[2].Object)); err != nil {
		t.Fatal(err)
	}
	res, err = scrub.Run(ctx, s.job(s.cur), lg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{s.backups[0].Object, s.backups[1].Object, s.backups[2].Object, s.kit.Object, s.segments[0]}
	sort.Strings(want)
	if got := keys(res.Damaged); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("damaged:\n%v\nwant\n%v\n(%+v)", got, want, res.Damaged)
	}
	if len(res.NotChecked) != 0 || len(res.RecordErrors) != 0 {
		t.Errorf("not checked %v, record errors %v", res.NotChecked, res.RecordErrors)
	}
	problems := map[string]string{}
	for _, f := range res.Damaged {
		problems[f.Key] = f.Problem
	}
	for key, words := range map[string]string{
		s.backups[0].Object: "no configured identity opens it",
		s.backups[1].Object: "its manifest says",
		s.backups[2].Object: "missing",
		s.kit.Object:        "its manifest says",
		s.segments[0]:       "bad change segment",
	} {
		if !strings.Contains(problems[key], words) {
			t.Errorf("%s: %q, want it to say %q", key, problems[key], words)
		}
	}

	recs, err := s.repo.ReadDamage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, d := range recs.Current {
		if d.FoundBy != repository.FoundByScrub {
			t.Errorf("%s found by %s", d.Object, d.FoundBy)
		}
		recorded = append(recorded, d.Object)
	}
	sort.Strings(recorded)
	// The missing object cannot have a record (there is nothing to
	// describe); the listing shows its backup broken.
	wantRec := []string{s.backups[0].Object, s.backups[1].Object, s.kit.Object, s.segments[0]}
	sort.Strings(wantRec)
	if strings.Join(recorded, " ") != strings.Join(wantRec, " ") {
		t.Errorf("damage records of %v, want %v", recorded, wantRec)
	}
	l, err := s.repo.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Backups {
		if e.Manifest.ID == s.backups[1].ID && e.State != repository.StateBroken {
			t.Errorf("backup %s listed %s after the scrub, want broken", e.Manifest.ID, e.State)
		}
	}

	t.Run("only the old identity", func(t *testing.T) {
		_, err := scrub.Run(ctx, s.job(s.old), lg)
		if !errors.Is(err, repository.ErrDecrypt) {
			t.Errorf("scrub with an identity that does not open the newest backup: %v, want ErrDecrypt", err)
		}
	})
	t.Run("no identity", func(t *testing.T) {
		_, err := scrub.Run(ctx, s.job(), lg)
		if !errors.Is(err, repository.ErrNoIdentity) {
			t.Errorf("scrub without identities: %v, want ErrNoIdentity", err)
		}
	})
}

// TestNetworkFaultIsNotChecked: on a real S3 (versitygw) behind a fault
// proxy, a backup whose body is cut short on every attempt and a segment
// whose reads fail with 500 are "not checked", never damaged nor good:
// no damage is recorded, and the run is not sound.
func TestNetworkFaultIsNotChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd and S3")
	}
	ctx := t.Context()
	srv := s3test.Start(t)
	srv.Env(t)
	srv.CreateBucket(t, "scrub", false)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	st, err := uploader.NewS3(ctx, uploader.S3Config{
		Bucket: "scrub", Prefix: "backups", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true,
		PartSize: uploader.MinS3PartSize, Concurrency: 2, MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond, ReadTimeout: 5 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := &repository.Repo{Store: st, Cluster: "test"}
	id := restoretest.NewIdentity(t)
	src := restoretest.StartSource(t, 30)
	first := src.Backup(t, repo, restoretest.AgeEncoding(id))
	time.Sleep(1100 * time.Millisecond)
	anchor := src.Backup(t, repo, restoretest.AgeEncoding(id))
	cli := src.C.Client(t)
	c := changetest.Start(t, changetest.Options{Client: cli, Repo: repo, Anchor: anchor, Encoding: restoretest.AgeEncoding(id), SegmentRevisions: 2})
	for i := range 4 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/scrub/k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	c.Sync(t)
	segs, _, err := repo.ListSegments(ctx, anchor.ID)
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	lg := slog.New(slog.DiscardHandler)
	job := scrub.Job{Repo: repo, Identities: []age.Identity{id}, ReadData: 100}
	if res, err := scrub.Run(ctx, job, lg); err != nil || !res.Sound() {
		t.Fatalf("sound store on S3: %+v, %v", res, err)
	}

	seg := segs[0].Object.Key
	proxy.SetFault(func(r *http.Request, n int) s3test.Fault {
		switch {
		case s3test.Op(r) != "GetObject":
			return s3test.None
		case strings.HasSuffix(r.URL.Path, first.Object) && r.Header.Get("Range") == "":
			return s3test.Truncate(1000)
		case strings.HasSuffix(r.URL.Path, seg):
			return s3test.Status(500)
		}
		return s3test.None
	})
	res, err := scrub.Run(ctx, job, lg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Damaged) != 0 {
		t.Errorf("damaged %+v, want none (the store failed, the objects are not proven damaged)", res.Damaged)
	}
	want := []string{first.Object, seg}
	sort.Strings(want)
	if got := keys(res.NotChecked); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("not checked %v, want %v (%+v)", got, want, res.NotChecked)
	}
	if res.Sound() {
		t.Error("a run that could not read two objects is sound")
	}
	recs, err := repo.ReadDamage(ctx)
	if err != nil || len(recs.Current) != 0 {
		t.Errorf("damage records %+v, %v; want none", recs, err)
	}
}
