package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/cheggaaa/pb/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lifeboat-dev/lifeboat/internal/diskspace"
	"github.com/lifeboat-dev/lifeboat/internal/logfield"
	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

type restoreOptions struct {
	ref           string
	before        string
	dataDir       string
	walDir        string
	name          string
	cluster       string
	token         string
	peerURLs      []string
	bumpRevision  uint64
	markCompacted bool
	force         bool
	dryRun        bool
	owner         string
	// toRevision and toTime are the point-in-time target (0 and "": none).
	toRevision int64
	toTime     string
	// kubeadm restores a kubeadm control-plane node in place (package
	// restore/kubeadm); rollback undoes its last restore.
	kubeadm, rollback bool
	// waitMembers bounds restore --kubeadm's wait for the other members
	// of a control plane of several.
	waitMembers time.Duration
	// withKit lays the backup's recovery kit back below the node's root
	// before restore --kubeadm restores etcd.
	withKit bool
	// keepLifeboatKeys keeps lifeboat's own keys (the agent's lock) in
	// the restored data (restore.RemoveOwnKeys removes them otherwise).
	keepLifeboatKeys bool
}

// target is the point-in-time target the options give, if any (a
// duration ago counts from now).
func (o restoreOptions) target() (restore.Target, bool, error) {
	return o.targetAt(time.Now())
}

// targetAt is target with a duration ago counted from now.
func (o restoreOptions) targetAt(now time.Time) (restore.Target, bool, error) {
	switch {
	case o.toRevision == 0 && o.toTime == "":
		return restore.Target{}, false, nil
	case o.toRevision != 0 && o.toTime != "":
		return restore.Target{}, false, usagef("--to-revision and --to-time are mutually exclusive: give one")
	case o.toRevision < 0:
		return restore.Target{}, false, usagef("--to-revision %d: revisions start at 1", o.toRevision)
	case o.toRevision > 0:
		return restore.Target{Revision: o.toRevision}, true, nil
	}
	t, err := parseTime("--to-time", o.toTime, now)
	if err != nil {
		return restore.Target{}, false, err
	}
	return restore.Target{Time: t}, true, nil
}

func newRestoreCmd(a *app) *cobra.Command {
	var o restoreOptions
	c := &cobra.Command{
		Use:   "restore [ID|latest|latest-proven] --data-dir DIR",
		Short: "Restore a backup into a member's data dir, or every member's (--initial-cluster, --data-dir /restore/{name})",
		Long: `restore fetches a backup from the store, decrypts and decompresses it,
checks its sha256 against the manifest and etcd's own trailer, checks the
bbolt file, and restores it with etcdutl's snapshot restore into --data-dir.

One member:    lifeboat restore latest --data-dir /var/lib/etcd --name m1 --owner etcd \
                 --initial-cluster m1=https://10.0.0.1:2380,m2=...,m3=...
Whole cluster: lifeboat restore latest --data-dir '/restore/{name}' \
                 --initial-cluster m1=https://10.0.0.1:2380,m2=...,m3=...
               writes every member's data dir from one download.

One member of a single-member cluster: --name m1 --initial-advertise-peer-urls URL.
There is no default member name or peer URL (exit 2 without them).

It prints the etcd flags each member needs to start. A data dir whose etcd
still runs is refused (named from /proc), even with --force. A non-empty data
dir is refused; --force moves it aside to <dir>.lifeboat-old-<time> (never deletes).
--dry-run restores into a temporary dir under the drill scratch dir, boots
it, checks it, removes it, and changes nothing else.

Kubernetes: restore with --bump-revision 1000000000 --mark-compacted so that
clients watching from the old revisions re-list instead of missing changes.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.ref = args[0]
			}
			if cmd.Flags().Changed("to-revision") && o.toRevision == 0 {
				return usagef("--to-revision 0: revisions start at 1")
			}
			_, pitr, err := o.target()
			if err != nil {
				return err
			}
			if o.kubeadm || o.rollback || o.withKit {
				return kubeadmRestoreCmd(cmd, a, o, pitr)
			}
			switch {
			case cmd.Flags().Changed("wait-members"):
				return usagef("--wait-members goes with --kubeadm")
			case pitr && (o.ref != "" || o.before != ""):
				return usagef("--to-revision and --to-time pick the snapshot themselves: give no backup id and no --before with them")
			case o.ref == "" && o.before == "" && !pitr:
				return usagef("give a backup id, latest, --before TIME, or a point in time (--to-revision R, --to-time T)")
			case o.ref != "" && o.ref != "latest" && o.before != "":
				return usagef("--before picks the backup: give it alone or with latest, not with an id")
			case o.dataDir == "" && !o.dryRun:
				return usagef("--data-dir is required (a template with {name} restores every member of --initial-cluster)")
			case o.markCompacted && o.bumpRevision == 0:
				return usagef("--mark-compacted needs --bump-revision N (e.g. 1000000000)")
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runRestore(cmd.Context(), a, cfg, a.logger(cfg), o, time.Now())
		},
	}
	restoreFlags(c, &o)
	return c
}

// restoreFlags defines restore's flags into o.
func restoreFlags(c *cobra.Command, o *restoreOptions) {
	f := c.Flags()
	f.StringVar(&o.before, "before", "", "restore the newest backup taken before TIME (RFC 3339, 2006-01-02 15:04 UTC, or an age like 2h)")
	f.StringVar(&o.dataDir, "data-dir", "", "member data dir, or a template with {name} for every member")
	f.StringVar(&o.walDir, "wal-dir", "", "dedicated WAL dir (template with {name} for several members)")
	f.StringVar(&o.name, "name", "", "the member to restore (etcd --name; required unless --initial-cluster names one member or a {name} template restores them all)")
	f.StringVar(&o.cluster, "initial-cluster", "", "the restored cluster: name=peerURL,... (or, for one member, --name with --initial-advertise-peer-urls)")
	f.StringVar(&o.token, "initial-cluster-token", "", "token of the restored cluster (default lifeboat-<backup id>: the same for every member, never the old cluster's)")
	f.StringSliceVar(&o.peerURLs, "initial-advertise-peer-urls", nil, "the member's peer URLs: with --name, a single-member cluster without --initial-cluster")
	f.Uint64Var(&o.bumpRevision, "bump-revision", 0, "raise the revision by N (Kubernetes: 1000000000, see the README)")
	f.BoolVar(&o.markCompacted, "mark-compacted", false, "mark every revision up to the bumped one compacted, so watchers re-list (needs --bump-revision)")
	f.BoolVar(&o.force, "force", false, "move a non-empty data dir aside to <dir>.lifeboat-old-<time> instead of refusing")
	f.StringVar(&o.owner, "owner", "", "give the restored dirs to USER[:GROUP] (names or numeric ids; default group: the user's), e.g. etcd")
	f.BoolVar(&o.dryRun, "dry-run", false, "restore into a temporary dir, boot it, check it, remove it; change nothing else (with --to-revision/--to-time: fetch, check and replay into a temporary file)")
	f.Int64Var(&o.toRevision, "to-revision", 0, "point in time: restore the state after revision R (a snapshot plus the captured changes up to R)")
	f.StringVar(&o.toTime, "to-time", "", "point in time: restore the state after the last revision received at or before T (2026-11-30T11:00:00Z, 2026-11-30 11:00:00 in UTC, or a duration ago: 90m)")
	f.BoolVar(&o.kubeadm, "kubeadm", false, "restore this kubeadm control-plane node in place: stop etcd and the apiserver (static pods), restore, swap the data dir (the old one kept), start and check both; a rerun finishes an interrupted one (docs/restore.md#kubeadm-control-plane)")
	f.BoolVar(&o.keepLifeboatKeys, "keep-lifeboat-keys", false, "keep lifeboat's own keys (the agent's lock /lifeboat/lock/… with its lease) in the restored data; by default they are removed, one revision above the backup's")
	f.BoolVar(&o.withKit, "with-kit", false, "with --kubeadm: first lay the backup's recovery kit (its PKI and encryption config; the newest kit when the backup has none) back below / as kit restore --force does (what is there is moved aside, kept)")
	f.DurationVar(&o.waitMembers, "wait-members", 30*time.Minute, "with --kubeadm on a control plane of several members: how long to wait for the other nodes' members to be restored and started (this node's restore waits for a majority)")
	f.BoolVar(&o.rollback, "rollback", false, "with --kubeadm: put the old data dir and the manifests back (the restored data dir is kept)")
}

// kubeadmRestoreCmd checks the flags of restore --kubeadm (the
// revision bump and compaction on by default) and runs it.
func kubeadmRestoreCmd(cmd *cobra.Command, a *app, o restoreOptions, pitr bool) error {
	f := cmd.Flags()
	switch {
	case !o.kubeadm && o.withKit:
		return usagef("--with-kit goes with --kubeadm")
	case !o.kubeadm:
		return usagef("--rollback goes with --kubeadm")
	case o.withKit && o.rollback:
		return usagef("--rollback puts the old data dir back; --with-kit goes with a restore, not with it")
	case o.dataDir != "" || o.walDir != "" || o.name != "" || len(o.peerURLs) > 0 || o.force || o.owner != "":
		return usagef("--kubeadm reads the member, its data dir and URLs from /etc/kubernetes/manifests/etcd.yaml: give no --data-dir, --wal-dir, --name, --initial-advertise-peer-urls, --force or --owner")
	case o.rollback && (o.ref != "" || o.before != "" || pitr):
		return usagef("--rollback undoes the last restore: give no backup and no point in time")
	case pitr && (o.ref != "" || o.before != ""):
		return usagef("--to-revision and --to-time pick the snapshot themselves: give no backup id and no --before with them")
	case o.ref != "" && o.ref != "latest" && o.before != "":
		return usagef("--before picks the backup: give it alone or with latest, not with an id")
	}
	if !f.Changed("bump-revision") {
		o.bumpRevision = 1_000_000_000
	}
	if !f.Changed("mark-compacted") {
		o.markCompacted = o.bumpRevision > 0
	}
	if o.markCompacted && o.bumpRevision == 0 {
		return usagef("--mark-compacted needs --bump-revision N (e.g. 1000000000)")
	}
	cfg, err := a.config()
	if err != nil {
		return err
	}
	return runRestoreKubeadm(cmd.Context(), a, cfg, a.logger(cfg), o, time.Now())
}

// parseBefore reads --before as every time flag (parseTime).
func parseBefore(s string, now time.Time) (time.Time, error) {
	return parseTime("--before", s, now)
}

// selectBackup resolves the backup a restore or drill means.
func selectBackup(ctx context.Context, b *repository.Repo, ref, before string, now time.Time) (*repository.Manifest, error) {
	if before != "" {
		t, err := parseBefore(before, now)
		if err != nil {
			return nil, err
		}
		return repository.SelectBefore(ctx, b, t)
	}
	m, err := repository.Select(ctx, b, ref, rand.IntN)
	if err != nil && !repository.ValidID(ref) && ref != "latest" && ref != "latest-proven" && ref != "random" {
		return nil, usageError{err}
	}
	return m, err
}

func runRestore(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o restoreOptions, now time.Time) (err error) {
	out := a.stdout
	owner, err := o.parseOwner()
	if err != nil {
		return err
	}
	// The options' mistakes first, before the store is read: the token
	// is the backup's, a placeholder will do to check them.
	if _, err := planRestore(restoreOpts(o, "lifeboat-check", owner, now), o); err != nil {
		return err
	}
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	ids, err := identities(cfg)
	if err != nil {
		return err
	}
	m, plan, release, err := restoreSource(ctx, backups, ids, o, now)
	if err != nil {
		return err
	}
	defer release()
	if plan == nil {
		defer func() { err = withPrevious(ctx, backups, o.ref, m, err) }()
	}
	ropts := restoreOpts(o, repository.RestoreToken(m.ID), owner, now)
	fmt.Fprintf(out, "backup %s: revision %d, %d keys, %s, taken %s from %s\n",
		m.ID, m.Revision, m.TotalKeys, units.Bytes(m.DBSize), m.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC"), m.Endpoint)
	if plan != nil {
		printPlan(out, plan)
	}
	planned, err := planRestore(ropts, o)
	if err != nil {
		return err
	}
	if o.dryRun && plan == nil {
		return runRestoreDryRun(ctx, a, cfg, lg, o, backups, ids, m, planned)
	}
	if err := checkRestoreSpace(cfg, m, planned, o.bumpRevision == 0); err != nil {
		return err
	}
	spool, err := fetchVerified(ctx, a, cfg, lg, backups, ids, m)
	if spool != "" {
		defer writeback.Remove(spool) // in steps: other members may share the disk
	}
	if err != nil {
		return err
	}
	if plan != nil {
		if err := replayPlan(ctx, out, spool, plan, backups, ids, lg); err != nil {
			return err
		}
		// The replayed file is no longer the snapshot its trailer hashed
		// (checked by fetchVerified): etcdutl must not check it again.
		ropts.SkipHashCheck = true
		if o.dryRun {
			fmt.Fprintln(out, "dry run: the point in time replays; no data dir was written and the result was not booted")
			if len(planned) > 0 {
				var members []restore.RestoredMember
				for _, p := range planned {
					members = append(members, p.RestoredMember)
				}
				printStartFlags(out, members, o)
			}
			return nil
		}
	}
	if _, err := removeOwnKeys(ctx, out, spool, o.keepLifeboatKeys); err != nil {
		return err
	}
	// fetchVerified checked the file (its trailer among the rest; the key
	// removal changed it since): etcdutl need not read it again, and it is
	// the restore's to make the first member's database where it lies.
	ropts.SkipHashCheck, ropts.MoveSnapshot = true, true
	ropts.SnapshotPath = spool
	return restoreMembers(ctx, out, ropts, m, o)
}

// restoreOpts are the restore options o gives; token is the cluster
// token unless --initial-cluster-token gives one.
func restoreOpts(o restoreOptions, token string, owner *restore.Owner, now time.Time) restore.RestoreOptions {
	if o.token != "" {
		token = o.token
	}
	return restore.RestoreOptions{
		DataDir: o.dataDir, WALDir: o.walDir, Name: o.name, InitialCluster: o.cluster,
		InitialClusterToken: token, PeerURLs: o.peerURLs,
		RevisionBump: o.bumpRevision, MarkCompacted: o.markCompacted, Force: o.force,
		Now: func() time.Time { return now }, Owner: owner,
	}
}

// removeOwnKeys removes lifeboat's own keys from the fetched (and
// replayed) snapshot at spool, unless keep, and says what it removed.
// When the removal falls back to etcd's store (restore.RemoveOwnKeys),
// the store rebuilds its key index as a replay does: the soft memory
// limit is lifted first (under it the GC ran without end: about a third
// of the CPU of a restore of 3 members at 8 GB).
func removeOwnKeys(ctx context.Context, out io.Writer, spool string, keep bool) (restore.OwnKeys, error) {
	if keep {
		return restore.OwnKeys{}, nil
	}
	liftMemoryLimit()
	own, err := restore.RemoveOwnKeys(ctx, spool)
	if err != nil {
		return own, err
	}
	if len(own.Keys) > 0 {
		fmt.Fprintf(out, "removed lifeboat's own keys (revision %d; --keep-lifeboat-keys keeps them): %s", own.Revision, strings.Join(own.Keys, ", "))
		if len(own.Leases) > 0 {
			fmt.Fprintf(out, "; %d lease(s) revoked", len(own.Leases))
		}
		fmt.Fprintln(out)
	}
	return own, nil
}

// parseOwner is --owner's owner (nil: none).
func (o restoreOptions) parseOwner() (*restore.Owner, error) {
	if o.owner == "" {
		return nil, nil
	}
	ow, err := restore.ParseOwner(o.owner)
	if err != nil {
		return nil, usagef("--owner: %w", err)
	}
	return &ow, nil
}

// restoreSource is the backup to restore: the one --backup or --before
// selects, or, for a point in time, the plan's snapshot with the plan
// (its objects held until release, and lifeboat's soft memory limit
// lifted for the replay).
func restoreSource(ctx context.Context, backups *repository.Repo, ids []age.Identity, o restoreOptions, now time.Time) (*repository.Manifest, *restore.PointInTimePlan, func(), error) {
	target, pitr, err := o.target()
	if err != nil {
		return nil, nil, nil, err
	}
	if !pitr {
		m, err := selectBackup(ctx, backups, o.ref, o.before, now)
		return m, nil, func() {}, err
	}
	plan, err := planPointInTime(ctx, backups, ids, target, "restore", "changed")
	if err != nil {
		return nil, nil, nil, err
	}
	return plan.Snapshot, plan, repository.Hold(plan.Keys(backups)...), nil
}

// planPointInTime lists the store and plans a point-in-time what
// (restore, drill) to target (a failure there: "nothing was" done), and
// lifts lifeboat's soft memory limit for the replay.
func planPointInTime(ctx context.Context, backups *repository.Repo, ids []age.Identity, target restore.Target, what, done string) (*restore.PointInTimePlan, error) {
	l, err := backups.List(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := restore.PlanPointInTime(ctx, backups, l, target, ids)
	if err != nil {
		return nil, fmt.Errorf("point-in-time %s: %w: nothing was %s", what, err, done)
	}
	liftMemoryLimit()
	return plan, nil
}

// planRestore plans the members of a restore into --data-dir (none
// without it) and refuses non-empty directories without --force, unless
// it is a dry run, which reports them.
func planRestore(ropts restore.RestoreOptions, o restoreOptions) ([]restore.PlannedMember, error) {
	if o.dataDir == "" {
		return nil, nil
	}
	planned, err := restore.Plan(ropts)
	if errors.Is(err, restore.ErrDataDirInUse) {
		return nil, err
	}
	if err != nil {
		return nil, usageError{err}
	}
	var refused []string
	for _, p := range planned {
		for _, d := range p.NonEmpty {
			if !o.force {
				refused = append(refused, d)
			}
		}
	}
	if len(refused) > 0 && !o.dryRun {
		return nil, fmt.Errorf("%s: %w: nothing was changed (use --force to move it aside)", strings.Join(refused, ", "), restore.ErrDataDirNotEmpty)
	}
	return planned, nil
}

// walSegment is what etcd's WAL takes in a restored member: one
// preallocated segment.
const walSegment = 64 << 20

// checkRestoreSpace refuses a restore of backup m whose spool or members'
// directories lack the room, before anything is fetched: the spool holds
// the database, each member a copy of it and a WAL segment, summed per
// file system; the first member's database is the spool itself when it
// is moved there (moves: restore.RestoreOptions.MoveSnapshot, no revision
// bump; on one file system). A moved-aside directory is renamed, and takes no
// room.
func checkRestoreSpace(cfg *Config, m *repository.Manifest, planned []restore.PlannedMember, moves bool) error {
	needs := []diskspace.Need{{Dir: cfg.Snapshot.SpoolDir, Bytes: m.DBSize, What: "the spool (the backup's database)"}}
	for i, p := range planned {
		db := m.DBSize
		if i == 0 && moves && diskspace.SameFileSystem(cfg.Snapshot.SpoolDir, p.DataDir) {
			db = 0 // the spool, moved into it
		}
		if p.WALDir == "" {
			needs = append(needs, diskspace.Need{Dir: p.DataDir, Bytes: db + walSegment, What: "member " + p.Name})
			continue
		}
		needs = append(needs, diskspace.Need{Dir: p.DataDir, Bytes: db, What: "member " + p.Name},
			diskspace.Need{Dir: p.WALDir, Bytes: walSegment, What: "member " + p.Name + "'s WAL"})
	}
	if err := diskspace.Check(needs); err != nil {
		return fmt.Errorf("%w: nothing was fetched or changed", err)
	}
	return nil
}

// fetchVerified fetches backup m into the spool directory and verifies
// it against its manifest, and returns the file, also with an error once
// it was named: the caller removes it.
func fetchVerified(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, backups *repository.Repo, ids []age.Identity, m *repository.Manifest) (string, error) {
	spoolDir := cfg.Snapshot.SpoolDir
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		return "", fmt.Errorf("spool directory %s: %w", spoolDir, err)
	}
	spool := filepath.Join(spoolDir, fmt.Sprintf("lifeboat-restore-%s-%d.db", m.ID, os.Getpid()))
	p := newProgress(a.stderr, lg, "download", m.ObjectSize)
	start := time.Now()
	_, err := repository.Fetch(ctx, backups, m, spool, repository.FetchOptions{Identities: ids, Progress: p.update})
	p.done()
	if err != nil {
		noteDamage(ctx, backups, err, nil, repository.FoundByRestore, lg)
		return spool, fmt.Errorf("fetch backup %s: %w", m.ID, err)
	}
	if _, err := repository.CheckFile(ctx, spool, m); err != nil {
		return spool, fmt.Errorf("backup %s failed verification, nothing was restored: %w", m.ID, err)
	}
	fmt.Fprintf(a.stdout, "fetched and verified in %.1fs: object sha256, etcd's sha256 trailer, bbolt check, revision, keys and hashes match the manifest\n", time.Since(start).Seconds())
	return spool, nil
}

// replayPlan replays the point-in-time plan onto the fetched snapshot
// spool and says what it applied.
func replayPlan(ctx context.Context, out io.Writer, spool string, plan *restore.PointInTimePlan, backups *repository.Repo, ids []age.Identity, lg *slog.Logger) error {
	st, err := restore.Replay(ctx, spool, plan, backups, ids, lg)
	if err != nil {
		noteDamage(ctx, backups, err, plan.Segments, repository.FoundByRestore, lg)
		return fmt.Errorf("point-in-time restore to revision %d: %w: nothing was restored", plan.Revision, err)
	}
	fmt.Fprintf(out, "replayed %d revisions (%d operations, %d segments, %d leases recreated) onto snapshot %s in %.1fs (%.0f revisions/s): the database is at revision %d\n",
		st.Revisions, st.Ops, st.Segments, st.Leases, plan.Snapshot.ID, st.Seconds, st.Rate(), st.To)
	return nil
}

// restoreMembers restores the members of ropts from backup m's file,
// saying each, and prints how to start them.
func restoreMembers(ctx context.Context, out io.Writer, ropts restore.RestoreOptions, m *repository.Manifest, o restoreOptions) error {
	ropts.OnMember = func(rm restore.RestoredMember) {
		fmt.Fprintf(out, "restored member %s into %s (%.1fs)\n", rm.Name, rm.DataDir, rm.Seconds)
		if rm.MovedAside != "" {
			fmt.Fprintf(out, "  the old data dir is kept at %s\n", rm.MovedAside)
		}
		if rm.MovedAsideWAL != "" {
			fmt.Fprintf(out, "  the old WAL dir is kept at %s\n", rm.MovedAsideWAL)
		}
	}
	res, err := restore.Restore(ctx, ropts)
	if err != nil {
		return fmt.Errorf("restore backup %s: %w (nothing was left changed)", m.ID, err)
	}
	printStartFlags(out, res.Members, o)
	printKubeadmChecklist(out, kubeadmRoot, res.Members, o)
	printKitHint(out, m)
	return nil
}

// printPlan names what a point-in-time restore replays.
func printPlan(out io.Writer, p *restore.PointInTimePlan) {
	what := fmt.Sprintf("revision %d", p.Revision)
	if p.Target.Revision == 0 {
		what = fmt.Sprintf("%s is revision %d", p.Target, p.Revision)
	}
	fmt.Fprintf(out, "point in time: %s of generation %s (%s)\n", what, p.Window.Generation, windowRange(p.Window))
	if len(p.Segments) == 0 {
		fmt.Fprintf(out, "  snapshot %s is at revision %d: 0 revisions to replay, no segments\n", p.Snapshot.ID, p.Snapshot.Revision)
		return
	}
	fmt.Fprintf(out, "  snapshot %s at revision %d, then %d revisions (%d-%d) replayed from %d segments:\n",
		p.Snapshot.ID, p.Snapshot.Revision, p.Revisions, p.Snapshot.Revision+1, p.Revision, len(p.Segments))
	for i, s := range p.Segments {
		if len(p.Segments) > 6 && i == 3 {
			fmt.Fprintf(out, "    … %d more …\n", len(p.Segments)-5)
		}
		if len(p.Segments) > 6 && i >= 3 && i < len(p.Segments)-2 {
			continue
		}
		fmt.Fprintf(out, "    %s\n", s.Object.Key)
	}
	if p.Checked > 0 {
		fmt.Fprintf(out, "  %d segment(s) between two progress markers read to resolve the time\n", p.Checked)
	}
	fmt.Fprintln(out, "  the replayed segments' chain (hashes, fencing tokens) is checked as they are read, before anything is restored")
}

func windowRange(w repository.Window) string {
	return fmt.Sprintf("revisions %d-%d, %s to %s", w.From, w.Through,
		w.FromTime.UTC().Format(time.RFC3339), w.ThroughTime.UTC().Format(time.RFC3339))
}

// printStartFlags prints how to start each restored member.
func printStartFlags(out io.Writer, members []restore.RestoredMember, o restoreOptions) {
	if o.bumpRevision > 0 {
		fmt.Fprintf(out, "\nthe revision was raised by %d", o.bumpRevision)
		if o.markCompacted {
			fmt.Fprint(out, " and marked compacted: watchers of the old cluster will be told to re-list")
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "\nstart each member with these flags, plus its usual client URL, TLS and tuning flags:")
	for _, m := range members {
		flags := m.EtcdFlags()
		fmt.Fprintf(out, "\n  # %s\n", m.Name)
		if !slices.Contains(flags, "--listen-peer-urls") {
			fmt.Fprintln(out, "  # its peer URLs name hosts: also give --listen-peer-urls with an IP of that host (etcd listens on IPs)")
		}
		fmt.Fprintf(out, "  etcd %s\n", shellJoin(flags))
	}
	printQuota(out, members)
	fmt.Fprintln(out, "\nstart all members of a restored cluster before checking its health; keep the old members stopped.")
}

// printQuota tells to raise etcd's backend quota when the restored
// database is larger than etcd's default allows: without it the restored
// cluster refuses every write ("database space exceeded").
func printQuota(out io.Writer, members []restore.RestoredMember) {
	if len(members) == 0 {
		return
	}
	fi, err := os.Stat(filepath.Join(members[0].DataDir, "member", "snap", "db"))
	if err != nil || child.QuotaFor(fi.Size()) == child.DefaultQuota {
		return
	}
	fmt.Fprintf(out, "\nthe database is %s, near or above etcd's default quota (2 GiB): also give --quota-backend-bytes %d (or the old cluster's, if larger), or etcd refuses writes with \"database space exceeded\"\n",
		units.Bytes(fi.Size()), child.QuotaFor(fi.Size()))
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`!*?[]{}();&|<>~#") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func runRestoreDryRun(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o restoreOptions, backups *repository.Repo, ids []age.Identity, m *repository.Manifest, planned []restore.PlannedMember) error {
	out := a.stdout
	fmt.Fprintln(out, "dry run: nothing outside a temporary directory is changed")
	var refused []string
	for _, p := range planned {
		fmt.Fprintf(out, "  would restore member %s into %s\n", p.Name, p.DataDir)
		for _, d := range p.NonEmpty {
			if o.force {
				fmt.Fprintf(out, "    %s is not empty: --force would move it aside to %s.lifeboat-old-<time>\n", d, d)
			} else {
				fmt.Fprintf(out, "    %s is not empty: the restore would refuse it (use --force to move it aside)\n", d)
				refused = append(refused, d)
			}
		}
	}
	p := newProgress(a.stderr, lg, "download", m.ObjectSize)
	rep, err := drill.Run(ctx, drill.Options{
		Backups: backups, Manifest: m, Identities: ids,
		ScratchDir: cfg.Drill.ScratchDir, EtcdBinary: cfg.Drill.EtcdBinary, CheckPrefixes: cfg.Drill.CheckPrefixes,
		Timeout: cfg.Drill.Timeout, RevisionBump: o.bumpRevision, MarkCompacted: o.markCompacted,
		Progress: p.update, Logger: lg, Version: Version,
	})
	p.done()
	if rep != nil {
		printDrillReport(out, rep)
	}
	if err != nil {
		return fmt.Errorf("dry run of backup %s: %w", m.ID, err)
	}
	if len(refused) > 0 {
		return fmt.Errorf("dry run: the backup restores, but %s: %w", strings.Join(refused, ", "), restore.ErrDataDirNotEmpty)
	}
	if len(planned) > 0 {
		var members []restore.RestoredMember
		for _, p := range planned {
			members = append(members, p.RestoredMember)
		}
		printStartFlags(out, members, o)
	}
	return nil
}

// progress shows a download: a bar on a terminal, otherwise a log line
// every 10%, at most one a second.
type progress struct {
	bar     *pb.ProgressBar
	lg      *slog.Logger
	what    string
	total   int64
	nextLog int64
	start   time.Time
	lastLog time.Time
	now     func() time.Time // the clock (tests drive it)
}

func newProgress(w io.Writer, lg *slog.Logger, what string, total int64) *progress {
	p := &progress{lg: lg, what: what, total: total, start: time.Now(), now: time.Now}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) && total > 0 {
		p.bar = pb.New64(total).Set(pb.Bytes, true).SetWriter(f).SetRefreshRate(200 * time.Millisecond)
		p.bar.SetTemplateString(`{{string . "prefix"}} {{counters . }} {{bar . }} {{percent . }} {{speed . }}`)
		p.bar.Set("prefix", what)
		p.bar.Start()
	}
	return p
}

func (p *progress) update(stored, _ int64) {
	if p.bar != nil {
		p.bar.SetCurrent(stored)
		return
	}
	if p.total <= 0 || stored < p.nextLog {
		return
	}
	now := p.now()
	if !p.lastLog.IsZero() && now.Sub(p.lastLog) < time.Second {
		return
	}
	p.lastLog = now
	pct := stored * 100 / p.total
	p.lg.Info(p.what+" progress", "bytes", stored, "total_bytes", p.total, "percent", pct, "seconds", logfield.Seconds(now.Sub(p.start)))
	p.nextLog = (pct/10 + 1) * p.total / 10
}

func (p *progress) done() {
	if p.bar != nil {
		p.bar.Finish()
	}
}
