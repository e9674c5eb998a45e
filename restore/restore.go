package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// NamePlaceholder in RestoreOptions.DataDir and WALDir stands for each
// member's name.
const NamePlaceholder = "{name}"

// ErrDataDirNotEmpty is wrapped when a member's data (or WAL) directory
// exists and is not empty and RestoreOptions.Force is not set.
var ErrDataDirNotEmpty = errors.New("data directory is not empty")

// ErrDataDirInUse is wrapped when a member's data directory holds the
// database of an etcd that is still running (its bbolt file is locked):
// stop that member first. Force does not override it.
var ErrDataDirInUse = errors.New("data directory is in use by a running etcd")

// ErrOptions is wrapped by mistakes in RestoreOptions (the caller's).
var ErrOptions = errors.New("invalid restore options")

// Defaults of etcdutl, used when the options leave them empty.
const (
	DefaultToken    = "etcd-cluster"
	oldDirSeparator = ".lifeboat-old-"
)

// RestoreOptions describe a restore of one snapshot into member data
// directories.
type RestoreOptions struct {
	// SnapshotPath is the raw snapshot (database and etcd's sha256
	// trailer), already fetched and verified (see Fetch).
	SnapshotPath string
	// DataDir is the member's data directory, or a template containing
	// {name} (e.g. /restore/{name}): then, unless Name is set, every
	// member of InitialCluster is restored. Default <name>.etcd.
	DataDir string
	// WALDir is an optional dedicated WAL directory (etcd --wal-dir), a
	// template too.
	WALDir string
	// Name restores only this member (etcd --name). Default: every member
	// of InitialCluster when DataDir is a template, the only member when
	// it names one. Required without InitialCluster.
	Name string
	// InitialCluster is etcd's --initial-cluster (name=peerURL,...).
	// Without it, Name and PeerURLs make a single-member cluster; there is
	// no default member (etcd's "default" at http://localhost:2380 would
	// silently give the restored member a name and peer URL it never had).
	InitialCluster string
	// InitialClusterToken is the new cluster's token (default
	// "etcd-cluster", as etcdutl). Every member of one cluster must be
	// restored with the same token.
	InitialClusterToken string
	// PeerURLs are the restored member's advertised peer URLs; required
	// when InitialCluster is empty.
	PeerURLs []string
	// RevisionBump raises the revision by this much and, with
	// MarkCompacted, marks everything up to the new revision compacted, so
	// watchers of the old cluster are told to re-list (etcdutl
	// --bump-revision --mark-compacted).
	RevisionBump  uint64
	MarkCompacted bool
	// Force moves a non-empty data or WAL directory aside to
	// <dir>.lifeboat-old-<time> instead of refusing. Nothing is deleted.
	Force bool
	// SkipHashCheck skips etcdutl's second sha256 pass over the copied
	// database; only for a snapshot whose trailer was just checked.
	SkipHashCheck bool
	// MoveSnapshot gives the snapshot file to the restore: with
	// SkipHashCheck and no RevisionBump, the first member's database is
	// made from it where it lies (moved into the member's directory,
	// written in place, see restoreFirstInPlace) instead of copied, when
	// it is on that member's file system. The file is gone afterwards.
	MoveSnapshot bool
	// Now is the clock that names moved-aside directories (time.Now when nil).
	Now func() time.Time
	// Owner, when set, gets every restored file and directory (chown -R
	// after each member's restore), so etcd need not run as root.
	Owner *Owner
	// OnMember is called after each member is restored.
	OnMember func(RestoredMember)
}

// RestoredMember is one member written by Restore.
type RestoredMember struct {
	Name     string
	DataDir  string
	WALDir   string
	PeerURLs []string
	// MovedAside is where the previous content of DataDir (and WALDir, in
	// MovedAsideWAL) went with Force; empty when there was none.
	MovedAside, MovedAsideWAL string
	// Seconds is how long the member's restore took.
	Seconds float64
	// InitialCluster and Token are the cluster's, for the etcd flags.
	InitialCluster string
	Token          string
}

// EtcdFlags returns the etcd flags this member needs to start on its
// restored data directory. Client URLs, TLS and tuning flags stay as the
// member had them.
func (m RestoredMember) EtcdFlags() []string {
	peers := strings.Join(m.PeerURLs, ",")
	f := []string{"--name", m.Name, "--data-dir", m.DataDir}
	if m.WALDir != "" {
		f = append(f, "--wal-dir", m.WALDir)
	}
	f = append(f, "--initial-advertise-peer-urls", peers)
	if listen := listenURLs(m.PeerURLs); listen != "" {
		f = append(f, "--listen-peer-urls", listen)
	}
	f = append(f, "--initial-cluster", m.InitialCluster, "--initial-cluster-token", m.Token, "--initial-cluster-state", "new")
	return f
}

// listenURLs returns the peer URLs as listen URLs when their hosts are IP
// addresses (etcd listens only on IPs); "" otherwise.
func listenURLs(urls []string) string {
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil || net.ParseIP(pu.Hostname()) == nil {
			return ""
		}
	}
	return strings.Join(urls, ",")
}

// RestoreResult is what Restore wrote.
type RestoreResult struct {
	Members []RestoredMember
}

type member struct {
	name  string
	peers []string
}

// plan is a resolved restore: the cluster and the members to write.
type plan struct {
	cluster string
	token   string
	members []RestoredMember
}

// parseInitialCluster parses name=url,... keeping the members' order.
func parseInitialCluster(s string) ([]member, error) {
	var out []member
	idx := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, u, ok := strings.Cut(part, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("%w: --initial-cluster entry %q is not name=peerURL", ErrOptions, part)
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme == "" || pu.Host == "" {
			return nil, fmt.Errorf("%w: --initial-cluster entry %q: %q is not a URL", ErrOptions, part, u)
		}
		if i, ok := idx[name]; ok {
			out[i].peers = append(out[i].peers, u)
			continue
		}
		idx[name] = len(out)
		out = append(out, member{name: name, peers: []string{u}})
	}
	return out, nil
}

func expand(tmpl, name string) string { return strings.ReplaceAll(tmpl, NamePlaceholder, name) }

// badOptions is an ErrOptions error with what is wrong.
func badOptions(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, a...))
}

// plan checks the options and resolves the members they select, with
// their directories.
func (o RestoreOptions) plan() (*plan, error) {
	if o.SnapshotPath == "" {
		return nil, badOptions("no snapshot file")
	}
	if o.MarkCompacted && o.RevisionBump == 0 {
		return nil, badOptions("--mark-compacted needs --bump-revision")
	}
	p := &plan{token: o.InitialClusterToken}
	if p.token == "" {
		p.token = DefaultToken
	}
	ic, err := o.initialCluster()
	if err != nil {
		return nil, err
	}
	members, err := parseInitialCluster(ic)
	if err != nil {
		return nil, err
	}
	p.cluster = ic
	chosen, err := o.choose(members, ic)
	if err != nil {
		return nil, err
	}
	if p.members, err = o.restoredMembers(chosen, ic, p.token); err != nil {
		return nil, err
	}
	return p, nil
}

// initialCluster is the restored cluster's member list: InitialCluster,
// or the single member Name at PeerURLs.
func (o RestoreOptions) initialCluster() (string, error) {
	if o.InitialCluster != "" {
		return o.InitialCluster, nil
	}
	// etcd's defaults (member "default" at http://localhost:2380) are
	// never what a restored member had: its name and peer URL are
	// written into the restored member list, and a member started
	// with other ones refuses to start or cannot be reached by peers.
	if o.Name == "" {
		return "", badOptions("--name is required without --initial-cluster: the member's etcd --name (the one it had, e.g. the node name on kubeadm) is written into the restored data; give --name NAME --initial-advertise-peer-urls URL for a single-member cluster, or --initial-cluster name=peerURL,...")
	}
	if len(o.PeerURLs) == 0 {
		return "", badOptions("give --initial-cluster name=peerURL,... (every member of the restored cluster) or, for a single-member cluster, --initial-advertise-peer-urls URL: the peer URLs are written into the restored data, and etcd's default http://localhost:2380 cannot be reached by other members")
	}
	var parts []string
	for _, u := range o.PeerURLs {
		parts = append(parts, o.Name+"="+u)
	}
	return strings.Join(parts, ","), nil
}

// choose picks the members of the initial cluster ic to restore: the one
// Name names, or all of them with a data-dir template (or when there is
// one).
func (o RestoreOptions) choose(members []member, ic string) ([]member, error) {
	template := strings.Contains(o.DataDir, NamePlaceholder)
	var chosen []member
	switch {
	case o.Name != "":
		for _, m := range members {
			if m.name == o.Name {
				chosen = append(chosen, m)
			}
		}
		if len(chosen) == 0 {
			return nil, badOptions("--name %q is not a member of --initial-cluster %q", o.Name, ic)
		}
	case template || len(members) == 1:
		chosen = members
	default:
		return nil, badOptions("--initial-cluster names %d members: give --name to restore one, or a --data-dir template with %s to restore all", len(members), NamePlaceholder)
	}
	if len(o.PeerURLs) > 0 && o.InitialCluster != "" {
		if len(chosen) != 1 || strings.Join(chosen[0].peers, ",") != strings.Join(o.PeerURLs, ",") {
			return nil, badOptions("--initial-advertise-peer-urls %s do not match --initial-cluster %q", strings.Join(o.PeerURLs, ","), ic)
		}
	}
	if len(chosen) > 1 && o.WALDir != "" && !strings.Contains(o.WALDir, NamePlaceholder) {
		return nil, badOptions("--wal-dir must contain %s when restoring several members", NamePlaceholder)
	}
	return chosen, nil
}

// restoredMembers expands the chosen members' data and WAL directories,
// refusing two members on one directory.
func (o RestoreOptions) restoredMembers(chosen []member, ic, token string) ([]RestoredMember, error) {
	var out []RestoredMember
	seen := map[string]string{}
	for _, m := range chosen {
		dataDir := o.DataDir
		if dataDir == "" {
			dataDir = NamePlaceholder + ".etcd"
		}
		rm := RestoredMember{Name: m.name, DataDir: filepath.Clean(expand(dataDir, m.name)), PeerURLs: m.peers, InitialCluster: ic, Token: token}
		if o.WALDir != "" {
			rm.WALDir = filepath.Clean(expand(o.WALDir, m.name))
		}
		for _, d := range []string{rm.DataDir, rm.WALDir} {
			if d == "" {
				continue
			}
			if other, ok := seen[d]; ok {
				return nil, badOptions("members %s and %s would both use %s", other, m.name, d)
			}
			seen[d] = m.name
		}
		out = append(out, rm)
	}
	return out, nil
}

// PlannedMember is a member Restore would write, with what it would find.
type PlannedMember struct {
	RestoredMember
	// NonEmpty lists the member's data or WAL directory when it exists and
	// is not empty: Restore refuses it, or moves it aside with Force.
	NonEmpty []string
}

// Plan returns the members Restore would write with these options and the
// directories it would refuse (or move aside), without writing anything.
// SnapshotPath may be empty.
func Plan(o RestoreOptions) ([]PlannedMember, error) {
	if o.SnapshotPath == "" {
		o.SnapshotPath = "-"
	}
	p, err := o.plan()
	if err != nil {
		return nil, err
	}
	var out []PlannedMember
	for _, m := range p.members {
		if err := checkNotInUse(m); err != nil {
			return nil, err
		}
		pm := PlannedMember{RestoredMember: m}
		for _, d := range []string{m.DataDir, m.WALDir} {
			if d == "" {
				continue
			}
			exists, empty, err := dirState(d)
			if err != nil {
				return nil, err
			}
			if exists && !empty {
				pm.NonEmpty = append(pm.NonEmpty, d)
			}
		}
		out = append(out, pm)
	}
	return out, nil
}

// dirState reports whether dir exists and whether it is empty.
func dirState(dir string) (exists, empty bool, err error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, true, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("read %s: %w", dir, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, false, fmt.Errorf("stat %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return true, false, nil
	}
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, true, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("read %s: %w", dir, err)
	}
	return true, len(names) == 0, nil
}

// Restore writes the snapshot into the data directory of each member the
// options select: the first with etcdutl's snapshot restore, the others
// at once as clones of it (its database copied, their own raft log
// written; see cloneMember).
//
// Every target is checked before anything is written: a non-empty data
// or WAL directory is refused (ErrDataDirNotEmpty) unless Force, which
// moves it aside. If a member fails, what this call wrote is removed and
// the directories it moved aside are moved back. ctx is checked between
// members and between the chunks of a clone's copy (etcdutl's restore
// itself cannot be interrupted).
func Restore(ctx context.Context, o RestoreOptions) (*RestoreResult, error) {
	p, err := o.plan()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(o.SnapshotPath); err != nil {
		return nil, fmt.Errorf("snapshot file: %w", err)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	// Check every target first: refuse before changing anything.
	targets, err := checkTargets(p.members, o.Force)
	if err != nil {
		return nil, err
	}
	var undo undoList
	stamp := now().UTC().Format("20060102T150405Z")
	for i := range p.members {
		if err := undo.clear(&p.members[i], targets[i], stamp); err != nil {
			undo.rollback()
			return nil, fmt.Errorf("member %s: %w", p.members[i].Name, err)
		}
	}
	res, err := restoreAll(ctx, o, p)
	if err != nil {
		undo.rollback()
		return nil, err
	}
	return res, nil
}

// restoreAll writes the plan's members into their cleared directories:
// the first with etcdutl, the others cloned from it at once (see
// cloneMember), each then handed to o.Owner. ctx is checked between
// members and between the clones' chunks.
func restoreAll(ctx context.Context, o RestoreOptions, p *plan) (*RestoreResult, error) {
	res := &RestoreResult{}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	first := p.members[0]
	start := time.Now()
	moved := false
	if o.MoveSnapshot && o.SkipHashCheck && o.RevisionBump == 0 {
		var err error
		if moved, err = restoreFirstInPlace(o, p, first); err != nil {
			return nil, err
		}
	}
	if !moved {
		if err := restoreMember(o, p, first); err != nil {
			return nil, err
		}
	}
	first.Seconds = time.Since(start).Seconds()
	res.Members = append(res.Members, first)
	if o.OnMember != nil {
		o.OnMember(first)
	}
	rest := p.members[1:]
	errs := make([]error, len(rest))
	var wg sync.WaitGroup
	for i := range rest {
		wg.Go(func() {
			start := time.Now()
			errs[i] = cloneMember(ctx, p, first, rest[i])
			if errs[i] == nil {
				errs[i] = chownMember(o, rest[i])
			}
			rest[i].Seconds = time.Since(start).Seconds()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if moved {
		dropCache(filepath.Join(first.DataDir, "member", "snap", "db"))
	}
	for _, m := range rest {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res.Members = append(res.Members, m)
		if o.OnMember != nil {
			o.OnMember(m)
		}
	}
	return res, nil
}

// target is a member's data or WAL directory as Restore found it.
type target struct {
	dir           string
	exists, empty bool
}

// checkTargets checks every member's directories (data, WAL) before
// anything is written: a member an etcd still runs on is refused, and a
// non-empty directory unless force.
func checkTargets(members []RestoredMember, force bool) ([][2]target, error) {
	targets := make([][2]target, len(members))
	for i, m := range members {
		if err := checkNotInUse(m); err != nil {
			return nil, err
		}
		for j, d := range []string{m.DataDir, m.WALDir} {
			if d == "" {
				continue
			}
			exists, empty, err := dirState(d)
			if err != nil {
				return nil, err
			}
			if exists && !empty && !force {
				return nil, fmt.Errorf("member %s: %s: %w (use --force to move it aside)", m.Name, d, ErrDataDirNotEmpty)
			}
			targets[i][j] = target{dir: d, exists: exists, empty: empty}
		}
	}
	return targets, nil
}

// undoList is what Restore undoes, last first, when a member fails.
type undoList []func()

func (u undoList) rollback() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// clear readies member m's directories (ts: data, WAL) for etcdutl,
// moving a non-empty one aside (recorded in m), and records how to undo
// that and the restore's writes.
func (u *undoList) clear(m *RestoredMember, ts [2]target, stamp string) error {
	for j, t := range ts {
		if t.dir == "" {
			continue
		}
		dir := t.dir
		switch {
		case t.exists && !t.empty:
			aside, err := moveAside(dir, stamp)
			if err != nil {
				return err
			}
			if j == 0 {
				m.MovedAside = aside
			} else {
				m.MovedAsideWAL = aside
			}
			*u = append(*u, func() { os.RemoveAll(dir); os.Rename(aside, dir) })
		case t.exists && j == 1:
			// etcdutl refuses an existing WAL dir, even an empty one.
			if err := os.Remove(dir); err != nil {
				return err
			}
			*u = append(*u, func() { os.RemoveAll(dir); os.Mkdir(dir, 0o700) })
		case t.exists:
			*u = append(*u, func() { emptyDir(dir) })
		default:
			*u = append(*u, func() { os.RemoveAll(dir) })
		}
	}
	return nil
}

// restoreMember restores the snapshot into member m's directories with
// etcdutl, then hands them to o.Owner.
func restoreMember(o RestoreOptions, p *plan, m RestoredMember) error {
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        o.SnapshotPath,
		Name:                m.Name,
		OutputDataDir:       m.DataDir,
		OutputWALDir:        m.WALDir,
		PeerURLs:            m.PeerURLs,
		InitialCluster:      p.cluster,
		InitialClusterToken: p.token,
		SkipHashCheck:       o.SkipHashCheck,
		RevisionBump:        o.RevisionBump,
		MarkCompacted:       o.MarkCompacted,
	})
	if err != nil {
		return fmt.Errorf("restore member %s into %s: %w", m.Name, m.DataDir, err)
	}
	return chownMember(o, m)
}

// chownMember hands member m's directories to o.Owner, if set.
func chownMember(o RestoreOptions, m RestoredMember) error {
	if o.Owner == nil {
		return nil
	}
	for _, d := range []string{m.DataDir, m.WALDir} {
		if d == "" {
			continue
		}
		if err := chownTree(d, *o.Owner); err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
	}
	return nil
}

// checkNotInUse refuses a member whose data dir an etcd still runs on.
func checkNotInUse(m RestoredMember) error {
	inUse, who, err := dbInUse(m.DataDir)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	if !inUse {
		return nil
	}
	if who == "" {
		who = "a process this user cannot see"
	}
	return fmt.Errorf("member %s: %s: %w (its database is locked by %s): stop that etcd first (kubeadm: move its static pod manifest out of /etc/kubernetes/manifests); nothing was changed", m.Name, m.DataDir, ErrDataDirInUse, who)
}

// moveAside renames dir to <dir>.lifeboat-old-<stamp> (with a counter if
// that exists) and returns the new name.
func moveAside(dir, stamp string) (string, error) {
	base := dir + oldDirSeparator + stamp
	for i := 0; i < 100; i++ {
		aside := base
		if i > 0 {
			aside = fmt.Sprintf("%s-%d", base, i)
		}
		if _, err := os.Lstat(aside); err == nil {
			continue
		}
		if err := os.Rename(dir, aside); err != nil {
			return "", fmt.Errorf("move %s aside to %s (move it yourself if it is a mount point): %w", dir, aside, err)
		}
		return aside, nil
	}
	return "", fmt.Errorf("move %s aside: too many earlier copies beside it", dir)
}

// emptyDir removes what is inside dir (which was empty before we wrote).
func emptyDir(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
