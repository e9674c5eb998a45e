package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// changesT0 is when the synthetic generations' revisions are received.
var changesT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// putTestGeneration stores the revisions after snapshot m as a chain of
// segments of the given sizes (revision counts), encoded with e, and a
// progress marker through the last one. Revision snap+i is received at
// changesT0 + i seconds. It returns the segment keys.
func putTestGeneration(t *testing.T, b *repository.Repo, m *repository.Manifest, revs []repository.Revision, sizes []int, e repository.Encoding) []string {
	t.Helper()
	prev, keys := "", []string(nil)
	next := 0
	for i, n := range sizes {
		rs := revs[next : next+n]
		next += n
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID,
			First: rs[0].Revision, Last: rs[n-1].Revision, CapturedThrough: rs[n-1].Revision, CapturedAt: rs[n-1].Received, Token: 1, PrevHash: prev}
		if i == 0 {
			h.SnapshotID, h.SnapshotRevision = m.ID, m.Revision
		}
		o, hash, err := b.PutSegment(t.Context(), &repository.Segment{SegmentHeader: h, Revisions: rs}, e)
		if err != nil {
			t.Fatal(err)
		}
		prev = hash
		keys = append(keys, o.Key)
	}
	last := revs[len(revs)-1]
	if _, err := b.PutProgress(t.Context(), &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a",
		SnapshotID: m.ID, SnapshotRevision: m.Revision, Through: last.Revision, At: last.Received.Add(time.Minute),
		LastSegment: keys[len(keys)-1], LastHash: prev, Token: 1}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// shopRevisions: a namespace shop with a deployment and a pod created,
// a configmap on another key, a two-op transaction, then the namespace
// and its objects deleted in one revision each (what kubectl delete
// namespace leads to).
func shopRevisions(snap int64) []repository.Revision {
	put := func(k string, size int, ver int64) repository.Op {
		return repository.Op{Key: []byte(k), Value: make([]byte, size), CreateRevision: snap + 1, Version: ver}
	}
	del := func(k string) repository.Op { return repository.Op{Delete: true, Key: []byte(k)} }
	ops := [][]repository.Op{
		{put("/registry/namespaces/shop", 120, 1)},
		{put("/registry/deployments/shop/web", 1500, 1)},
		{put("/registry/pods/shop/web-1", 3000, 1), put("/registry/apiregistration.k8s.io/apiservices/v1.shop", 200, 1)},
		{{Key: []byte("/registry/leases/kube-node-lease/n1"), Value: make([]byte, 50), Lease: 0x77, CreateRevision: snap + 4, Version: 1}},
		{del("/registry/pods/shop/web-1")},
		{del("/registry/deployments/shop/web")},
		{del("/registry/namespaces/shop")},
		{put("plain-key", 5, 1)},
	}
	var out []repository.Revision
	for i, o := range ops {
		r := snap + 1 + int64(i)
		for j := range o {
			if !o[j].Delete {
				o[j].CreateRevision = r // version 1: created here
			}
		}
		out = append(out, repository.Revision{Revision: r, Received: changesT0.Add(time.Duration(i+1) * time.Second), Ops: o})
	}
	return out
}

// TestLog prints the captured changes oldest first, with Kubernetes keys
// in columns, filtered by prefix, revision and time; exit 0 and an empty
// result when nothing matches; JSON carries version and lease of a PUT;
// an encrypted generation needs --identity-file and the error says so.
func TestLog(t *testing.T) {
	f := newPruneFixture(t)
	m := f.backup(t, changesT0, 100)
	putTestGeneration(t, f.backups, m, shopRevisions(100), []int{3, 1, 4}, repository.Encoding{Compression: "zstd"})
	args := func(extra ...string) []string {
		return append([]string{"log", "--store", "file://" + f.dir, "--cluster", "c"}, extra...)
	}

	code, out, errOut := runCLI(t, nil, args()...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `REVISION   RECEIVED                 OP          SIZE  RESOURCE                     NAMESPACE            NAME
101        2026-12-01T09:00:01.000Z PUT        120 B  namespaces                                        shop
102        2026-12-01T09:00:02.000Z PUT      1.5 KiB  deployments                  shop                 web
103        2026-12-01T09:00:03.000Z PUT      2.9 KiB  pods                         shop                 web-1
103        2026-12-01T09:00:03.000Z PUT        200 B  apiregistration.k8s.io/apiservices                      v1.shop
104        2026-12-01T09:00:04.000Z PUT         50 B  leases                       kube-node-lease      n1
105        2026-12-01T09:00:05.000Z DELETE         -  pods                         shop                 web-1
106        2026-12-01T09:00:06.000Z DELETE         -  deployments                  shop                 web
107        2026-12-01T09:00:07.000Z DELETE         -  namespaces                                        shop
108        2026-12-01T09:00:08.000Z PUT          5 B  -                            -                    plain-key
`
	if out != want {
		t.Errorf("log:\n%s\nwant:\n%s", out, want)
	}

	for _, tc := range []struct {
		name string
		args []string
		revs []int64
	}{
		{"prefix", []string{"/registry/namespaces/shop"}, []int64{101, 107}},
		{"since revision", []string{"--since-revision", "106"}, []int64{106, 107, 108}},
		{"until revision", []string{"--until-revision", "102"}, []int64{101, 102}},
		{"time range", []string{"--since", "2026-12-01T09:00:04Z", "--until", "2026-12-01T09:00:05Z"}, []int64{104, 105}},
		{"generation", []string{"--generation", m.ID, "--since-revision", "108"}, []int64{108}},
		{"nothing", []string{"/registry/secrets/"}, nil},
		{"after the window", []string{"--since-revision", "1000"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, args(append(tc.args, "-o", "json")...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got []loggedChange
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("json %q: %v", out, err)
			}
			var revs []int64
			for _, c := range got {
				if len(revs) == 0 || revs[len(revs)-1] != c.Revision {
					revs = append(revs, c.Revision)
				}
			}
			if len(revs) != len(tc.revs) || (len(revs) > 0 && (revs[0] != tc.revs[0] || revs[len(revs)-1] != tc.revs[len(tc.revs)-1])) {
				t.Errorf("revisions %v, want %v", revs, tc.revs)
			}
		})
	}

	t.Run("json fields", func(t *testing.T) {
		_, out, _ := runCLI(t, nil, args("/registry/leases/", "-o", "json")...)
		var got []loggedChange
		if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 {
			t.Fatalf("%q: %v", out, err)
		}
		if c := got[0]; c.Op != "put" || c.Lease != 0x77 || c.Version != 1 || c.ValueSize != 50 || c.Generation != m.ID || !c.Received.Equal(changesT0.Add(4*time.Second)) {
			t.Errorf("%+v", c)
		}
	})
	t.Run("empty table", func(t *testing.T) {
		code, out, _ := runCLI(t, nil, args("/nothing")...)
		if code != 0 || out != "no captured change matches\n" {
			t.Errorf("exit %d, %q", code, out)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, a := range [][]string{{"--since", "yesterday"}, {"--since", "1h", "--since-revision", "3"}, {"--since-revision", "5", "--until-revision", "4"}} {
			if code, _, errOut := runCLI(t, nil, args(a...)...); code != 2 {
				t.Errorf("%v: exit %d, want 2: %s", a, code, errOut)
			}
		}
		if code, _, errOut := runCLI(t, nil, args("--generation", "nope")...); code != 1 || !strings.Contains(errOut, m.ID) {
			t.Errorf("unknown generation: exit %d: %s", code, errOut)
		}
	})

	t.Run("two generations", func(t *testing.T) {
		f := newPruneFixture(t)
		// The cluster was restored in between: the second generation's
		// revisions repeat the first's; both are listed, oldest first,
		// each under its name.
		g1 := f.backup(t, changesT0.Add(-time.Hour), 100)
		putTestGeneration(t, f.backups, g1, shopRevisions(100)[:2], []int{2}, repository.Encoding{Compression: "zstd"})
		g2 := f.backup(t, changesT0, 99)
		putTestGeneration(t, f.backups, g2, shopRevisions(99)[:1], []int{1}, repository.Encoding{Compression: "zstd"})
		code, out, errOut := runCLI(t, nil, "log", "--store", "file://"+f.dir, "--cluster", "c")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 6 || lines[1] != "# generation "+g1.ID || !strings.HasPrefix(lines[2], "101 ") || !strings.HasPrefix(lines[3], "102 ") ||
			lines[4] != "# generation "+g2.ID || !strings.HasPrefix(lines[5], "100 ") {
			t.Errorf("two generations:\n%s", out)
		}
	})

	t.Run("encrypted", func(t *testing.T) {
		f := newPruneFixture(t)
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		m := f.backup(t, changesT0, 100)
		putTestGeneration(t, f.backups, m, shopRevisions(100), []int{8}, repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}})
		base := []string{"log", "--store", "file://" + f.dir, "--cluster", "c", "/registry/namespaces/"}
		code, _, errOut := runCLI(t, nil, base...)
		if code != 2 || !strings.Contains(errOut, "--identity-file") || !strings.Contains(errOut, ".seg.zst.age") {
			t.Errorf("without identity: exit %d: %s", code, errOut)
		}
		key := writeFile(t, "key.txt", id.String()+"\n")
		code, out, errOut := runCLI(t, nil, append(base, "--identity-file", key)...)
		if code != 0 || strings.Count(out, "namespaces") != 2 {
			t.Errorf("with identity: exit %d: %s%s", code, out, errOut)
		}
	})
}

// TestListWindows: list shows each generation's window (from and
// through, revision and time, segments, state) in the table, and as
// the windows field of -o json, the existing fields unchanged.
func TestListWindows(t *testing.T) {
	f := newPruneFixture(t)
	m := f.backup(t, changesT0, 100)
	putTestGeneration(t, f.backups, m, shopRevisions(100), []int{3, 5}, repository.Encoding{Compression: "zstd"})
	orphan := f.object(t, changesT0.Add(time.Hour), 200) // never committed
	putTestGeneration(t, f.backups, orphan, shopRevisions(200)[:1], []int{1}, repository.Encoding{Compression: "zstd"})
	args := []string{"list", "--store", "file://" + f.dir, "--cluster", "c"}

	code, out, errOut := runCLI(t, nil, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"capture windows",
		m.ID + "  100 2026-12-01T09:00:00Z  108 2026-12-01T09:01:08Z  2         open",
		orphan.ID + "  200 2026-12-01T10:00:00Z  200 2026-12-01T10:00:00Z  0         NOT RECOVERABLE: its snapshot " + orphan.ID + " is not an intact committed backup",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, nil, append(args, "-o", "json")...)
	var got struct {
		Backups []json.RawMessage `json:"backups"`
		Orphans []string          `json:"orphans"`
		Windows []listedWindow    `json:"windows"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("exit %d: %v: %s", code, err, out)
	}
	if len(got.Backups) != 1 || len(got.Orphans) != 1 || len(got.Windows) != 2 {
		t.Fatalf("backups %d orphans %d windows %d", len(got.Backups), len(got.Orphans), len(got.Windows))
	}
	w := got.Windows[0]
	if w.Generation != m.ID || !w.Recoverable || w.FromRevision != 100 || w.Through != 108 || w.Segments != 2 ||
		!w.ThroughTime.Equal(changesT0.Add(68*time.Second)) || w.Sealed || w.Problem != "" {
		t.Errorf("window %+v", w)
	}
	if w := got.Windows[1]; w.Recoverable || w.Problem == "" || len(w.Stray) != 1 {
		t.Errorf("uncommitted window %+v", w)
	}
}

// TestVerifyChangesCommand: verify --changes passes a sound generation
// (exit 0, the revisions covered) and fails a damaged one (exit 1, the
// key and revisions of the problem, what is still verified).
func TestVerifyChangesCommand(t *testing.T) {
	f := newPruneFixture(t)
	m := f.backup(t, changesT0, 100)
	keys := putTestGeneration(t, f.backups, m, shopRevisions(100), []int{3, 1, 4}, repository.Encoding{Compression: "zstd"})
	args := []string{"verify", "--changes", "--store", "file://" + f.dir, "--cluster", "c"}
	code, out, errOut := runCLI(t, nil, args...)
	if code != 0 || !strings.Contains(out, "generation "+m.ID+" is good: revisions 100-108") || !strings.Contains(out, "3 segment(s), 8 revision(s)") {
		t.Fatalf("sound: exit %d: %s%s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(f.dir, filepath.FromSlash(keys[1])), []byte("not a segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, append(args, "--generation", m.ID)...)
	for _, want := range []string{"is BROKEN", keys[1], "revisions 104-104", "verified before it: revisions 100-103", "1 broken"} {
		if !strings.Contains(out, want) {
			t.Errorf("broken: lacks %q: %s", want, out)
		}
	}
	if code != 1 {
		t.Errorf("broken: exit %d, want 1: %s", code, errOut)
	}
	if code, _, _ := runCLI(t, nil, "verify", "--changes", "latest", "--store", "file://"+f.dir); code != 2 {
		t.Errorf("verify --changes latest: exit %d, want 2", code)
	}
}

// TestPruneDryRunChanges: prune --dry-run prints each generation with
// its window and decision, the anchor kept for a retained window, and
// the old generation to go before its snapshot; nothing changes.
func TestPruneDryRunChanges(t *testing.T) {
	now := time.Now().UTC().Add(30 * 24 * time.Hour).Truncate(time.Second)
	f := newPruneFixture(t)
	old := f.backup(t, now.Add(-20*24*time.Hour), 100)
	recent := f.backup(t, now.Add(-48*time.Hour), 300)
	f.backup(t, now.Add(-time.Hour), 500)
	put := func(m *repository.Manifest, end time.Time) {
		revs := shopRevisions(m.Revision)
		for i := range revs {
			revs[i].Received = end.Add(time.Duration(i-len(revs)) * time.Second)
		}
		putTestGeneration(t, f.backups, m, revs, []int{4, 4}, repository.Encoding{Compression: "zstd"})
	}
	put(old, now.Add(-19*24*time.Hour))
	put(recent, now.Add(-47*time.Hour))
	cfg := f.config(t)
	cfg.Retention.KeepDaily = 0
	cfg.Retention.ChangesWithin = Duration(7 * 24 * time.Hour)
	before := f.files(t)
	var out strings.Builder
	if err := runPrune(t.Context(), cfg, slog.New(slog.DiscardHandler), pruneOptions{dryRun: true, output: "table"}, &out, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"policy: keep-last 1, changes-within 7d",
		recent.ID + "  2d   2.0 KiB  keep (anchor)",
		old.ID + "  20d  2.0 KiB  delete",
		old.ID + "  100-108    18d ago  2         delete 3 object(s), before its snapshot",
		recent.ID + "  300-308    46h ago  2         keep (changes within 7d, newest generation)",
		"changes: 2 generation(s): 1 kept, 1 to delete",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run lacks %q:\n%s", want, out.String())
		}
	}
	if diff := cmp.Diff(before, f.files(t)); diff != "" {
		t.Errorf("dry run changed the store:\n%s", diff)
	}
}

// FuzzParseWhen: --since/--until never panic; what parses is an RFC 3339
// time or a non-negative duration before now.
func FuzzParseWhen(f *testing.F) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{"2026-12-01T09:30:00Z", "2026-12-01T09:30:00.5+01:00", "30m", "2h", "1d", "-1h", "", "yesterday", "14:05"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseWhen("since", s, now)
		if err != nil {
			if !strings.Contains(err.Error(), "--since") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if _, perr := time.Parse(time.RFC3339Nano, s); perr != nil && got.After(now) {
			t.Fatalf("%q: a duration ago gave %s, after now", s, got)
		}
	})
}
