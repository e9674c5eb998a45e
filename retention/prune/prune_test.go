package prune

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// testStore is one real store implementation the prune tests run against.
type testStore struct {
	name string
	open func(t *testing.T) uploader.Store
}

// testStores returns the directory store and an S3 store on versitygw
// (a server per open: each subtest gets its own).
func testStores(t *testing.T) []testStore {
	t.Helper()
	return []testStore{
		{"dir", func(t *testing.T) uploader.Store {
			d, err := uploader.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"s3", func(t *testing.T) uploader.Store {
			s, _ := jobtest.NewS3Store(t, s3test.Start(t), false)
			return s
		}},
	}
}

// putDrillReport stores a drill report of backup id.
func putDrillReport(t *testing.T, b *repository.Repo, id string) string {
	t.Helper()
	key := drillPrefix(b, id) + "20261130T000000Z.json"
	if _, err := b.Store.Put(t.Context(), key, strings.NewReader(`{"verdict":"pass"}`), uploader.PutOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return key
}

// planned summarises a plan as "day action reasons" lines, newest first.
func planned(p *Plan, day map[string]string) []string {
	var out []string
	for _, pb := range p.Backups {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", day[pb.Entry.Manifest.ID], pb.Action, strings.Join(pb.Decision.Reasons, ", "))))
	}
	return out
}

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func TestPruneWorkedExample(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	policy := retention.Policy{Last: 2, Daily: 4, Weekly: 3}
	for _, ts := range testStores(t) {
		t.Run(ts.name, func(t *testing.T) {
			b := &repository.Repo{Store: ts.open(t), Cluster: jobtest.Cluster}
			// One backup a day at 10:00 from Thursday 19 to Monday 30
			// November 2026, and one more at 04:00 on the 30th.
			day := map[string]string{}
			ids := map[string]string{}
			add := func(name string, at time.Time) {
				m := jobtest.PutBackup(t, b, at, uploader.PutOptions{}, false)
				day[m.ID], ids[name] = name, m.ID
			}
			for d := 19; d <= 30; d++ {
				add(fmt.Sprintf("%02d", d), time.Date(2026, 11, d, 10, 0, 0, 0, time.UTC))
			}
			add("30-04h", time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC))
			// A broken backup: a manifest whose data object is missing.
			broken := jobtest.PutObject(t, b, time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC), uploader.PutOptions{})
			if err := b.Store.Delete(t.Context(), broken.Object); err != nil {
				t.Fatal(err)
			}
			if err := b.PutManifest(t.Context(), broken); err != nil {
				t.Fatal(err)
			}
			// Drill reports of a backup that goes and of one that stays.
			goneReport := putDrillReport(t, b, ids["19"])
			keptReport := putDrillReport(t, b, ids["21"])
			job := Job{
				Backups: b, Policy: policy, OrphanGrace: 24 * time.Hour, Now: fixedClock(now),
				// The 21st is the newest backup whose last drill passed:
				// no rule keeps it, the guarantee does.
				DrillPassed: map[string]bool{ids["21"]: true, ids["19"]: true, ids["20"]: false},
			}
			wantPlan := []string{
				"30 keep last, daily 2026-11-30, weekly 2026-W49, newest",
				"30-04h keep last",
				"29 keep daily 2026-11-29, weekly 2026-W48",
				"28 keep daily 2026-11-28",
				"27 keep daily 2026-11-27",
				"26 delete",
				"25 delete",
				"24 delete",
				"23 delete",
				"22 keep weekly 2026-W47",
				"21 keep newest-proven",
				"20 delete",
				"19 delete",
			}
			wantDeleted := []string{ids["26"], ids["25"], ids["24"], ids["23"], ids["20"], ids["19"]}
			wantSurvivors := []string{ids["30"], ids["30-04h"], ids["29"], ids["28"], ids["27"], ids["22"], ids["21"], broken.ID}

			before := jobtest.AllKeys(t, b.Store)
			dry := job
			dry.DryRun = true
			res, err := Run(t.Context(), dry, nil)
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			if diff := cmp.Diff(wantPlan, planned(res.Plan, day)); diff != "" {
				t.Errorf("dry-run plan (-want +got):\n%s", diff)
			}
			if len(res.Deleted) != 0 {
				t.Errorf("dry run Deleted = %v", res.Deleted)
			}
			if diff := cmp.Diff(before, jobtest.AllKeys(t, b.Store)); diff != "" {
				t.Errorf("dry run changed the store (-before +after):\n%s", diff)
			}

			res, err = Run(t.Context(), job, nil)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if diff := cmp.Diff(wantPlan, planned(res.Plan, day)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantDeleted, res.Deleted); diff != "" {
				t.Errorf("Deleted (-want +got):\n%s", diff)
			}
			if res.Broken != 1 || len(res.Plan.Broken) != 1 || res.Plan.Broken[0].Manifest.ID != broken.ID {
				t.Errorf("Broken = %d, %+v; want backup %s", res.Broken, res.Plan.Broken, broken.ID)
			}
			gotIDs, orphans := jobtest.Listed(t, b)
			if diff := cmp.Diff(wantSurvivors, gotIDs); diff != "" {
				t.Errorf("listed after prune (-want +got):\n%s", diff)
			}
			if len(orphans) != 0 {
				t.Errorf("orphans after prune: %v", orphans)
			}
			for key, want := range map[string]bool{goneReport: false, keptReport: true} {
				_, err := b.Store.Stat(t.Context(), key)
				if got := err == nil; got != want {
					t.Errorf("drill report %s exists = %v (%v), want %v", key, got, err, want)
				}
			}

			// Pruning again changes nothing.
			after := jobtest.AllKeys(t, b.Store)
			res, err = Run(t.Context(), job, nil)
			if err != nil {
				t.Fatalf("second Prune: %v", err)
			}
			if len(res.Deleted) != 0 || res.OrphansRemoved != 0 {
				t.Errorf("second prune deleted %v and %d orphans", res.Deleted, res.OrphansRemoved)
			}
			if diff := cmp.Diff(after, jobtest.AllKeys(t, b.Store)); diff != "" {
				t.Errorf("second prune changed the store (-before +after):\n%s", diff)
			}
		})
	}
}

// failingStore injects a failure into a real store's Delete of one key,
// as a crash between two steps would leave things.
type failingStore struct {
	uploader.Store
	failDelete string
}

var errInjected = errors.New("injected failure")

func (f *failingStore) Delete(ctx context.Context, key string) error {
	if key == f.failDelete {
		return fmt.Errorf("delete %s: %w", key, errInjected)
	}
	return f.Store.Delete(ctx, key)
}

func TestPruneInterruptedLeavesOnlyOrphans(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Second)
	for _, ts := range testStores(t) {
		for _, step := range []string{"manifest", "data object", "drill report"} {
			t.Run(ts.name+"/"+strings.ReplaceAll(step, " ", "-"), func(t *testing.T) {
				st := ts.open(t)
				b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
				old := jobtest.PutBackup(t, b, base.Add(-48*time.Hour), uploader.PutOptions{}, false)
				newest := jobtest.PutBackup(t, b, base.Add(-time.Hour), uploader.PutOptions{}, false)
				report := putDrillReport(t, b, old.ID)
				fail := map[string]string{"manifest": b.ManifestKey(old.ID), "data object": old.Object, "drill report": report}[step]

				job := Job{
					Backups:     &repository.Repo{Store: &failingStore{Store: st, failDelete: fail}, Cluster: jobtest.Cluster},
					Policy:      retention.Policy{Last: 1},
					OrphanGrace: 24 * time.Hour,
					Now:         fixedClock(base),
				}
				res, err := Run(t.Context(), job, nil)
				if !errors.Is(err, errInjected) {
					t.Fatalf("Prune error = %v, want the injected failure", err)
				}
				if len(res.Errors) != 1 || len(res.Deleted) != 0 {
					t.Errorf("Errors = %v, Deleted = %v; want one error, nothing deleted", res.Errors, res.Deleted)
				}
				ids, orphans := jobtest.Listed(t, b)
				wantIDs, wantOrphans := []string{newest.ID}, []string(nil)
				switch step {
				case "manifest":
					// Nothing happened: the backup is whole and listed.
					wantIDs = []string{newest.ID, old.ID}
				case "data object":
					wantOrphans = []string{old.Object}
				}
				if diff := cmp.Diff(wantIDs, ids); diff != "" {
					t.Errorf("listed backups (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(wantOrphans, orphans); diff != "" {
					t.Errorf("orphans (-want +got):\n%s", diff)
				}
				if l, _ := b.List(t.Context()); l != nil {
					for _, e := range l.Backups {
						if e.State != repository.StateOK {
							t.Errorf("backup %s is %s after an interrupted prune: %s", e.Manifest.ID, e.State, e.Problem)
						}
					}
				}

				// A later run, past the grace period, cleans up what is left.
				job.Backups = b
				job.Now = fixedClock(base.Add(48 * time.Hour))
				if _, err := Run(t.Context(), job, nil); err != nil {
					t.Fatalf("second Prune: %v", err)
				}
				want := []string{b.ManifestKey(newest.ID), newest.Object}
				if diff := cmp.Diff(want, jobtest.AllKeys(t, st), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
					t.Errorf("store after the second run (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestPruneOrphans(t *testing.T) {
	realNow := time.Now().UTC()
	for _, ts := range testStores(t) {
		t.Run(ts.name, func(t *testing.T) {
			b := &repository.Repo{Store: ts.open(t), Cluster: jobtest.Cluster}
			newest := jobtest.PutBackup(t, b, realNow.Add(-time.Hour), uploader.PutOptions{}, false)
			orphan := jobtest.PutObject(t, b, realNow.Add(-2*time.Hour), uploader.PutOptions{})
			strayReport := putDrillReport(t, b, repository.NewID(realNow.Add(-3*time.Hour), 7))
			// An unreadable manifest (a future format) and its data object:
			// neither is touched, however old.
			future := jobtest.PutObject(t, b, realNow.Add(-4*time.Hour), uploader.PutOptions{})
			futureKey := b.ManifestKey(future.ID)
			if _, err := b.Store.Put(t.Context(), futureKey, strings.NewReader(`{"format": 99, "id": "`+future.ID+`"}`), uploader.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			futureReport := putDrillReport(t, b, future.ID)
			unreadableWhy := "manifest " + futureKey + ": bad manifest: format 99, this build reads format " + strconv.Itoa(repository.ManifestFormat)

			job := Job{Backups: b, Policy: retention.Policy{Last: 5}, OrphanGrace: time.Hour, Now: fixedClock(realNow)}
			res, err := Run(t.Context(), job, nil)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if res.OrphansRemoved != 0 || len(res.Plan.Orphans) != 0 {
				t.Errorf("young orphans: removed %d, planned %v", res.OrphansRemoved, res.Plan.Orphans)
			}
			kept := map[string]string{}
			for _, k := range res.Plan.OrphansKept {
				kept[k.Object.Key] = k.Reason
			}
			// futureReport is no orphan at all: its backup may exist.
			wantKept := map[string]string{
				orphan.Object: "younger than the grace period",
				strayReport:   "younger than the grace period",
				future.Object: "its manifest " + futureKey + " is unreadable (" + unreadableWhy + "): not an unfinished upload, never removed",
			}
			if diff := cmp.Diff(wantKept, kept); diff != "" {
				t.Errorf("orphans kept (-want +got):\n%s", diff)
			}

			// Two hours later the orphan and the stray report are old enough.
			job.Now = fixedClock(realNow.Add(2 * time.Hour))
			res, err = Run(t.Context(), job, nil)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if res.OrphansRemoved != 2 {
				t.Errorf("OrphansRemoved = %d, want 2 (%v)", res.OrphansRemoved, res.Plan.Orphans)
			}
			want := []string{b.ManifestKey(newest.ID), newest.Object, future.Object, futureKey, futureReport}
			if diff := cmp.Diff(want, jobtest.AllKeys(t, b.Store), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("store after removing orphans (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPruneOrphanAgeInOneRun(t *testing.T) {
	// The directory store lets the test set modification times: one run
	// removes the old orphan and keeps the young one.
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: d, Cluster: jobtest.Cluster}
	now := time.Now().UTC()
	jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, false)
	old := jobtest.PutObject(t, b, now.Add(-50*time.Hour), uploader.PutOptions{})
	young := jobtest.PutObject(t, b, now.Add(-2*time.Hour), uploader.PutOptions{})
	for key, mtime := range map[string]time.Time{old.Object: now.Add(-25 * time.Hour), young.Object: now.Add(-23 * time.Hour)} {
		if err := os.Chtimes(filepath.Join(d.Root(), filepath.FromSlash(key)), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Run(t.Context(), Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: 24 * time.Hour, Now: fixedClock(now)}, nil)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if res.OrphansRemoved != 1 {
		t.Errorf("OrphansRemoved = %d, want 1", res.OrphansRemoved)
	}
	_, orphans := jobtest.Listed(t, b)
	if diff := cmp.Diff([]string{young.Object}, orphans); diff != "" {
		t.Errorf("orphans left (-want +got):\n%s", diff)
	}
}

func TestPruneLockedOnS3(t *testing.T) {
	srv := s3test.Start(t)
	st, _ := jobtest.NewS3Store(t, srv, true)
	b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
	now := time.Now().UTC()
	governance := uploader.PutOptions{LockMode: "GOVERNANCE", RetainUntil: now.Add(time.Hour).Truncate(time.Second)}
	short := uploader.PutOptions{LockMode: "GOVERNANCE", RetainUntil: now.Add(time.Minute).Truncate(time.Second)}

	newest := jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, false)
	// Locked as lifeboat snapshot records it, in the manifest and on the object.
	inManifest := jobtest.PutBackup(t, b, now.Add(-2*time.Hour), governance, true)
	// Locked on the object only, as bucket default retention or a hold set
	// later would: only a Stat before deleting finds it.
	onObject := jobtest.PutBackup(t, b, now.Add(-3*time.Hour), governance, false)
	held := jobtest.PutBackup(t, b, now.Add(-4*time.Hour), uploader.PutOptions{LegalHold: true}, false)
	free := jobtest.PutBackup(t, b, now.Add(-5*time.Hour), uploader.PutOptions{}, false)
	// A lock the manifest records that has run out by the time prune runs.
	lapsed := jobtest.PutBackup(t, b, now.Add(-6*time.Hour), short, true)

	job := Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: 24 * time.Hour, Now: fixedClock(now.Add(2 * time.Minute))}
	for _, run := range []struct {
		name     string
		dryRun   bool
		unlocked bool // free and lapsed still there to plan
	}{
		{"dry run", true, true},
		{"prune", false, true},
		{"again", false, false},
	} {
		job.DryRun = run.dryRun
		res, err := Run(t.Context(), job, nil)
		if err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		got := map[string]Action{}
		for _, pb := range res.Plan.Backups {
			got[pb.Entry.Manifest.ID] = pb.Action
		}
		want := map[string]Action{newest.ID: ActionKeep, inManifest.ID: ActionLocked, onObject.ID: ActionLocked, held.ID: ActionLocked}
		if run.unlocked {
			want[free.ID], want[lapsed.ID] = ActionDelete, ActionDelete
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: actions (-want +got):\n%s", run.name, diff)
		}
		if diff := cmp.Diff([]string{inManifest.ID, onObject.ID, held.ID}, res.Locked); diff != "" {
			t.Errorf("%s: Locked (-want +got):\n%s", run.name, diff)
		}
		if len(res.Deleted) != 0 && run.dryRun {
			t.Errorf("%s: Deleted = %v", run.name, res.Deleted)
		}
	}

	ids, _ := jobtest.Listed(t, b)
	if diff := cmp.Diff([]string{newest.ID, inManifest.ID, onObject.ID, held.ID}, ids); diff != "" {
		t.Errorf("listed after prune (-want +got):\n%s", diff)
	}
	for _, m := range []*repository.Manifest{inManifest, onObject, held} {
		info, err := st.Stat(t.Context(), m.Object)
		if err != nil || !info.Locked(now) {
			t.Errorf("locked object %s after prune: %+v, %v; want it still there and locked", m.Object, info, err)
		}
	}
	for _, m := range []*repository.Manifest{free, lapsed} {
		if _, err := st.Stat(t.Context(), m.Object); !errors.Is(err, uploader.ErrNotFound) {
			t.Errorf("unlocked object %s after prune: %v, want not found", m.Object, err)
		}
	}
}

func TestPruneLockedOrphanKept(t *testing.T) {
	srv := s3test.Start(t)
	st, _ := jobtest.NewS3Store(t, srv, true)
	b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
	now := time.Now().UTC()
	jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, false)
	orphan := jobtest.PutObject(t, b, now.Add(-2*time.Hour), uploader.PutOptions{LegalHold: true})
	res, err := Run(t.Context(), Job{Backups: b, Policy: retention.Policy{Last: 1}, Now: fixedClock(now.Add(time.Minute))}, nil)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	want := []KeptObject{{Object: uploader.ObjectInfo{Key: orphan.Object}, Reason: "locked"}}
	if diff := cmp.Diff(want, res.Plan.OrphansKept, cmpopts.IgnoreFields(uploader.ObjectInfo{}, "Size", "ModTime")); diff != "" {
		t.Errorf("OrphansKept (-want +got):\n%s", diff)
	}
	if _, err := st.Stat(t.Context(), orphan.Object); err != nil {
		t.Errorf("locked orphan after prune: %v", err)
	}
}

func TestPruneAbortsIncompleteUploads(t *testing.T) {
	srv := s3test.Start(t)
	st, bucket := jobtest.NewS3Store(t, srv, false)
	b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
	client := srv.Client(t)
	jobtest.PutBackup(t, b, time.Now().Add(-time.Hour), uploader.PutOptions{}, false)

	// An upload of this cluster, and one of another cluster in the same
	// bucket and prefix, both left unfinished.
	start := func(key string) {
		t.Helper()
		up, err := client.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("CreateMultipartUpload %s: %v", key, err)
		}
		_, err = client.UploadPart(t.Context(), &s3.UploadPartInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20)),
		})
		if err != nil {
			t.Fatalf("UploadPart %s: %v", key, err)
		}
	}
	mine := "team/" + jobtest.Cluster + "/snapshots/" + repository.NewID(time.Now(), 99) + ".db.zst"
	start(mine)
	start("team/staging/snapshots/" + repository.NewID(time.Now(), 98) + ".db.zst")
	uploads := func() []string {
		t.Helper()
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
	if got := uploads(); len(got) != 2 {
		t.Fatalf("uploads before prune: %v, want 2", got)
	}

	for _, tc := range []struct {
		name    string
		grace   time.Duration
		dryRun  bool
		planned int
		aborted int
		left    int
	}{
		{"within grace", time.Hour, false, 0, 0, 2},
		{"dry run", 0, true, 1, 0, 2},
		{"past grace", 0, false, 1, 1, 1},
		{"again", 0, false, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: tc.grace, DryRun: tc.dryRun,
				Now: fixedClock(time.Now().Add(time.Minute))}
			res, err := Run(t.Context(), job, nil)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if len(res.Plan.IncompleteUploads) != tc.planned || res.UploadsAborted != tc.aborted {
				t.Errorf("planned %v, aborted %d; want %d planned, %d aborted", res.Plan.IncompleteUploads, res.UploadsAborted, tc.planned, tc.aborted)
			}
			for _, u := range res.Plan.IncompleteUploads {
				if "team/"+u.Key != mine {
					t.Errorf("planned to abort %s, not this cluster's", u.Key)
				}
			}
			if got := uploads(); len(got) != tc.left {
				t.Errorf("uploads left: %v, want %d", got, tc.left)
			}
		})
	}
}

func TestPruneRefusesEmptyPolicy(t *testing.T) {
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: d, Cluster: jobtest.Cluster}
	now := time.Now().UTC()
	jobtest.PutBackup(t, b, now.Add(-48*time.Hour), uploader.PutOptions{}, false)
	jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, false)
	before := jobtest.AllKeys(t, d)
	res, err := Run(t.Context(), Job{Backups: b, Now: fixedClock(now)}, nil)
	if err == nil || res != nil {
		t.Fatalf("Prune with an empty policy = %+v, %v; want an error", res, err)
	}
	if diff := cmp.Diff(before, jobtest.AllKeys(t, d)); diff != "" {
		t.Errorf("store changed (-before +after):\n%s", diff)
	}
}

// BenchmarkPruneDryRunDir plans over 10 000 backups in a directory store
// (manifests written directly as files): listing, reading every manifest,
// the policy, and a Stat of every deletion candidate.
func BenchmarkPruneDryRunDir(b *testing.B) {
	root := b.TempDir()
	d, err := uploader.NewDir(root)
	if err != nil {
		b.Fatal(err)
	}
	bk := &repository.Repo{Store: d, Cluster: jobtest.Cluster}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	dir := filepath.Join(root, jobtest.Cluster, "snapshots")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	const n = 10000
	for i := range n {
		at := now.Add(-time.Duration(i) * time.Hour)
		id := repository.NewID(at, int64(i+1))
		obj := bk.ObjectKey(id, repository.Encoding{Compression: "none"})
		m := &repository.Manifest{
			Format: repository.ManifestFormat, ID: id, Cluster: jobtest.Cluster, CreatedAt: at, Revision: int64(i + 1),
			SnapshotSHA256: strings.Repeat("a", 64), Object: obj, ObjectSize: 4, ObjectSHA256: strings.Repeat("b", 64),
			Compression: "none", Encryption: "none",
		}
		data, err := m.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(obj)), []byte("data"), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(bk.ManifestKey(id))), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	job := Job{Backups: bk, Policy: retention.Policy{Hourly: 48, Daily: 30, Monthly: 12}, DryRun: true, Now: fixedClock(now)}
	for b.Loop() {
		res, err := Run(context.Background(), job, nil)
		if err != nil || len(res.Plan.Backups) != n {
			b.Fatalf("Prune: %v", err)
		}
	}
}

// TestPruneObsoleteDamage: a damage record whose object is gone is
// removed once past the grace period; a current one stays.
func TestPruneObsoleteDamage(t *testing.T) {
	realNow := time.Now().UTC()
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
	gone := jobtest.PutBackup(t, b, realNow.Add(-3*time.Hour), uploader.PutOptions{}, true)
	kept := jobtest.PutBackup(t, b, realNow.Add(-2*time.Hour), uploader.PutOptions{}, true)
	for _, m := range []*repository.Manifest{gone, kept} {
		if err := b.RecordDamage(t.Context(), repository.Damage{Object: m.Object, FoundBy: repository.FoundByScrub, Error: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Delete(t.Context(), gone.Object); err != nil {
		t.Fatal(err)
	}
	job := Job{Backups: b, Policy: retention.Policy{Last: 5}, OrphanGrace: time.Hour, Now: fixedClock(realNow.Add(2 * time.Hour))}
	if _, err := Run(t.Context(), job, nil); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	d, err := b.ReadDamage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Obsolete) != 0 || len(d.Current) != 1 || d.Current[0].Object != kept.Object {
		t.Errorf("after prune: current %+v, obsolete %+v: want only %s's record", d.Current, d.Obsolete, kept.Object)
	}
}
