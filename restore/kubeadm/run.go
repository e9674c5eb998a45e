package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// ErrCheck is wrapped when the restored member does not answer what was
// written (revision, key count, HashKV): the restore stops with etcd
// running and the apiserver stopped; --rollback brings the old data back.
var ErrCheck = errors.New("restored member does not match what was written")

// Options are how Run and Rollback act.
type Options struct {
	// Out receives the progress a person reads.
	Out io.Writer
	// Write restores the journal's source into j.NewDataDir (which does
	// not exist) as member j.Name of the cluster j.InitialCluster with
	// token j.Token, marked compacted as the journal
	// says and bumped by j.Bump(the source's revision), which it records
	// in j.RevisionBump, and returns what the source held. Required by Run.
	Write func(ctx context.Context, j *Journal) (Written, error)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// StopTimeout bounds the wait for etcd and the apiserver to stop
	// (kubelet gives the apiserver its termination grace, 30 s in
	// kubeadm's manifest); StartTimeout the wait for each to serve again.
	// Defaults: 3 minutes each.
	StopTimeout, StartTimeout time.Duration
	// Poll is how often a wait looks (default 500 ms); progress is printed
	// every 5 s.
	Poll time.Duration
	// MembersTimeout bounds the wait, on a cluster of several members, for
	// the other members to be restored and started on their nodes (by a
	// person, one node after the other; default 30 minutes). OthersHint
	// is printed when that wait begins: what to run on each other node.
	MembersTimeout time.Duration
	OthersHint     string
	// AfterPhase, when set, is called after each phase is saved in the
	// journal; an error it returns ends Run there (tests crash a restore
	// at a phase with it).
	AfterPhase func(Phase) error
}

func (o *Options) defaults() {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 3 * time.Minute
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 3 * time.Minute
	}
	if o.MembersTimeout == 0 {
		o.MembersTimeout = 30 * time.Minute
	}
	if o.Poll == 0 {
		o.Poll = 500 * time.Millisecond
	}
}

// Written is what a restored source held before any revision bump: its
// revision and the keys alive at it (a backup's manifest says them; a
// point in time's replayed file too). The restored member must serve as
// many keys: a bumped data dir's own count is not comparable before etcd
// finishes the compaction it was marked with.
type Written struct {
	Revision  int64
	TotalKeys int
}

// Result is what Run checked.
type Result struct {
	// Checks are the checks made on the restored member and apiserver,
	// each "what: value".
	Checks []string
	// Counts are the Kubernetes objects in the restored etcd by resource
	// (namespaces, pods, ...), from key counts under /registry/.
	Counts []string
}

// Steps is the plan of j as a person reads it, one line a step.
func Steps(j *Journal) []string {
	bump := "no revision bump"
	if j.RevisionBump > 0 {
		bump = fmt.Sprintf("--bump-revision %d", j.RevisionBump)
		if j.MarkCompacted {
			bump += " --mark-compacted"
		}
	}
	return []string{
		fmt.Sprintf("1. stop etcd and the apiserver: move %s and %s from %s to %s, wait until kubelet stopped both (etcd's database unlocked, ports closed)", EtcdYAML, APIYAML, j.Manifests, j.Aside),
		fmt.Sprintf("2. restore %s into %s as member %s (%s, %s), read it back (revision, keys, HashKV)", j.Source, j.NewDataDir, j.Name, strings.Join(j.PeerURLs, ","), bump),
		fmt.Sprintf("3. swap: %s -> %s (kept, never deleted), %s -> %s", j.DataDir, j.OldDataDir, j.NewDataDir, j.DataDir),
		fmt.Sprintf("4. move %s back; wait until etcd is healthy and answers the written revision, key count and HashKV", EtcdYAML),
		fmt.Sprintf("5. move %s back; wait until the apiserver's /readyz is ok", APIYAML),
		fmt.Sprintf("journal: %s (a rerun after a crash finishes; --rollback puts %s back)", j.File(), j.OldDataDir),
	}
}

// step is one phase of Run: what it does, and the phase it reaches.
type step struct {
	to Phase
	do func(r *run, ctx context.Context) (note string, err error)
}

var steps = []step{
	{PhaseAside, (*run).moveAside},
	{PhaseStopped, (*run).waitStopped},
	{PhaseWritten, (*run).write},
	{PhaseSwapped, (*run).swap},
	{PhaseEtcd, (*run).startEtcd},
	{PhaseDone, (*run).startAPIServer},
}

type run struct {
	n   *Node
	j   *Journal
	o   Options
	res Result
}

// Run carries out the restore j plans on node n from the phase its
// journal has reached. The journal is saved before the first step (a
// planned restore is then on record) and after each.
func Run(ctx context.Context, n *Node, j *Journal, o Options) (*Result, error) {
	o.defaults()
	if o.Write == nil {
		return nil, errors.New("kubeadm restore: no Write")
	}
	r := &run{n: n, j: j, o: o}
	if j.Phase == PhasePlanned && len(j.Events) == 0 {
		if err := j.advance(PhasePlanned, o.Now(), j.Source.String()); err != nil {
			return nil, err
		}
	}
	for _, s := range steps {
		if j.Phase.index() >= s.to.index() {
			continue
		}
		note, err := s.do(r, ctx)
		if err != nil {
			return &r.res, fmt.Errorf("kubeadm restore, on the way to %s: %w (journal %s: run the same command again to go on, or --rollback)", s.to, err, j.File())
		}
		if err := j.advance(s.to, o.Now(), note); err != nil {
			return &r.res, err
		}
		fmt.Fprintf(o.Out, "[%s] %s\n", s.to, note)
		if o.AfterPhase != nil {
			if err := o.AfterPhase(s.to); err != nil {
				return &r.res, err
			}
		}
	}
	return &r.res, nil
}

// moveAside renames both manifests out of kubelet's sight.
func (r *run) moveAside(ctx context.Context) (string, error) {
	if err := moveManifests(r.j.Manifests, r.j.Aside, EtcdYAML, APIYAML); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s and %s moved to %s", EtcdYAML, APIYAML, r.j.Aside), nil
}

// moveManifests renames names from dir from to dir to, each unless it is
// there already; one missing in both is an error.
func moveManifests(from, to string, names ...string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	for _, name := range names {
		src, dst := filepath.Join(from, name), filepath.Join(to, name)
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			if _, err := os.Stat(dst); err == nil {
				continue // moved before a crash
			}
			return fmt.Errorf("%s: in neither %s nor %s", name, from, to)
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("move %s: %w", name, err)
		}
	}
	if err := syncDir(from); err != nil {
		return err
	}
	return syncDir(to)
}

// waitStopped waits until etcd's database is unlocked and the etcd and
// apiserver ports are closed.
func (r *run) waitStopped(ctx context.Context) (string, error) {
	start := r.o.Now()
	var killed []int
	err := r.wait(ctx, r.o.StopTimeout, "etcd and the apiserver to stop", func(ctx context.Context) (bool, string, error) {
		done, etcdGone, why, err := stopped(ctx, r.n)
		if err != nil || done || !etcdGone {
			return done, why, err
		}
		// etcd is gone: the apiserver has nothing left to finish (every
		// write it could still make is lost with the old data dir), yet
		// it spends its whole termination grace (30 s) waiting for etcd.
		// Its manifest is aside, so kubelet does not start it again.
		pids, err := apiServerPIDs(r.n)
		if err != nil {
			return false, why, err
		}
		for _, pid := range pids {
			if !slices.Contains(killed, pid) && syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = append(killed, pid)
				fmt.Fprintf(r.o.Out, "  etcd stopped; kube-apiserver (pid %d) killed: it has nothing left to finish\n", pid)
			}
		}
		return false, why, nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("etcd and the apiserver stopped after %.1fs", r.o.Now().Sub(start).Seconds()), nil
}

// apiServerPIDs are the processes of this node's kube-apiserver: named
// kube-apiserver, with the advertise address and etcd servers of its
// manifest.
func apiServerPIDs(n *Node) ([]int, error) {
	u, err := url.Parse(n.APIServer)
	if err != nil {
		return nil, err
	}
	want := []string{"--advertise-address=" + u.Hostname(), "--etcd-servers=" + strings.Join(n.EtcdServers, ",")}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil // no /proc: wait for kubelet
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" {
			continue
		}
		match := true
		for _, w := range want {
			if !slices.Contains(args[1:], w) {
				match = false
			}
		}
		if match {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// stopped reports whether nothing of the old etcd and apiserver runs,
// whether etcd is gone, and if not all is, what still runs.
func stopped(ctx context.Context, n *Node) (done, etcdGone bool, why string, err error) {
	inUse, who, err := restore.DataDirInUse(n.DataDir)
	if err != nil {
		return false, false, "", err
	}
	var running []string
	if inUse {
		running = append(running, fmt.Sprintf("etcd's database in %s is locked %s", n.DataDir, who))
	}
	for _, u := range append(append([]string{}, n.ClientURLs...), n.PeerURLs...) {
		hp, err := hostPort(u)
		if err != nil {
			return false, false, "", err
		}
		if listening(ctx, hp) {
			running = append(running, hp+" answers")
		}
	}
	etcdGone = len(running) == 0
	hp, err := hostPort(n.APIServer)
	if err != nil {
		return false, false, "", err
	}
	if listening(ctx, hp) {
		running = append(running, hp+" answers")
	}
	return len(running) == 0, etcdGone, strings.Join(running, ", "), nil
}

// listening reports whether something accepts TCP connections at hp.
func listening(ctx context.Context, hp string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", hp)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// write restores into the new data dir (a partial one of a crashed run
// is removed first: the journal names it as this restore's own) and reads
// it back.
func (r *run) write(ctx context.Context) (string, error) {
	j := r.j
	if _, err := os.Stat(j.NewDataDir); err == nil {
		fmt.Fprintf(r.o.Out, "removing %s, left unfinished by an earlier run of this restore\n", j.NewDataDir)
		if err := os.RemoveAll(j.NewDataDir); err != nil {
			return "", err
		}
	}
	start := r.o.Now()
	if db := filepath.Join(j.DataDir, "member", "snap", "db"); j.OldRevision == 0 {
		rev, err := verify.Revision(ctx, db)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("the old data dir's revision: %w", err)
		}
		j.OldRevision = rev
	}
	w, err := r.o.Write(ctx, j)
	if err != nil {
		return "", err
	}
	st, err := verify.File(ctx, filepath.Join(j.NewDataDir, "member", "snap", "db"))
	if err != nil {
		return "", fmt.Errorf("read back %s: %w", j.NewDataDir, err)
	}
	if want := w.Revision + int64(j.RevisionBump); st.Revision != want {
		return "", fmt.Errorf("read back %s: revision %d, want %d (the source's %d + the bump %d)", j.NewDataDir, st.Revision, want, w.Revision, j.RevisionBump)
	}
	// The keys etcd will serve from the written file: not the empty key
	// of the revision bump (etcd indexes it, no range returns it).
	j.Expected = &Expected{Revision: st.Revision, CompactRevision: st.CompactRevision, TotalKeys: st.ServedKeys(),
		HashKV: st.HashKV, HashKVComparable: st.HashKVComparable, HashKVReason: st.HashKVReason}
	if err := syncTree(j.NewDataDir); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s written to %s in %.1fs: revision %d, %d keys", j.Source, j.NewDataDir, r.o.Now().Sub(start).Seconds(), st.Revision, w.TotalKeys), nil
}

// syncTree fsyncs every file and directory under dir.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", p, err)
		}
		return nil
	})
}

// swap moves the old data dir aside and the new one in.
func (r *run) swap(ctx context.Context) (string, error) {
	j := r.j
	_, errData := os.Stat(j.DataDir)
	_, errOld := os.Stat(j.OldDataDir)
	_, errNew := os.Stat(j.NewDataDir)
	if errData == nil && errNew == nil && errOld == nil {
		return "", fmt.Errorf("%s, %s and %s all exist: not swapping (move one aside by hand and run again)", j.DataDir, j.OldDataDir, j.NewDataDir)
	}
	if errData == nil && errNew == nil {
		if err := os.Rename(j.DataDir, j.OldDataDir); err != nil {
			return "", fmt.Errorf("move the old data dir aside: %w", err)
		}
		errData = os.ErrNotExist
	}
	if errNew == nil && errData != nil {
		if err := os.Rename(j.NewDataDir, j.DataDir); err != nil {
			return "", fmt.Errorf("move the restored data dir in: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(j.DataDir, "member", "snap", "db")); err != nil {
		return "", fmt.Errorf("after the swap: %w", err)
	}
	if err := syncDir(filepath.Dir(j.DataDir)); err != nil {
		return "", err
	}
	return fmt.Sprintf("the old data dir is kept at %s; %s holds the restored member", j.OldDataDir, j.DataDir), nil
}

// startEtcd moves etcd.yaml back and checks the member kubelet starts.
func (r *run) startEtcd(ctx context.Context) (string, error) {
	if err := moveManifests(r.j.Aside, r.j.Manifests, EtcdYAML); err != nil {
		return "", err
	}
	start := r.o.Now()
	cli, err := r.etcdClient()
	if err != nil {
		return "", err
	}
	defer cli.Close()
	ep := r.n.ClientURLs[0]
	limit, what := r.o.StartTimeout, "etcd to serve at "+ep
	others := r.j.Others()
	if len(others) > 0 {
		limit, what = r.o.MembersTimeout, "the restored cluster's leader ("+r.j.InitialCluster+")"
		fmt.Fprintf(r.o.Out, "etcd is back on this node; it serves once a majority of its %d members are restored and started\n", len(others)+1)
		if r.o.OthersHint != "" {
			fmt.Fprintln(r.o.Out, r.o.OthersHint)
		}
	}
	var st *clientv3.StatusResponse
	err = r.wait(ctx, limit, what, func(ctx context.Context) (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := cli.Status(cctx, ep)
		if err == nil && s.Leader != 0 {
			if len(others) > 0 {
				// A majority serves; wait for every member, so that each
				// one's HashKV is checked.
				if notYet, err := membersNotStarted(cctx, cli); err != nil || len(notYet) > 0 {
					why := "members not started yet: " + strings.Join(notYet, ", ")
					if err != nil {
						why = "member list: " + err.Error()
					}
					return false, why, nil
				}
			}
			st = s
			return true, "", nil
		}
		why := "no leader yet"
		if err != nil {
			why = err.Error()
		}
		if _, down := Answering(ctx, others); len(down) > 0 {
			why = "members not up yet: " + strings.Join(down, ", ") + " (" + why + ")"
		}
		return false, why, nil
	})
	if err != nil {
		if len(others) > 0 {
			err = fmt.Errorf("%w; this node's data dir is restored and etcd.yaml is back, kube-apiserver.yaml is still in %s: run lifeboat restore --kubeadm again to go on waiting (it resumes), or --rollback", err, r.j.Aside)
		}
		return "", err
	}
	took := r.o.Now().Sub(start).Seconds()
	if err := r.checkEtcd(ctx, cli, ep, st); err != nil {
		return "", err
	}
	return fmt.Sprintf("etcd %s healthy at %s after %.1fs: %s", st.Version, ep, took, strings.Join(r.res.Checks, "; ")), nil
}

// checkEtcd compares the member with what was written, and counts the
// Kubernetes objects.
func (r *run) checkEtcd(ctx context.Context, cli *clientv3.Client, ep string, st *clientv3.StatusResponse) error {
	want := r.j.Expected
	if want == nil {
		return errors.New("the journal has no expected values (written phase without them)")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := st.Header.Revision
	if got != want.Revision && (len(r.j.Others()) == 0 || got < want.Revision) {
		// Several members: another node's apiserver may have written
		// since; the checks below read at the written revision.
		return fmt.Errorf("%w: revision %d, written %d", ErrCheck, got, want.Revision)
	}
	r.res.Checks = append(r.res.Checks, fmt.Sprintf("revision %d", want.Revision))
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly(), clientv3.WithSerializable(), clientv3.WithRev(want.Revision))
	if err != nil {
		return fmt.Errorf("count keys: %w", err)
	}
	if resp.Count != int64(want.TotalKeys) {
		return fmt.Errorf("%w: %d keys, written %d", ErrCheck, resp.Count, want.TotalKeys)
	}
	r.res.Checks = append(r.res.Checks, fmt.Sprintf("%d keys", want.TotalKeys))
	verdict, err := r.checkHashKV(ctx, cli, ep, st.Version)
	if err != nil {
		return err
	}
	r.res.Checks = append(r.res.Checks, "hashkv "+verdict)
	for _, res := range []string{"namespaces", "pods", "deployments", "configmaps", "secrets"} {
		c, err := cli.Get(ctx, "/registry/"+res+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil {
			return fmt.Errorf("count %s: %w", res, err)
		}
		r.res.Counts = append(r.res.Counts, fmt.Sprintf("%s %d", res, c.Count))
	}
	return nil
}

// checkHashKV compares the HashKV at the written revision of this
// member (at ep) and, on a cluster of several, of every member with what
// was written.
func (r *run) checkHashKV(ctx context.Context, cli *clientv3.Client, ep, version string) (string, error) {
	want := r.j.Expected
	expect := verify.Status{Revision: want.Revision, CompactRevision: want.CompactRevision, HashKV: want.HashKV,
		HashKVComparable: want.HashKVComparable, HashKVReason: want.HashKVReason}
	eps := map[string]string{r.j.Name: ep}
	if len(r.j.Others()) > 0 {
		ml, err := cli.MemberList(ctx)
		if err != nil {
			return "", fmt.Errorf("member list of the restored cluster: %w", err)
		}
		for _, m := range ml.Members {
			if len(m.ClientURLs) == 0 {
				return "", fmt.Errorf("%w: member %s (%x) has no client URL: it has not started", ErrCheck, m.Name, m.ID)
			}
			eps[m.Name] = m.ClientURLs[0]
		}
	}
	var verdict string
	hashes := map[string]memberHash{}
	for _, name := range slices.Sorted(maps.Keys(eps)) {
		hk, err := cli.HashKV(ctx, eps[name], want.Revision)
		if err != nil {
			return "", fmt.Errorf("hashkv of member %s at %s: %w", name, eps[name], err)
		}
		v, err := verify.CompareMemberHashKV(expect, version, hk.Hash, hk.CompactRevision)
		if err != nil {
			return "", fmt.Errorf("%w: member %s: %v", ErrCheck, name, err)
		}
		verdict = v
		hashes[name] = memberHash{hk.Hash, hk.CompactRevision}
	}
	if len(eps) == 1 {
		return verdict, nil
	}
	if verdict == "match" {
		return fmt.Sprintf("match on all %d members", len(eps)), nil
	}
	agree, err := membersAgree(want.Revision, hashes)
	if err != nil {
		return "", err
	}
	return verdict + "; " + agree, nil
}

// memberHash is one member's HashKV at the written revision.
type memberHash struct {
	hash       uint32
	compactRev int64
}

// membersAgree compares the members' HashKVs with each other, for when
// they cannot be compared with the written file (a compaction the
// restore scheduled has not finished): members at the same compact
// revision must hash the same keys the same; members at different ones
// cannot be compared, and the verdict says so.
func membersAgree(rev int64, hashes map[string]memberHash) (string, error) {
	names := slices.Sorted(maps.Keys(hashes))
	first := hashes[names[0]]
	for _, n := range names[1:] {
		h := hashes[n]
		if h.compactRev != first.compactRev {
			var at []string
			for _, n := range names {
				at = append(at, fmt.Sprintf("%s %d", n, hashes[n].compactRev))
			}
			return "the members cannot be compared with each other either: their compact revisions differ (" + strings.Join(at, ", ") + ")", nil
		}
		if h.hash != first.hash {
			return "", fmt.Errorf("%w: the members disagree at revision %d (compact revision %d): %s 0x%08x, %s 0x%08x; do not use this cluster: run lifeboat restore --kubeadm --rollback on every node",
				ErrCheck, rev, first.compactRev, names[0], first.hash, n, h.hash)
		}
	}
	return fmt.Sprintf("the %d members agree with each other (0x%08x at compact revision %d)", len(names), first.hash, first.compactRev), nil
}

// membersNotStarted returns the members of the cluster that have not
// published their name and client URLs yet (started, but not yet known
// to the others).
func membersNotStarted(ctx context.Context, cli *clientv3.Client) ([]string, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ml.Members {
		if m.Name == "" || len(m.ClientURLs) == 0 {
			out = append(out, strings.Join(m.PeerURLs, ","))
		}
	}
	return out, nil
}

// Answering splits members by whether their peer URL accepts a
// connection: up are running (a restore must not replace the data under
// them), down not yet (or no longer), each as name=peerURL.
func Answering(ctx context.Context, members []Member) (up, down []string) {
	for _, m := range members {
		hp, err := hostPort(m.PeerURL)
		if err == nil && listening(ctx, hp) {
			up = append(up, m.String())
		} else {
			down = append(down, m.String())
		}
	}
	return up, down
}

// etcdClient dials the member at its client URLs with the apiserver's
// etcd client certificate (plain for http URLs).
func (r *run) etcdClient() (*clientv3.Client, error) { return r.n.etcdClient() }

// etcdClient dials the node's member at its client URLs with the
// apiserver's etcd client certificate (plain for http URLs).
func (n *Node) etcdClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: n.ClientURLs, DialTimeout: 5 * time.Second, Logger: zapNop()}
	if strings.HasPrefix(n.ClientURLs[0], "https://") {
		cert, err := tls.LoadX509KeyPair(n.Path(n.EtcdCert), n.Path(n.EtcdKey))
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate (kube-apiserver's --etcd-certfile, --etcd-keyfile): %w", err)
		}
		pool, err := certPool(n.Path(n.EtcdCA))
		if err != nil {
			return nil, err
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return clientv3.New(cfg)
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA %s: no PEM certificate", file)
	}
	return pool, nil
}

// startAPIServer moves kube-apiserver.yaml back and waits for /readyz.
func (r *run) startAPIServer(ctx context.Context) (string, error) {
	if err := moveManifests(r.j.Aside, r.j.Manifests, APIYAML); err != nil {
		return "", err
	}
	start := r.o.Now()
	if err := r.waitReady(ctx); err != nil {
		return "", err
	}
	r.res.Checks = append(r.res.Checks, r.n.APIServer+"/readyz ok")
	return fmt.Sprintf("the apiserver is ready at %s after %.1fs", r.n.APIServer, r.o.Now().Sub(start).Seconds()), nil
}

// waitReady waits until the apiserver's /readyz answers ok.
func (r *run) waitReady(ctx context.Context) error {
	pool, err := certPool(r.n.Path(r.n.APICA))
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	u := r.n.APIServer + "/readyz"
	return r.wait(ctx, r.o.StartTimeout, "the apiserver's "+u, func(ctx context.Context) (bool, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return false, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("%s: %s", resp.Status, lastLine(string(body))), nil
		}
		return true, "", nil
	})
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// wait polls done until it reports true, printing what it waits for
// every 5 s; it gives up after limit.
func (r *run) wait(ctx context.Context, limit time.Duration, what string, done func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := r.o.Now()
	next := 5 * time.Second
	t := time.NewTicker(r.o.Poll)
	defer t.Stop()
	for {
		ok, why, err := done(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if el := r.o.Now().Sub(start); el >= next {
			fmt.Fprintf(r.o.Out, "  waiting %.0fs for %s: %s\n", el.Seconds(), what, why)
			next += 5 * time.Second
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %s for %s: %s", limit, what, why)
		case <-t.C:
		}
	}
}
