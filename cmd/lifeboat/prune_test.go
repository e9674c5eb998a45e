package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// pruneFixture is a directory store with synthetic backups of cluster "c".
type pruneFixture struct {
	dir     string
	backups *repository.Repo
}

func newPruneFixture(t testing.TB) *pruneFixture {
	t.Helper()
	dir := t.TempDir()
	st, err := uploader.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &pruneFixture{dir: dir, backups: &repository.Repo{Store: st, Cluster: "c"}}
}

// object stores a 2 KiB data object of a backup taken at at, revision rev,
// and returns the manifest that would commit it.
func (f *pruneFixture) object(t testing.TB, at time.Time, rev int64) *repository.Manifest {
	t.Helper()
	id := repository.NewID(at, rev)
	data := bytes.Repeat([]byte{byte(rev)}, 2048)
	key := f.backups.ObjectKey(id, repository.Encoding{Compression: "none"})
	info, err := f.backups.Store.Put(t.Context(), key, bytes.NewReader(data), uploader.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return &repository.Manifest{
		Format: repository.ManifestFormat, ID: id, Cluster: "c", EtcdClusterID: "1", EtcdMemberID: "2",
		Endpoint: "http://127.0.0.1:2379", EtcdVersion: "3.7.3", CreatedAt: at, Revision: rev, TotalKeys: 1,
		DBSize: 2048, SnapshotSHA256: hex.EncodeToString(sum[:]), HashKVStatus: "match",
		Object: key, ObjectSize: info.Size, ObjectSHA256: info.SHA256, Compression: "none", Encryption: "none",
		AgentVersion: "test",
	}
}

// backup stores a whole backup.
func (f *pruneFixture) backup(t testing.TB, at time.Time, rev int64) *repository.Manifest {
	t.Helper()
	m := f.object(t, at, rev)
	if err := f.backups.PutManifest(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// files lists the store's files, relative, slash separated.
func (f *pruneFixture) files(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, p := range storeFiles(t, f.dir) {
		out = append(out, filepath.ToSlash(p))
	}
	return out
}

func (f *pruneFixture) config(t *testing.T) *Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Cluster = "c"
	cfg.Store.URL = "file://" + f.dir
	cfg.Retention.KeepLast = 1
	cfg.Retention.KeepDaily = 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

func TestRunPrune(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := newPruneFixture(t)
	day := func(d int) time.Time { return time.Date(2026, 11, d, 10, 0, 0, 0, time.UTC) }
	for d := 27; d <= 30; d++ {
		f.backup(t, day(d), int64(d))
	}
	broken := f.object(t, day(26), 26)
	if err := f.backups.Store.Delete(t.Context(), broken.Object); err != nil {
		t.Fatal(err)
	}
	if err := f.backups.PutManifest(t.Context(), broken); err != nil {
		t.Fatal(err)
	}
	orphan := f.object(t, day(25), 25)
	old := now.Add(-72 * time.Hour)
	if err := os.Chtimes(filepath.Join(f.dir, filepath.FromSlash(orphan.Object)), old, old); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(t)
	lg := slog.New(slog.DiscardHandler)

	wantDry := `dry run: nothing is changed
policy: keep-last 1, keep-daily 2
ID                    AGE  SIZE     DECISION
20261130T100000Z-r30  2h   2.0 KiB  keep (last, daily 2026-11-30, newest)
20261129T100000Z-r29  26h  2.0 KiB  keep (daily 2026-11-29)
20261128T100000Z-r28  2d   2.0 KiB  delete
20261127T100000Z-r27  3d   2.0 KiB  delete
orphan c/snapshots/20261125T100000Z-r25.db (3d old, 2.0 KiB): would remove
broken backup 20261126T100000Z-r26: data object c/snapshots/20261126T100000Z-r26.db is missing (kept; prune never deletes a broken backup)
summary: 4 backup(s): 2 kept, 2 to delete, 0 locked, 0 skipped; 1 orphan(s) to remove; 0 incomplete upload(s) to abort; 1 broken
`
	before := f.files(t)
	var out bytes.Buffer
	if err := runPrune(t.Context(), cfg, lg, pruneOptions{dryRun: true, output: "table"}, &out, now); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if diff := cmp.Diff(wantDry, out.String()); diff != "" {
		t.Errorf("dry-run output (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, f.files(t)); diff != "" {
		t.Errorf("dry run changed the store (-before +after):\n%s", diff)
	}

	want := `policy: keep-last 1, keep-daily 2
ID                    AGE  SIZE     DECISION
20261130T100000Z-r30  2h   2.0 KiB  keep (last, daily 2026-11-30, newest)
20261129T100000Z-r29  26h  2.0 KiB  keep (daily 2026-11-29)
20261128T100000Z-r28  2d   2.0 KiB  deleted
20261127T100000Z-r27  3d   2.0 KiB  deleted
orphan c/snapshots/20261125T100000Z-r25.db (3d old, 2.0 KiB): removed
broken backup 20261126T100000Z-r26: data object c/snapshots/20261126T100000Z-r26.db is missing (kept; prune never deletes a broken backup)
summary: 4 backup(s): 2 kept, 2 deleted, 0 locked, 0 skipped; 1 orphan(s) removed; 0 incomplete upload(s) aborted; 1 broken; 0 error(s)
`
	out.Reset()
	if err := runPrune(t.Context(), cfg, lg, pruneOptions{output: "table"}, &out, now); err != nil {
		t.Fatalf("prune: %v", err)
	}
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	wantFiles := []string{
		"c/snapshots/20261126T100000Z-r26.json",
		"c/snapshots/20261129T100000Z-r29.db",
		"c/snapshots/20261129T100000Z-r29.json",
		"c/snapshots/20261130T100000Z-r30.db",
		"c/snapshots/20261130T100000Z-r30.json",
	}
	if diff := cmp.Diff(wantFiles, f.files(t)); diff != "" {
		t.Errorf("store after prune (-want +got):\n%s", diff)
	}

	// Again, as JSON: nothing left to do.
	out.Reset()
	if err := runPrune(t.Context(), cfg, lg, pruneOptions{output: "json"}, &out, now); err != nil {
		t.Fatalf("prune -o json: %v", err)
	}
	var got pruneOutput
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("json output: %v\n%s", err, out.String())
	}
	wantSummary := pruneSummary{Backups: 2, Kept: 2, Broken: 1}
	if diff := cmp.Diff(wantSummary, got.Summary); diff != "" {
		t.Errorf("json summary (-want +got):\n%s", diff)
	}
	if len(got.Backups) != 2 || got.Backups[1].Action != "keep" || !cmp.Equal(got.Backups[1].Reasons, []string{"daily 2026-11-29"}) {
		t.Errorf("json backups = %+v", got.Backups)
	}
	if diff := cmp.Diff([]brokenBackup{{ID: broken.ID, Problem: "data object " + broken.Object + " is missing"}}, got.Broken); diff != "" {
		t.Errorf("json broken (-want +got):\n%s", diff)
	}
}

func TestPruneCommand(t *testing.T) {
	now := time.Now().UTC()
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		setup     func(t *testing.T, f *pruneFixture)
		code      int
		stdout    []string // substrings
		stderr    []string
		remaining int // backups listed afterwards
	}{
		{
			name: "empty policy is a config error",
			args: []string{"prune"},
			code: exitUsage, stderr: []string{"config: retention:", "keeps nothing"}, remaining: 3,
		},
		{
			name: "bad output",
			env:  map[string]string{"LIFEBOAT_RETENTION_KEEP_LAST": "1"},
			args: []string{"prune", "-o", "yaml"},
			code: exitUsage, stderr: []string{"--output"}, remaining: 3,
		},
		{
			name: "dry run from the environment",
			env:  map[string]string{"LIFEBOAT_RETENTION_KEEP_LAST": "1"},
			args: []string{"prune", "--dry-run"},
			code: exitOK, stdout: []string{"dry run", "keep (last, newest)", "2 to delete"}, remaining: 3,
		},
		{
			// The orphan grace's floor comes from the snapshot job's timeout
			// and retries: prune takes those flags too (hidden from its help).
			name: "snapshot flags raise the orphan grace floor",
			args: []string{"prune", "--keep-last", "2", "--timeout", "2h", "--snapshot-retries", "0", "--orphan-grace", "1h"},
			code: exitUsage, stderr: []string{"retention.orphan_grace", "floor 2h0m0s"}, remaining: 3,
		},
		{
			name: "flags",
			args: []string{"prune", "--keep-last", "2"},
			code: exitOK, stdout: []string{"1 deleted"}, remaining: 2,
		},
		{
			name: "one backup fails, the others go, exit 1",
			env:  map[string]string{"LIFEBOAT_RETENTION_KEEP_LAST": "1"},
			args: []string{"prune"},
			setup: func(t *testing.T, f *pruneFixture) {
				// A copied manifest naming another backup's data object:
				// deleting it would break the other one.
				m := f.object(t, now.Add(-96*time.Hour), 4)
				if err := f.backups.Store.Delete(t.Context(), m.Object); err != nil {
					t.Fatal(err)
				}
				l, err := f.backups.List(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				newest := l.Backups[0].Manifest
				m.Object, m.ObjectSize, m.ObjectSHA256 = newest.Object, newest.ObjectSize, newest.ObjectSHA256
				if err := f.backups.PutManifest(t.Context(), m); err != nil {
					t.Fatal(err)
				}
			},
			code:   exitFailed,
			stdout: []string{"skip: data object shared with another manifest", "2 deleted", "1 skipped", "1 error(s)"},
			stderr: []string{"named by 2 manifests"}, remaining: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPruneFixture(t)
			for i := range 3 {
				f.backup(t, now.Add(-time.Duration(i+1)*24*time.Hour), int64(i+1))
			}
			if tt.setup != nil {
				tt.setup(t, f)
			}
			env := map[string]string{"LIFEBOAT_CONFIG": "", "LIFEBOAT_LOG_FORMAT": "json"}
			for k, v := range tt.env {
				env[k] = v
			}
			args := append(tt.args, "--store", "file://"+f.dir, "--cluster", "c")
			code, stdout, stderr := runCLI(t, env, args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			l, err := f.backups.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var ok int
			for _, e := range l.Backups {
				if e.State == repository.StateOK {
					ok++
				}
			}
			if ok != tt.remaining {
				t.Errorf("%d whole backups left, want %d", ok, tt.remaining)
			}
		})
	}
}

// TestPruneKeepsTheNewestProvenBackup: the command reads drill reports, so
// the newest backup whose last drill passed survives any policy.
func TestPruneKeepsTheNewestProvenBackup(t *testing.T) {
	f := newPruneFixture(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var ms []*repository.Manifest
	for i := range 4 {
		ms = append(ms, f.backup(t, now.Add(-time.Duration(4-i)*time.Hour), int64(10+i)))
	}
	proven := ms[1]
	rep := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: proven.ID, Cluster: f.backups.Cluster,
		StartedAt: now.Add(-time.Hour), FinishedAt: now.Add(-time.Hour + time.Minute), Passed: true}
	if err := f.backups.PutDrillReport(t.Context(), rep); err != nil {
		t.Fatal(err)
	}
	failed := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: ms[2].ID, Cluster: f.backups.Cluster,
		StartedAt: now.Add(-time.Hour), FinishedAt: now.Add(-time.Hour + time.Minute), Error: "hashkv mismatch"}
	if err := f.backups.PutDrillReport(t.Context(), failed); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, map[string]string{"LIFEBOAT_CONFIG": ""}, "prune", "--keep-last", "1",
		"--store", "file://"+f.dir, "--cluster", f.backups.Cluster, "--log-level", "error")
	if code != exitOK {
		t.Fatalf("prune exit %d\n%s%s", code, stdout, stderr)
	}
	l, err := f.backups.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range l.Backups {
		left = append(left, e.Manifest.ID)
	}
	want := []string{ms[3].ID, proven.ID}
	if diff := cmp.Diff(left, want); diff != "" {
		t.Errorf("survivors (-got +want):\n%s\n%s", diff, stdout)
	}
	if !strings.Contains(stdout, "newest-proven") {
		t.Errorf("plan does not name newest-proven:\n%s", stdout)
	}
}
