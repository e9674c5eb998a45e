package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/kubeadm"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// kubeadmRoot is where restore looks for a kubeadm control-plane node's
// files (tests point it at a directory of their own).
var kubeadmRoot = "/"

// isKubeadmNode reports whether this host looks like a kubeadm
// control-plane node: /etc/kubernetes/manifests (the static pods) and
// /etc/kubernetes/pki/etcd (its etcd's CA) both exist.
func isKubeadmNode(root string) bool {
	for _, d := range []string{"etc/kubernetes/manifests", "etc/kubernetes/pki/etcd"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// printKubeadmChecklist prints, on a kubeadm control-plane node, the steps
// around the restore (docs/restore.md, "kubeadm control plane"): static
// pods out and back, where the data dir goes, how the printed flags map
// onto etcd.yaml, and what to restart. It prints nothing elsewhere.
func printKubeadmChecklist(out io.Writer, root string, members []restore.RestoredMember, o restoreOptions) {
	if !isKubeadmNode(root) {
		return
	}
	manifests := filepath.Join(root, "etc/kubernetes/manifests")
	fmt.Fprintln(out, "\nkubeadm control-plane node (/etc/kubernetes/manifests): with a single etcd member, lifeboat restore --kubeadm does all of this in one command;")
	fmt.Fprintln(out, "by hand, the rest of the procedure, on every control-plane node (docs/restore.md#kubeadm-control-plane):")
	var still []string
	for _, m := range []string{"etcd.yaml", "kube-apiserver.yaml"} {
		if _, err := os.Stat(filepath.Join(manifests, m)); err == nil {
			still = append(still, m)
		}
	}
	if len(still) > 0 {
		fmt.Fprintf(out, "  ! %s still in /etc/kubernetes/manifests: the old member may come back: move them out on every node first\n", strings.Join(still, " and "))
	}
	fmt.Fprintln(out, "  1. static pods out (done before the restore?): mv /etc/kubernetes/manifests/{etcd,kube-apiserver}.yaml /root/")
	fmt.Fprintln(out, "     and wait until `crictl ps --name 'etcd|kube-apiserver'` lists nothing")
	if !o.markCompacted || o.bumpRevision == 0 {
		fmt.Fprintln(out, "  ! this restore ran without --bump-revision 1000000000 --mark-compacted: Kubernetes' watchers would miss changes; restore again with them")
	}
	fmt.Fprintln(out, "  2. the data dir: restore into the path etcd.yaml's etcd-data hostPath names (kubeadm: /var/lib/etcd) with --force,")
	fmt.Fprintln(out, "     so etcd.yaml and kubeadm's ClusterConfiguration (etcd.local.dataDir) stay as they are")
	for _, m := range members {
		if m.DataDir != "/var/lib/etcd" {
			fmt.Fprintf(out, "     member %s was restored into %s: copy it to /var/lib/etcd on its node (or restore there)\n", m.Name, m.DataDir)
		}
	}
	fmt.Fprintln(out, "  3. etcd.yaml keeps its flags: --name is the node's name and --initial-advertise-peer-urls its https://IP:2380, the")
	fmt.Fprintln(out, "     values given to restore (--initial-cluster NODE=https://IP:2380,...); etcd starts from the restored data dir and")
	fmt.Fprintln(out, "     ignores --initial-cluster, --initial-cluster-token and --initial-cluster-state there")
	fmt.Fprintln(out, "  4. static pods back: mv /root/{etcd,kube-apiserver}.yaml /etc/kubernetes/manifests/ (etcd first, on every node)")
	fmt.Fprintln(out, "  5. restart so every component re-lists: systemctl restart kubelet; then")
	fmt.Fprintln(out, "     crictl stop $(crictl ps -q --name 'kube-controller-manager|kube-scheduler')")
	fmt.Fprintln(out, "     check: etcdctl endpoint health --cluster; kubectl get nodes")
}

// euid is the effective user id (tests replace it).
var euid = os.Geteuid

// killAfterEnv names a phase after which restore --kubeadm kills itself
// with SIGKILL once the journal says it is reached: the crash tests on a
// real node (internal/test/e2e) use it to stop a restore at an exact
// phase; nothing else sets it.
const killAfterEnv = "LIFEBOAT_KUBEADM_KILL_AFTER"

// runRestoreKubeadm is lifeboat restore --kubeadm: the whole restore of a
// kubeadm control-plane node's etcd (package restore/kubeadm), or its
// rollback, or the rest of an interrupted one.
func runRestoreKubeadm(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o restoreOptions, now time.Time) error {
	out := a.stdout
	if euid() != 0 {
		return usagef("--kubeadm: run as root (it moves static pod manifests and etcd's data dir)")
	}
	n, err := kubeadm.ReadNode(kubeadmRoot)
	if errors.Is(err, kubeadm.ErrNotKubeadm) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	j, err := kubeadm.LoadJournal(kubeadmRoot)
	if err != nil {
		return err
	}
	kopts := kubeadmOptions(out)
	if o.rollback {
		return rollbackKubeadm(ctx, out, n, j, kopts, now)
	}
	src, err := o.kubeadmSource()
	if err != nil {
		return err
	}
	st := &kubeadmStore{ctx: ctx, cfg: cfg, lg: lg}
	if j != nil && !j.Phase.Finished() {
		if (src != kubeadm.Source{}) && src != j.Source && !(src.Backup == "latest" && j.Source.Backup != "") {
			return usagef("a restore of %s is unfinished (journal %s, phase %s): run lifeboat restore --kubeadm without a backup to finish it, or --rollback", j.Source, j.File(), j.Phase)
		}
		fmt.Fprintf(out, "resuming the restore of %s started %s, at phase %s (journal %s)\n", j.Source, j.Started.Format(time.RFC3339), j.Phase, j.File())
	} else if j, err = planKubeadm(ctx, a, cfg, lg, n, j, src, o, st, now); err != nil || j == nil {
		return err // j == nil: a dry run
	}
	kopts.Write = func(ctx context.Context, j *kubeadm.Journal) (kubeadm.Written, error) {
		b, ids, err := st.open()
		if err != nil {
			return kubeadm.Written{}, err
		}
		return writeKubeadmMember(ctx, a, cfg, lg, b, ids, j, now)
	}
	kopts.MembersTimeout = o.waitMembers
	kopts.OthersHint = strings.Join(othersCommands(j), "\n")
	res, err := kubeadm.Run(ctx, n, j, kopts)
	if err != nil {
		return err
	}
	printKubeadmRestored(out, n, j, res, now)
	return nil
}

// kubeadmStore opens the store once, when a restore needs it.
type kubeadmStore struct {
	ctx     context.Context
	cfg     *Config
	lg      *slog.Logger
	backups *repository.Repo
}

func (s *kubeadmStore) open() (*repository.Repo, []age.Identity, error) {
	if s.backups == nil {
		b, err := openBackups(s.ctx, s.cfg, s.lg)
		if err != nil {
			return nil, nil, err
		}
		s.backups = b
	}
	ids, err := identities(s.cfg)
	return s.backups, ids, err
}

// planKubeadm plans a new restore of src on node n (j, when not nil, is
// the finished journal of the one before: archived) and prints the plan;
// with --dry-run it returns a nil journal.
func planKubeadm(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, n *kubeadm.Node, j *kubeadm.Journal, src kubeadm.Source, o restoreOptions, st *kubeadmStore, now time.Time) (*kubeadm.Journal, error) {
	out := a.stdout
	if (src == kubeadm.Source{}) {
		return nil, usagef("give a backup id, latest, or a point in time (--to-revision R, --to-time T)")
	}
	members, err := kubeadmMembers(ctx, n, o)
	if err != nil {
		return nil, err
	}
	if err := refuseMembers(ctx, members.Others(n.Name)); err != nil {
		return nil, err
	}
	b, ids, err := st.open()
	if err != nil {
		return nil, err
	}
	m, _, release, err := restoreSource(ctx, b, ids, o, now)
	if err != nil {
		return nil, err
	}
	release()
	if src.Backup != "" {
		src.Backup = m.ID // latest, --before: the one chosen now, also on a rerun
	}
	fmt.Fprintf(out, "backup %s: revision %d, %d keys, %s, taken %s from %s\n",
		m.ID, m.Revision, m.TotalKeys, units.Bytes(m.DBSize), m.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC"), m.Endpoint)
	token := o.token
	if token == "" {
		token = "lifeboat-" + m.ID
	}
	if j != nil {
		to, err := j.Archive()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "the journal of the previous restore (%s) is kept at %s\n", j.Phase, to)
	}
	j = kubeadm.NewJournal(n, src, o.bumpRevision, o.markCompacted, token, now)
	j.KeepLifeboatKeys = o.keepLifeboatKeys
	j.InitialCluster = members.InitialCluster()
	fmt.Fprintf(out, "kubeadm control-plane node: member %s, data dir %s\n", n.Name, n.DataDir)
	if others := members.Others(n.Name); len(others) > 0 {
		fmt.Fprintf(out, "a control plane of %d members (read from %s): %s\n", len(members.List), members.Source, j.InitialCluster)
		for _, l := range othersCommands(j) {
			fmt.Fprintln(out, l)
		}
	}
	for _, s := range kubeadm.Steps(j) {
		fmt.Fprintln(out, "  "+s)
	}
	if o.withKit {
		if err := restoreKubeadmKit(ctx, a, cfg, lg, m, o.dryRun, now); err != nil {
			return nil, err
		}
	}
	if o.dryRun {
		fmt.Fprintln(out, "dry run: nothing was changed")
		return nil, nil
	}
	return j, nil
}

// kubeadmMembers are the members of the restored cluster: --initial-cluster
// when given (the command printed for the other nodes gives it), else
// what the node's etcd says (kubeadm.ReadMembers).
func kubeadmMembers(ctx context.Context, n *kubeadm.Node, o restoreOptions) (kubeadm.Members, error) {
	if o.cluster == "" {
		return kubeadm.ReadMembers(ctx, n)
	}
	ms, err := kubeadm.ParseMembers(o.cluster, "--initial-cluster")
	if err != nil {
		return kubeadm.Members{}, usageError{err}
	}
	for _, m := range ms.List {
		if m.Name == n.Name {
			return ms, nil
		}
	}
	return kubeadm.Members{}, usagef("--initial-cluster %s does not name this node's member %s (etcd.yaml's --name)", o.cluster, n.Name)
}

// othersCommands says what to run on each other node of the journal's
// cluster: the same restore (the same backup or point, token, bump and
// members), each node its own member by its etcd.yaml.
func othersCommands(j *kubeadm.Journal) []string {
	others := j.Others()
	if len(others) == 0 {
		return nil
	}
	what := j.Source.Backup
	switch {
	case j.Source.ToRevision != 0:
		what = fmt.Sprintf("--to-revision %d", j.Source.ToRevision)
	case j.Source.ToTime != "":
		what = "--to-time " + j.Source.ToTime
	}
	cmd := "lifeboat restore --kubeadm " + what + " --initial-cluster " + j.InitialCluster + " --initial-cluster-token " + j.Token
	if j.RevisionBump > 0 {
		cmd += fmt.Sprintf(" --bump-revision %d", j.RevisionBump)
		if j.MarkCompacted {
			cmd += " --mark-compacted"
		}
	}
	out := []string{"on each other control-plane node, as root, with this node's store configuration (this node waits for them, up to --wait-members):"}
	for _, m := range others {
		out = append(out, fmt.Sprintf("  on %s: %s", m.Name, cmd))
	}
	return out
}

// printKubeadmRestored says what the restore checked, where the old data
// dir is kept and the recovery time.
func printKubeadmRestored(out io.Writer, n *kubeadm.Node, j *kubeadm.Journal, res *kubeadm.Result, now time.Time) {
	fmt.Fprintf(out, "\nrestored %s on %s: checked %s\n", j.Source, n.Name, strings.Join(res.Checks, ", "))
	if len(res.Counts) > 0 {
		fmt.Fprintf(out, "Kubernetes objects in etcd: %s\n", strings.Join(res.Counts, ", "))
	}
	fmt.Fprintf(out, "the old data dir is kept at %s (lifeboat restore --kubeadm --rollback puts it back)\n", j.OldDataDir)
	fmt.Fprintf(out, "recovery time: %.1fs from this command to a ready apiserver", time.Since(now).Seconds())
	if first := j.Started; now.Sub(first) > time.Second {
		fmt.Fprintf(out, " (%.1fs since the restore started)", time.Since(first).Seconds())
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "kube-controller-manager and kube-scheduler reconnect by themselves (they lost their leases and restart); watchers re-list from the bumped, compacted revision")
}

// kubeadmOptions are the phases' options: output to out, and the tests'
// kill hook (killAfterEnv names the phase after which the process
// SIGKILLs itself).
func kubeadmOptions(out io.Writer) kubeadm.Options {
	kopts := kubeadm.Options{Out: out}
	if phase := os.Getenv(killAfterEnv); phase != "" {
		kopts.AfterPhase = func(p kubeadm.Phase) error {
			if string(p) == phase {
				return syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			return nil
		}
	}
	return kopts
}

// rollbackKubeadm puts back the old data dir of the journal's restore.
func rollbackKubeadm(ctx context.Context, out io.Writer, n *kubeadm.Node, j *kubeadm.Journal, kopts kubeadm.Options, now time.Time) error {
	if j == nil {
		return usagef("--rollback: no restore journal at %s: nothing to roll back", filepath.Join(kubeadmRoot, kubeadm.JournalFile))
	}
	fmt.Fprintf(out, "rolling back the restore of %s started %s (phase %s)\n", j.Source, j.Started.Format(time.RFC3339), j.Phase)
	if err := kubeadm.Rollback(ctx, n, j, kopts); err != nil {
		return err
	}
	fmt.Fprintf(out, "rolled back in %.1fs\n", time.Since(now).Seconds())
	fmt.Fprintln(out, "now restart kubelet (systemctl restart kubelet): the old data's revisions are below the restored ones it has seen,")
	fmt.Fprintln(out, "and its watches wait for them (\"too large resource version\") until it restarts; kube-controller-manager and kube-scheduler")
	fmt.Fprintln(out, "restart by themselves after losing their leases (or: crictl stop $(crictl ps -q --name 'kube-controller-manager|kube-scheduler'))")
	return nil
}

// restoreKubeadmKit is --with-kit: the recovery kit of backup m (or,
// when m has none, the kit of the newest backup that names one) laid back
// below the node's root before anything else, what is there moved aside
// (kit restore --force); with dryRun only listed.
func restoreKubeadmKit(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, m *repository.Manifest, dryRun bool, now time.Time) error {
	ref := m.ID
	if m.Kit == "" {
		ref = "latest"
		fmt.Fprintf(a.stdout, "--with-kit: backup %s has no recovery kit: the newest kit instead\n", m.ID)
	}
	ko := kitRestoreOptions{ref: ref, to: kubeadmRoot, dryRun: dryRun, force: true}
	if err := runKitRestore(ctx, cfg, lg, ko, a.stdout, now); err != nil {
		return fmt.Errorf("--with-kit: %w: nothing of etcd was changed", err)
	}
	return nil
}

// kubeadmSource is the backup or point in time the options name (zero:
// none).
func (o restoreOptions) kubeadmSource() (kubeadm.Source, error) {
	if o.before != "" {
		return kubeadm.Source{Backup: "latest"}, nil // resolved by restoreSource
	}
	switch {
	case o.toRevision != 0:
		return kubeadm.Source{ToRevision: o.toRevision}, nil
	case o.toTime != "":
		return kubeadm.Source{ToTime: o.toTime}, nil
	}
	return kubeadm.Source{Backup: o.ref}, nil
}

// refuseMembers refuses a node whose etcd has other members that are
// still running: exit 2, naming the ones whose peer port answers.
func refuseMembers(ctx context.Context, others []kubeadm.Member) error {
	if up, _ := kubeadm.Answering(ctx, others); len(up) > 0 {
		return usagef("--kubeadm: etcd has other members that are still running (%s): stop etcd on every control-plane node first (docs/restore.md#kubeadm-control-plane)", strings.Join(up, ", "))
	}
	return nil
}

// writeKubeadmMember writes the journal's source into its new data dir:
// the backup (or point in time) fetched, verified, replayed and restored
// as lifeboat restore does, and says what it held.
func writeKubeadmMember(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, backups *repository.Repo, ids []age.Identity, j *kubeadm.Journal, now time.Time) (kubeadm.Written, error) {
	var o restoreOptions
	o.ref, o.toRevision, o.toTime = j.Source.Backup, j.Source.ToRevision, j.Source.ToTime
	m, plan, release, err := restoreSource(ctx, backups, ids, o, now)
	if err != nil {
		return kubeadm.Written{}, err
	}
	defer release()
	if plan != nil {
		printPlan(a.stdout, plan)
	}
	pm := restore.PlannedMember{RestoredMember: restore.RestoredMember{Name: j.Name, DataDir: j.NewDataDir}}
	if err := checkRestoreSpace(cfg, m, []restore.PlannedMember{pm}, false); err != nil {
		return kubeadm.Written{}, err
	}
	spool, err := fetchVerified(ctx, a, cfg, lg, backups, ids, m)
	if spool != "" {
		defer writeback.Remove(spool)
	}
	if err != nil {
		return kubeadm.Written{}, err
	}
	w := kubeadm.Written{Revision: m.Revision, TotalKeys: m.TotalKeys}
	ropts := restore.RestoreOptions{
		SnapshotPath: spool, DataDir: j.NewDataDir, Name: j.Name, InitialCluster: j.InitialCluster,
		InitialClusterToken: j.Token, MarkCompacted: j.MarkCompacted,
	}
	if plan != nil {
		if err := replayPlan(ctx, a.stdout, spool, plan, backups, ids, lg); err != nil {
			return kubeadm.Written{}, err
		}
		ropts.SkipHashCheck = true
		st, err := verify.File(ctx, spool) // the replayed file: the point in time's keys
		if err != nil {
			return kubeadm.Written{}, fmt.Errorf("read the replayed file: %w", err)
		}
		w = kubeadm.Written{Revision: st.Revision, TotalKeys: st.TotalKeys}
	}
	own, err := removeOwnKeys(ctx, a.stdout, spool, j.KeepLifeboatKeys)
	if err != nil {
		return kubeadm.Written{}, err
	}
	if !j.KeepLifeboatKeys {
		ropts.SkipHashCheck = true // the file changed; fetchVerified checked it
	}
	if len(own.Keys) > 0 {
		w.Revision, w.TotalKeys = own.Revision, w.TotalKeys-len(own.Keys)
	}
	if bump := j.Bump(w.Revision); bump != j.RevisionBump && len(j.Others()) > 0 {
		// Every member must be restored to the same revision: the bump is
		// the one every node's command gives, never raised on one node.
		return kubeadm.Written{}, fmt.Errorf("the old data dir is at revision %d: a bump of %d would not leave it behind; restore every member with --bump-revision %d (on every node, the same)", j.OldRevision, j.RevisionBump, bump)
	} else if bump != j.RevisionBump {
		fmt.Fprintf(a.stdout, "the old data dir is at revision %d: the bump is raised from %d to %d, so that the restored revision is above every revision its clients have seen\n", j.OldRevision, j.RevisionBump, bump)
		j.RevisionBump = bump
	}
	ropts.RevisionBump = j.RevisionBump
	if _, err := restore.Restore(ctx, ropts); err != nil {
		return kubeadm.Written{}, fmt.Errorf("restore backup %s into %s: %w", m.ID, j.NewDataDir, err)
	}
	return w, nil
}
