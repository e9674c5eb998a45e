package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// The point-in-time part of the demo: with capture running, a namespace
// is deleted, found in the captured changes, restored to the revision
// before its deletion, and one of its objects is got back for kubectl
// apply. Each step runs the code of the command it names.

// demoRestoredName is the member name of the restored data dir.
const demoRestoredName = "demo-restored"

// demoPITR is what the point-in-time steps did and found.
type demoPITR struct {
	// Prefixes are where the namespace's objects live (one per resource:
	// /registry/<resource>/<namespace>/), then the namespace's own key.
	Prefixes []string
	// Before is the namespace's keys and values just before its
	// deletion, read at BeforeRevision.
	Before         map[string]demoKV
	BeforeRevision int64
	// Changes are the revisions written after the backup, before the
	// deletion (first and last; 0 when there were none).
	Changes [2]int64
	// Deletion are the revisions of the deletion, in order, as etcd
	// answered them: the namespace marked Terminating, its objects
	// deleted resource by resource, its key deleted.
	Deletion []int64
	// Generation is the capture generation that holds them.
	Generation string
	// Start and Delete are what lifeboat log found of the namespace's
	// key: the revision of its PUT that began the deletion and of its
	// DELETE; Deleted counts the DELETEs it found from Start to Delete.
	Start, Delete int64
	Deleted       int
	// Target is the revision restored: Start − 1.
	Target int64
	// Restored is the namespace's keys and values read back from an
	// etcd booted on the restored data dir, at RestoredRevision.
	Restored         map[string]demoKV
	RestoredRevision int64
	// Ls and Get are what ls and get --for-apply printed at Target.
	Ls, Get string
}

// demoKV is a key's value and its etcd metadata.
type demoKV struct {
	Value                                []byte
	CreateRevision, ModRevision, Version int64
	Lease                                int64
}

// pointInTime runs the point-in-time steps: capture is stopped before
// it returns, whatever happens.
func (d *demoRun) pointInTime(ctx context.Context) error {
	c, err := d.startCapture(ctx)
	if err != nil {
		return err
	}
	defer c.stop()
	if err := d.keepChanging(ctx); err != nil {
		return err
	}
	if err := d.deleteNamespace(ctx); err != nil {
		return err
	}
	p := &d.pitr
	if p.Generation, err = c.waitDurable(ctx, p.Deletion[len(p.Deletion)-1], d.out); err != nil {
		return err
	}
	if err := c.stop(); err != nil {
		return fmt.Errorf("demo: capture: %w", err)
	}
	for _, step := range []func(context.Context) error{d.findDeletion, d.restoreBefore, d.lsBefore, d.getForApply} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// demoChanges is how many writes the demo makes between its backup and
// the deletion: the restore replays them.
const demoChanges = 300

// keepChanging writes demoChanges changes of a running control plane
// (seed.Changes: updates, some deletes), one revision each.
func (d *demoRun) keepChanging(ctx context.Context) error {
	d.stepf("the cluster keeps changing: %d writes after the backup, one revision each (kube-apiserver at work)", demoChanges)
	opts := seed.Options{Objects: d.o.objects, Seed: 1}
	if d.o.objects <= opts.WithDefaults().Namespaces {
		fmt.Fprintln(d.out, "    (no seeded object to change: --objects is too small)")
		return nil
	}
	ch, err := seed.NewChanges(opts)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p := &d.pitr
	for range demoChanges {
		key, value, del := ch.Next()
		var h *etcdserverpb.ResponseHeader
		if del {
			r, err := d.cli.Delete(ctx, key)
			if err != nil {
				return fmt.Errorf("demo: delete %s: %w", key, err)
			}
			h = r.Header
		} else {
			r, err := d.cli.Put(ctx, key, string(value))
			if err != nil {
				return fmt.Errorf("demo: put %s: %w", key, err)
			}
			h = r.Header
		}
		if p.Changes[0] == 0 {
			p.Changes[0] = h.Revision
		}
		p.Changes[1] = h.Revision
	}
	fmt.Fprintf(d.out, "    revisions %d-%d\n", p.Changes[0], p.Changes[1])
	return nil
}

// deleteNamespace deletes demoNamespace as kubectl delete namespace ends
// up doing: kube-apiserver marks the namespace Terminating, the namespace
// controller deletes its objects resource by resource, then the
// namespace's key goes. It keeps the state before.
func (d *demoRun) deleteNamespace(ctx context.Context) error {
	d.stepf("deleting namespace %s and everything in it (kubectl delete namespace %s)", demoNamespace, demoNamespace)
	p := &d.pitr
	var err error
	if p.Prefixes, err = namespacePrefixes(ctx, d.cli, demoNamespace); err != nil {
		return err
	}
	if p.Before, p.BeforeRevision, err = readPrefixes(ctx, d.cli, p.Prefixes); err != nil {
		return fmt.Errorf("demo: read namespace %s: %w", demoNamespace, err)
	}
	term, err := demoTerminating()
	if err != nil {
		return err
	}
	r, err := d.cli.Put(ctx, demoNamespaceKey, string(term))
	if err != nil {
		return fmt.Errorf("demo: mark %s terminating: %w", demoNamespace, err)
	}
	p.Deletion = append(p.Deletion, r.Header.Revision)
	for _, pre := range p.Prefixes {
		r, err := d.cli.Delete(ctx, pre, underOpts(pre)...)
		if err != nil {
			return fmt.Errorf("demo: delete %s: %w", pre, err)
		}
		p.Deletion = append(p.Deletion, r.Header.Revision)
	}
	fmt.Fprintf(d.out, "    revisions %d-%d: the namespace marked Terminating, the objects of each of its %d resources deleted, then its key: %d keys gone\n",
		p.Deletion[0], p.Deletion[len(p.Deletion)-1], len(p.Prefixes)-1, len(p.Before))
	return nil
}

// namespacePrefixes lists where the objects of namespace ns are (one
// /registry/<resource>/<ns>/ per resource that has some, sorted), then
// the namespace's own key.
func namespacePrefixes(ctx context.Context, cli *clientv3.Client, ns string) ([]string, error) {
	nsKey := "/registry/namespaces/" + ns
	r, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("demo: list the keys: %w", err)
	}
	var out []string
	for _, kv := range r.Kvs {
		res, kns, _ := splitKubernetesKey(kv.Key)
		if pre := "/registry/" + res + "/" + ns + "/"; kns == ns && !slices.Contains(out, pre) {
			out = append(out, pre)
		}
	}
	slices.Sort(out)
	return append(out, nsKey), nil
}

// readPrefixes reads every key under each prefix (see underOpts) in
// one transaction: one consistent state, and the revision it is of.
func readPrefixes(ctx context.Context, cli *clientv3.Client, prefixes []string) (map[string]demoKV, int64, error) {
	var ops []clientv3.Op
	for _, p := range prefixes {
		ops = append(ops, clientv3.OpGet(p, underOpts(p)...))
	}
	r, err := cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, err
	}
	out := map[string]demoKV{}
	for _, op := range r.Responses {
		for _, kv := range op.GetResponseRange().Kvs {
			out[string(kv.Key)] = demoKV{Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
		}
	}
	return out, r.Header.Revision, nil
}

// underOpts makes an operation on p cover every key under it when p ends
// with a slash (a prefix), else the key p alone.
func underOpts(p string) []clientv3.OpOption {
	if strings.HasSuffix(p, "/") {
		return []clientv3.OpOption{clientv3.WithPrefix()}
	}
	return nil
}

// findDeletion finds the deletion with lifeboat log: the namespace key's
// PUT that began it and its DELETE, then what went between; the target
// is the revision before the PUT.
func (d *demoRun) findDeletion(ctx context.Context) error {
	p := &d.pitr
	d.stepf("finding the deletion in the captured changes (lifeboat log %s --generation %s)", demoNamespaceKey, p.Generation)
	ns, err := d.logged(ctx, logOptions{prefix: demoNamespaceKey, generation: p.Generation}, 4, 2)
	if err != nil {
		return err
	}
	if len(ns) < 2 || ns[0].Op != "put" || ns[len(ns)-1].Op != "delete" {
		return fmt.Errorf("demo: lifeboat log shows no PUT then DELETE of %s in generation %s: %d changes", demoNamespaceKey, p.Generation, len(ns))
	}
	p.Start, p.Delete, p.Target = ns[0].Revision, ns[len(ns)-1].Revision, ns[0].Revision-1
	fmt.Fprintf(d.out, "    marked for deletion at revision %d, deleted at %d; between them (lifeboat log --since-revision %d --until-revision %d):\n", p.Start, p.Delete, p.Start, p.Delete)
	all, err := d.logged(ctx, logOptions{sinceRevision: p.Start, untilRevision: p.Delete, generation: p.Generation}, 3, 2)
	if err != nil {
		return err
	}
	for _, c := range all {
		if c.Op == "delete" {
			p.Deleted++
		}
	}
	fmt.Fprintf(d.out, "    %d DELETEs: the state before the deletion is revision %d\n", p.Deleted, p.Target)
	return nil
}

// logged runs lifeboat log with o: it prints the table, shortened to its
// first head and last tail lines, and returns the changes (-o json).
func (d *demoRun) logged(ctx context.Context, o logOptions, head, tail int) ([]loggedChange, error) {
	var js, table bytes.Buffer
	o.output = "json"
	if err := runLog(ctx, d.cfg, d.lg, o, &js, time.Now()); err != nil {
		return nil, err
	}
	var changes []loggedChange
	if err := json.Unmarshal(js.Bytes(), &changes); err != nil {
		return nil, fmt.Errorf("demo: read lifeboat log -o json: %w", err)
	}
	o.output = "table"
	if err := runLog(ctx, d.cfg, d.lg, o, &table, time.Now()); err != nil {
		return nil, err
	}
	printShortened(d.out, table.String(), head, tail)
	return changes, nil
}

// printShortened prints the first head and last tail lines of text, and
// how many lines it left out between them.
func printShortened(out io.Writer, text string, head, tail int) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) > head+tail+1 {
		lines = slices.Concat(lines[:head], []string{fmt.Sprintf("… %d more …", len(lines)-head-tail)}, lines[len(lines)-tail:])
	}
	for _, l := range lines {
		fmt.Fprintln(out, "    "+l)
	}
}

// restoreBefore restores Target into a scratch data dir, as restore
// --to-revision does, boots it and reads the namespace back.
func (d *demoRun) restoreBefore(ctx context.Context) error {
	p := &d.pitr
	dir := filepath.Join(d.tmp, "restored")
	d.stepf("restoring revision %d, just before the deletion (lifeboat restore --to-revision %d --data-dir %s --name %s --initial-advertise-peer-urls %s)",
		p.Target, p.Target, dir, demoRestoredName, child.SocketPeerURL)
	o := restoreOptions{toRevision: p.Target, dataDir: dir, name: demoRestoredName, peerURLs: []string{child.SocketPeerURL}}
	if err := runRestore(ctx, d.a, d.cfg, d.lg, o, time.Now()); err != nil {
		return err
	}
	return d.bootRestored(ctx, dir)
}

// bootRestored boots a throwaway etcd on the restored data dir, as
// drills do (unix sockets, no TCP port), and checks that the namespace
// is back as it was.
func (d *demoRun) bootRestored(ctx context.Context, dir string) error {
	p := &d.pitr
	fmt.Fprintf(d.out, "    booting a throwaway etcd on %s, as drills do, and reading namespace %s back\n", dir, demoNamespace)
	srv, err := child.StartEtcd(ctx, child.EtcdOptions{DataDir: dir, Name: demoRestoredName, SocketDir: filepath.Join(d.tmp, "sock"), NoSync: true})
	if err != nil {
		return fmt.Errorf("demo: boot the restored data dir: %w", err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("demo: connect to the restored etcd: %w", err)
	}
	defer cli.Close()
	if p.Restored, p.RestoredRevision, err = readPrefixes(ctx, cli, p.Prefixes); err != nil {
		return fmt.Errorf("demo: read the restored etcd: %w", err)
	}
	if p.RestoredRevision != p.Target {
		return fmt.Errorf("demo: the restored etcd is at revision %d, not %d", p.RestoredRevision, p.Target)
	}
	if diff := diffKeys(p.Before, p.Restored); diff != "" {
		return fmt.Errorf("demo: namespace %s restored at revision %d is not as it was before the delete: %s", demoNamespace, p.Target, diff)
	}
	fmt.Fprintf(d.out, "    all %d keys of namespace %s are back, every value, version and revision as it was before the delete\n", len(p.Restored), demoNamespace)
	return nil
}

// diffKeys says how got differs from want ("" when equal).
func diffKeys(want, got map[string]demoKV) string {
	var missing, extra, changed []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			missing = append(missing, k)
		} else if !bytes.Equal(g.Value, v.Value) || g.CreateRevision != v.CreateRevision || g.ModRevision != v.ModRevision || g.Version != v.Version || g.Lease != v.Lease {
			changed = append(changed, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra)+len(changed) == 0 {
		return ""
	}
	slices.Sort(missing)
	slices.Sort(extra)
	slices.Sort(changed)
	return fmt.Sprintf("%d keys missing %.3q, %d extra %.3q, %d with another value or metadata %.3q", len(missing), missing, len(extra), extra, len(changed), changed)
}

// lsBefore lists the namespace's deployments at Target with ls.
func (d *demoRun) lsBefore(ctx context.Context) error {
	p := &d.pitr
	prefix := "/registry/deployments/" + demoNamespace + "/"
	d.stepf("listing its deployments as they were at revision %d (lifeboat ls @%d %s)", p.Target, p.Target, prefix)
	var b bytes.Buffer
	o := lsOptions{source: fmt.Sprintf("@%d", p.Target), prefix: prefix, output: "table"}
	if err := runLs(ctx, d.writingTo(&b), d.cfg, d.lg, o); err != nil {
		return err
	}
	p.Ls = b.String()
	return nil
}

// getForApply gets the deleted Deployment at Target with get --for-apply.
func (d *demoRun) getForApply(ctx context.Context) error {
	p := &d.pitr
	d.stepf("getting the deleted Deployment back for kubectl apply (lifeboat get @%d %s --for-apply | kubectl apply -f -)", p.Target, demoDeployment)
	var b bytes.Buffer
	o := getOptions{source: fmt.Sprintf("@%d", p.Target), key: demoDeployment, output: "yaml", forApply: true}
	if err := runGet(ctx, d.writingTo(&b), d.cfg, d.lg, o); err != nil {
		return err
	}
	p.Get = b.String()
	return nil
}

// writingTo is the demo's app with its output also written to w.
func (d *demoRun) writingTo(w io.Writer) *app {
	a := *d.a
	a.stdout = io.MultiWriter(d.out, w)
	return &a
}

// printDemoPITRSummary closes the demo with what the point-in-time steps
// showed and the commands to look again.
func printDemoPITRSummary(out io.Writer, prog string, cfg *Config, p *demoPITR) {
	fmt.Fprintf(out, "point in time: namespace %s, deleted at revisions %d-%d, restored to revision %d with its %d keys as they were.\n",
		demoNamespace, p.Start, p.Delete, p.Target, len(p.Restored))
	fmt.Fprintf(out, "try:  %s log --generation %s --store %s\n      %s ls @%d /registry/deployments/%s/ --store %s\n",
		prog, p.Generation, cfg.Store.URL, prog, p.Target, demoNamespace, cfg.Store.URL)
}
