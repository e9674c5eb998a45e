package drill_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// liveSession is a session to the source's real etcd, as the CLI and the
// agent dial it.
func liveSession(t testing.TB, endpoints []string) drill.LiveCluster {
	t.Helper()
	sess, err := snapshot.Dial(t.Context(), snapshot.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return drill.SessionLive(sess)
}

// TestPointInTimeDrill drills point-in-time restores of a generation
// captured from a real etcd against that live etcd: random targets pass
// with the live HashKV equal to the restored one; the agent's drill job
// picks its target inside [live compact revision, captured-through]; a
// compacted target is refused before anything is fetched; an unreachable
// live cluster is an error of the run, never a verdict; and a consistently
// forged chain (one value changed, every later segment re-chained to the
// forged hashes) parses and replays, but fails the HashKV check: a
// verdict, with its report stored.
func TestPointInTimeDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	s := restoretest.StartPITRSource(t, 120, nil)
	ctx := t.Context()
	live := liveSession(t, s.C.Endpoints())
	scratch := t.TempDir()
	opts := func(p *restore.PointInTimePlan, lc drill.LiveCluster) drill.Options {
		return drill.Options{
			Backups: s.Repo, Identities: s.IDs, ScratchDir: scratch, Version: "test",
			CheckPrefixes: []string{"/registry/"},
			PointInTime:   &drill.PointInTimeOptions{Plan: p, Live: lc},
		}
	}
	plan := func(t *testing.T, r int64) *restore.PointInTimePlan {
		t.Helper()
		l, err := s.Repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Revision: r}, s.IDs)
		if err != nil {
			t.Fatalf("plan %d: %v", r, err)
		}
		return p
	}

	t.Run("random targets pass", func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(21, 8))
		targets := []int64{s.Through}
		for range 3 {
			targets = append(targets, s.Compact+rnd.Int64N(s.Through-s.Compact+1))
		}
		for _, r := range targets {
			p := plan(t, r)
			d, err := drill.RunAndStore(ctx, opts(p, live))
			if err != nil {
				t.Fatalf("drill to %d: %v (report %+v)", r, err, d.Report)
			}
			rep := d.Report
			restoretest.AssertEmpty(t, scratch)
			if !d.Verdict || d.StoreErr != nil || !rep.Passed || rep.BackupID != p.Snapshot.ID {
				t.Fatalf("drill to %d: verdict %v, store %v, report %+v", r, d.Verdict, d.StoreErr, rep)
			}
			pt := rep.PointInTime
			if pt == nil || pt.TargetRevision != r || pt.SnapshotRevision != p.Snapshot.Revision || pt.Revisions != p.Revisions ||
				pt.Segments != len(p.Segments) || pt.Generation != s.Anchor.ID {
				t.Fatalf("drill to %d: point-in-time report %+v, plan %d revisions from %d in %d segments", r, pt, p.Revisions, p.Snapshot.Revision, len(p.Segments))
			}
			if len(p.Segments) > 0 && (pt.FirstSegment != p.Segments[0].Object.Key || pt.LastSegment != p.Segments[len(p.Segments)-1].Object.Key) {
				t.Errorf("drill to %d: segments %s … %s", r, pt.FirstSegment, pt.LastSegment)
			}
			want := s.Live(t, r)
			if pt.LiveHashKV != want.Hash || pt.LiveCompactRevision != want.Compact || pt.RestoredHashKV != pt.LiveHashKV || pt.RestoredCompactRevision != pt.LiveCompactRevision {
				t.Errorf("drill to %d: live %08x@%d, restored %08x@%d, the source %08x@%d", r, pt.LiveHashKV, pt.LiveCompactRevision, pt.RestoredHashKV, pt.RestoredCompactRevision, want.Hash, want.Compact)
			}
			var phases []string
			for _, ph := range rep.Phases {
				phases = append(phases, ph.Name)
			}
			if got := strings.Join(phases, ","); got != "fetch,decode,verify,replay,restore,boot,checks" {
				t.Errorf("phases %s", got)
			}
			t.Logf("drill to %d (%d revisions from %d segments): phases %+v, replay %.0f revisions/s", r, pt.Revisions, pt.Segments, rep.Phases, pt.RevisionsPerSecond)
		}
		// The stored report reads back with its point-in-time section.
		last, err := s.Repo.LastDrills(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for id, l := range last {
			if l.State() != repository.DrillPassed || l.PointInTime == nil {
				t.Errorf("last drill of %s: %s, %+v", id, l.State(), l.DrillReport)
			}
		}
	})

	t.Run("agent picks a target in the window", func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(4, 2))
		job := drill.Job{
			Backups: s.Repo,
			Options: drill.Options{Identities: s.IDs, ScratchDir: scratch, Version: "test"},
			Live:    func(context.Context) (drill.LiveCluster, func(), error) { return live, func() {}, nil },
			Int64n:  rnd.Int64N,
		}
		for range 2 {
			out, err := drill.RunJob(ctx, job, nil)
			if err != nil || out == nil || !out.Passed {
				t.Fatalf("agent drill: %v, %+v", err, out)
			}
			if out.TargetRevision < s.Compact || out.TargetRevision > s.Through {
				t.Errorf("agent drill target %d, outside [%d, %d]", out.TargetRevision, s.Compact, s.Through)
			}
			if out.Phases[drill.PhaseReplay] == 0 && out.TargetRevision > s.Later.Revision {
				t.Errorf("no replay phase: %+v", out.Phases)
			}
		}
	})

	t.Run("agent without captured changes drills a snapshot", func(t *testing.T) {
		repo := restoretest.DirRepo(t, t.TempDir())
		m := (&restoretest.Source{C: s.C}).Backup(t, repo, restoretest.AgeEncoding(s.IDs[0].(*age.X25519Identity)))
		job := drill.Job{
			Backups: repo,
			Options: drill.Options{Identities: s.IDs, ScratchDir: scratch, Version: "test"},
			Live: func(context.Context) (drill.LiveCluster, func(), error) {
				t.Error("connected to the live cluster without captured changes")
				return live, func() {}, nil
			},
			Int64n: func(int64) int64 { t.Error("a target picked without a window"); return 0 },
		}
		out, err := drill.RunJob(ctx, job, nil)
		if err != nil || out == nil || !out.Passed || out.TargetRevision != 0 || out.BackupID != m.ID {
			t.Fatalf("agent drill without changes: %v, %+v", err, out)
		}
		if _, ok := out.Phases[drill.PhaseReplay]; ok {
			t.Errorf("a plain drill ran a replay phase: %+v", out.Phases)
		}
	})

	t.Run("compacted target refused", func(t *testing.T) {
		r := s.Compact - 1
		if r <= s.Anchor.Revision {
			t.Fatalf("the fixture compacted at %d, right after the anchor: no compacted target inside the window to refuse", s.Compact)
		}
		d, err := drill.RunAndStore(ctx, opts(plan(t, r), live))
		if !errors.Is(err, drill.ErrTargetCompacted) || d.Verdict || drill.Verdict(err) {
			t.Fatalf("drill to compacted %d: %v, verdict %v", r, err, d.Verdict)
		}
		t.Logf("compacted target: %v", err)
		if len(d.Report.Phases) != 0 {
			t.Errorf("a refused target ran phases %+v", d.Report.Phases)
		}
	})

	t.Run("live cluster unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := l.Addr().String()
		l.Close()
		before, err := s.Repo.LastDrills(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := plan(t, s.Through)
		d, err := drill.RunAndStore(ctx, opts(p, liveSession(t, []string{"http://" + dead})))
		if err == nil || drill.Verdict(err) || d.Verdict {
			t.Fatalf("drill with the live cluster down: %v, verdict %v", err, d.Verdict)
		}
		t.Logf("live cluster down: %v", err)
		after, err := s.Repo.LastDrills(ctx)
		if err != nil {
			t.Fatal(err)
		}
		key := func(m map[string]*repository.LastDrill) string {
			if l := m[p.Snapshot.ID]; l != nil {
				return l.Key
			}
			return ""
		}
		if key(after) != key(before) {
			t.Errorf("a drill that reached no verdict stored report %s", key(after))
		}
	})

	t.Run("replay child gets no credentials", func(t *testing.T) {
		// The environment of a daemon with every kind of secret, and
		// lifeboat's memory settings: none of it reaches the replay.
		secrets := map[string]string{
			"AWS_SECRET_ACCESS_KEY": "aws-secret-0815", "AWS_SESSION_TOKEN": "aws-token-0815",
			"ETCDCTL_PASSWORD": "etcd-password-0815", "LIFEBOAT_IDENTITY_FILE": "/secret/identity-0815",
			"GOMEMLIMIT": "33554432", "GOGC": "50",
		}
		for k, v := range secrets {
			t.Setenv(k, v)
		}
		identity := s.IDs[0].(*age.X25519Identity).String()
		var args []string
		var cmdline, environ []byte
		restoretest.OnChildStarted(t, func(cmd *exec.Cmd) {
			if len(cmd.Args) < 2 || cmd.Args[1] != child.ReplayCommand {
				return
			}
			args = cmd.Args
			// What the kernel holds for it (exec has happened). A read
			// can come back empty while the new image is being set up:
			// read again for a moment.
			pid := strconv.Itoa(cmd.Process.Pid)
			for range 100 {
				cmdline, _ = os.ReadFile("/proc/" + pid + "/cmdline")
				environ, _ = os.ReadFile("/proc/" + pid + "/environ")
				if len(cmdline) > 0 && len(environ) > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		var logs syncbuf.Buffer
		o := opts(plan(t, s.Through), live)
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		d, err := drill.RunAndStore(ctx, o)
		if err != nil || !d.Report.Passed {
			t.Fatalf("drill: %v", err)
		}
		if len(args) != 2 {
			t.Fatalf("replay child's argv %q, want this program and %s only", args, child.ReplayCommand)
		}
		if len(cmdline) == 0 || len(environ) == 0 {
			t.Fatalf("no /proc view of the replay child (cmdline %q)", cmdline)
		}
		if got := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); len(got) != 2 || got[1] != child.ReplayCommand {
			t.Errorf("replay child's cmdline %q", got)
		}
		for _, kv := range strings.Split(string(environ), "\x00") {
			k, _, _ := strings.Cut(kv, "=")
			if _, ok := secrets[k]; ok {
				t.Errorf("replay child's environment has %s", kv)
			}
		}
		for _, v := range append(slices.Collect(maps.Values(secrets)), identity) {
			if strings.Contains(string(cmdline)+string(environ), v) {
				t.Errorf("replay child's cmdline or environment holds %q", v)
			}
		}
		// It ran without a soft limit, at the one-shot replay's GC.
		if want := fmt.Sprintf(`"gc_percent":%d,"memory_limit_bytes":%d`, restore.ReplayGCPercent, int64(math.MaxInt64)); !strings.Contains(logs.String(), want) {
			t.Errorf("no %s in the drill's log:\n%s", want, logs.String())
		}
	})

	// A replay child that crashes (etcd's storage code panics) fails the
	// drill with a verdict naming the crash; this process, standing in
	// for the agent, goes on, and its next drill passes.
	for _, tc := range []struct {
		name, want string
		do         func(t *testing.T, cmd *exec.Cmd)
	}{
		{name: "replay child panics", want: `"level":"panic"`, do: func(t *testing.T, cmd *exec.Cmd) {
			// The child waits for its job on stdin: damage the file
			// the drill verified before it opens it. etcd's backend
			// panics on a file that is no bbolt database.
			dbs, _ := filepath.Glob(filepath.Join(scratch, "lifeboat-drill-*", "snapshot.db"))
			if len(dbs) != 1 {
				t.Errorf("drill snapshots %v", dbs)
				return
			}
			if err := os.WriteFile(dbs[0], []byte(strings.Repeat("not a bbolt database\n", 4096)), 0o600); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hit bool
			restoretest.OnChildStarted(t, func(cmd *exec.Cmd) {
				if !hit && len(cmd.Args) > 1 && cmd.Args[1] == child.ReplayCommand {
					hit = true
					tc.do(t, cmd)
				}
			})
			p := plan(t, s.Through)
			d, err := drill.RunAndStore(ctx, opts(p, live))
			if !hit {
				t.Fatal("no replay child started")
			}
			if !errors.Is(err, drill.ErrFailed) || !d.Verdict || d.StoreErr != nil || d.Report.Passed {
				t.Fatalf("drill with its replay child crashed: %v, verdict %v, store %v", err, d.Verdict, d.StoreErr)
			}
			failed := d.Report.FailedChecks()
			if len(failed) != 1 || failed[0].Name != "replay" || !strings.Contains(failed[0].Actual, "replay process crashed") || !strings.Contains(failed[0].Actual, tc.want) {
				t.Fatalf("failed checks %+v, want replay naming the crash (%s)", failed, tc.want)
			}
			t.Logf("replay crash: %v", err)
			restoretest.AssertEmpty(t, scratch)
			restoretest.OnChildStarted(t, nil)
			if d, err := drill.RunAndStore(ctx, opts(p, live)); err != nil || !d.Report.Passed {
				t.Fatalf("the next drill: %v", err)
			}
		})
	}

	// A replay child killed with SIGKILL (an OOM killer, an operator)
	// is an error of the run: no verdict, no report stored.
	t.Run("replay child killed", func(t *testing.T) {
		var hit bool
		restoretest.OnChildStarted(t, func(cmd *exec.Cmd) {
			if !hit && len(cmd.Args) > 1 && cmd.Args[1] == child.ReplayCommand {
				hit = true
				if err := cmd.Process.Kill(); err != nil {
					t.Error(err)
				}
			}
		})
		p := plan(t, s.Through)
		d, err := drill.RunAndStore(ctx, opts(p, live))
		if !hit {
			t.Fatal("no replay child started")
		}
		if err == nil || errors.Is(err, drill.ErrFailed) || d.Verdict || !errors.Is(err, child.ErrKilled) ||
			!strings.Contains(err.Error(), "replay process") || !strings.Contains(err.Error(), "signal: killed") {
			t.Fatalf("drill with its replay child killed: %v, verdict %v: want an error of the run wrapping ErrKilled", err, d.Verdict)
		}
		if d.Report == nil || d.Report.Error == "" || len(d.Report.FailedChecks()) != 0 {
			t.Errorf("report %+v, want its error and no failed check", d.Report)
		}
		restoretest.AssertEmpty(t, scratch)
		restoretest.OnChildStarted(t, nil)
		if d, err := drill.RunAndStore(ctx, opts(p, live)); err != nil || !d.Report.Passed {
			t.Fatalf("the next drill: %v", err)
		}
	})

	t.Run("forged chain fails", func(t *testing.T) {
		// Runs last: it changes the store.
		p := plan(t, s.Through)
		if len(p.Segments) < 2 {
			t.Fatalf("plan to %d replays %d segments", s.Through, len(p.Segments))
		}
		// Forge a segment past the live compact revision (its revisions
		// are in the history both sides hash), and re-chain every later
		// one to the forged hashes: a chain consistent in itself.
		enc := restoretest.AgeEncoding(s.IDs[0].(*age.X25519Identity))
		forged := -1
		prev := ""
		for i, si := range p.Segments {
			seg, _, err := s.Repo.ReadSegment(ctx, si, s.IDs)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case forged < 0 && si.First > s.Compact:
				for j := range seg.Revisions {
					for k := range seg.Revisions[j].Ops {
						op := &seg.Revisions[j].Ops[k]
						if forged < 0 && !op.Delete && len(op.Value) > 0 {
							op.Value = append([]byte(nil), op.Value...)
							op.Value[0] ^= 1
							forged = i
						}
					}
				}
			case forged >= 0:
				seg.PrevHash = prev
			}
			if forged < 0 {
				continue
			}
			data, err := repository.EncodeStoredSegment(seg, enc)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.StoreDir, filepath.FromSlash(si.Object.Key)), data, 0o600); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			prev = hex.EncodeToString(sum[:])
		}
		if forged < 0 {
			t.Fatal("no segment with a PUT past the compaction to forge")
		}
		p = plan(t, s.Through)
		d, err := drill.RunAndStore(ctx, opts(p, live))
		if !errors.Is(err, drill.ErrFailed) || !d.Verdict || d.StoreErr != nil || d.Report.Passed {
			t.Fatalf("drill over a forged chain: %v, verdict %v, store %v", err, d.Verdict, d.StoreErr)
		}
		var failed []string
		for _, c := range d.Report.FailedChecks() {
			failed = append(failed, c.Name)
		}
		if strings.Join(failed, ",") != "hashkv" {
			t.Errorf("failed checks %v, want hashkv only (the forged chain parses and replays)", failed)
		}
		last, err := s.Repo.LastDrills(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l := last[p.Snapshot.ID]; l.State() != repository.DrillFailed || l.PointInTime == nil || l.PointInTime.TargetRevision != s.Through {
			t.Errorf("stored verdict of %s: %s", p.Snapshot.ID, l.State())
		}
		restoretest.AssertEmpty(t, scratch)
	})
}

// TestPointInTimeDrillDamage: a flipped byte in a stored segment is
// proven damage: the drill that reads it is a FAILED verdict with its
// report stored, the damage is recorded, and the window ends before the
// segment, so the agent's next drill (an earlier target) passes while
// the window problem stays.
func TestPointInTimeDrillDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	s := restoretest.StartPITRSource(t, 120, nil)
	ctx := t.Context()
	live := liveSession(t, s.C.Endpoints())
	scratch := t.TempDir()
	l, err := s.Repo.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Revision: s.Through}, s.IDs)
	if err != nil {
		t.Fatal(err)
	}
	bad := p.Segments[len(p.Segments)/2]
	path := filepath.Join(s.StoreDir, filepath.FromSlash(bad.Object.Key))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(9, 9))
	job := drill.Job{
		Backups: s.Repo,
		Options: drill.Options{Identities: s.IDs, ScratchDir: scratch, Version: "test"},
		Live:    func(context.Context) (drill.LiveCluster, func(), error) { return live, func() {}, nil },
		Int64n:  func(n int64) int64 { return n - 1 }, // the newest revision: past the damage
	}
	out, err := drill.RunJob(ctx, job, nil)
	if out == nil || out.RunError || out.Passed || !errors.Is(err, drill.ErrFailed) || !strings.Contains(err.Error(), bad.Object.Key) {
		t.Fatalf("drill over a damaged segment: %v, %+v: want a failed verdict naming %s", err, out, bad.Object.Key)
	}
	last, err := s.Repo.LastDrills(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := last[out.BackupID]; l.State() != repository.DrillFailed || l.PointInTime == nil {
		t.Errorf("stored verdict of %s: %s", out.BackupID, l.State())
	}
	l, err = s.Repo.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := l.DamageOf(bad.Object.Key); d == nil || d.FoundBy != repository.FoundByDrill {
		t.Fatalf("damage of %s not recorded: %+v", bad.Object.Key, l.Damage)
	}
	restoretest.AssertEmpty(t, scratch)

	// The next drill: an earlier target, passes; the window still
	// names the damage.
	job.Int64n = rnd.Int64N
	out, err = drill.RunJob(ctx, job, nil)
	if err != nil || out == nil || !out.Passed || out.TargetRevision >= bad.First {
		t.Fatalf("the next drill: %v, %+v: want a pass before revision %d", err, out, bad.First)
	}
	ws, err := s.Repo.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	var problem string
	for _, w := range ws {
		if w.Generation == p.Window.Generation {
			problem = w.Problem
		}
	}
	if !strings.Contains(problem, bad.Object.Key) || !strings.Contains(problem, "damaged") {
		t.Errorf("window problem after the passing drill: %q", problem)
	}
}

// TestPickTarget: the agent's point-in-time drill target is uniform over
// the revisions from the live compact revision to the newest
// captured-through revision that recoverable windows of the live
// history hold.
func TestPickTarget(t *testing.T) {
	anchor := func(id string) *repository.Manifest { return &repository.Manifest{ID: id, EtcdClusterID: "a1"} }
	w := func(gen string, from, through int64, a *repository.Manifest) repository.Window {
		return repository.Window{Generation: gen, From: from, Through: through, Anchor: a}
	}
	sealed := func(win repository.Window, reason string) repository.Window {
		win.Sealed, win.SealReason = true, reason
		return win
	}
	for _, tc := range []struct {
		name     string
		windows  []repository.Window
		compact  int64
		cluster  string
		want     []int64 // every revision that can be picked, in order
		noTarget bool
	}{
		{name: "one window above the compaction", windows: []repository.Window{w("g1", 100, 104, anchor("g1"))}, compact: 90, want: []int64{100, 101, 102, 103, 104}},
		{name: "compaction inside the window", windows: []repository.Window{w("g1", 100, 110, anchor("g1"))}, compact: 107, want: []int64{107, 108, 109, 110}},
		{name: "compacted past every window", windows: []repository.Window{w("g1", 100, 110, anchor("g1"))}, compact: 111, noTarget: true},
		{name: "two windows with a gap", windows: []repository.Window{sealed(w("g1", 10, 12, anchor("g1")), "compacted"), w("g2", 20, 21, anchor("g2"))}, compact: 11,
			want: []int64{11, 12, 20, 21}},
		{name: "overlapping windows count once", windows: []repository.Window{sealed(w("g1", 10, 13, anchor("g1")), "lock_lost"), w("g2", 12, 14, anchor("g2"))},
			want: []int64{10, 11, 12, 13, 14}},
		{name: "not recoverable skipped", windows: []repository.Window{w("g1", 10, 12, anchor("g1")), w("g2", 20, 22, nil)}, want: []int64{10, 11, 12}},
		{name: "history before a restore of the cluster skipped", windows: []repository.Window{w("g0", 1, 3, anchor("g0")), sealed(w("g1", 5, 50, anchor("g1")), "revision_backwards"), w("g2", 30, 32, anchor("g2"))},
			want: []int64{30, 31, 32}},
		{name: "another cluster's windows skipped", windows: []repository.Window{w("g1", 10, 11, &repository.Manifest{EtcdClusterID: "b2"}), w("g2", 20, 21, anchor("g2"))}, cluster: "a1",
			want: []int64{20, 21}},
		{name: "no windows", noTarget: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fixed random source: each k in [0, n) once, in order.
			var got []int64
			n := int64(-1)
			for k := int64(0); n < 0 || k < n; k++ {
				rev, ok := drill.PickTarget(tc.windows, tc.compact, tc.cluster, func(size int64) int64 { n = size; return k })
				if !ok {
					if !tc.noTarget {
						t.Fatalf("no target, want %v", tc.want)
					}
					return
				}
				got = append(got, rev)
			}
			if tc.noTarget {
				t.Fatalf("picked %v, want none", got)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("picked %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("picked %v, want %v", got, tc.want)
				}
			}
		})
	}
}
