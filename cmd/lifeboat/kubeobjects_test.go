package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
	"github.com/lifeboat-dev/lifeboat/kubeobjects"
)

// The resources of the chart's CRDs (deploy/helm/lifeboat/crds/lifeboat.dev.yaml).
var (
	etcdBackups     = kubetest.Resource{APIVersion: kubeobjects.Group + "/" + kubeobjects.Version, Plural: "etcdbackups", Namespaced: true}
	recoverables    = kubetest.Resource{APIVersion: kubeobjects.Group + "/" + kubeobjects.Version, Plural: "etcdrecoverabilities"}
	events          = kubetest.Resource{APIVersion: "v1", Plural: "events", Namespaced: true}
	chartCRDs       = filepath.Join("..", "..", "deploy", "helm", "lifeboat", "crds", "lifeboat.dev.yaml")
	kubeObjectsNS   = "lifeboat"
	kubeObjectsName = "kube"
)

// TestAgentKubeObjects runs agent --once, as the chart's CronJobs do, with
// kubernetes.objects.enabled against a real kube-apiserver (storing into
// the etcd being backed up) that has the chart's CRDs: each run's backup
// gets its EtcdBackup object with the printer columns `kubectl get
// etcdbackups` shows, a pruned backup's object goes, a failed drill and a
// failed backup leave their Events, and with the API server stopped the
// backup still succeeds (the failure counted in
// lifeboat_kubernetes_sync_failures_total) and the next run catches up.
func TestAgentKubeObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd, kube-apiserver and drills")
	}
	kubectl := kubetest.NeedKubectl(t)
	// The API server stores into the etcd being backed up: the backups
	// hold real Kubernetes data (and the CRDs).
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	srv := startKubeWithCRDs(t, c)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	srv.WriteKubeconfig(t, kubeconfig)
	textfile := filepath.Join(dir, "lifeboat.prom")
	run := func(t *testing.T, wantCode int, args ...string) string {
		t.Helper()
		all := []string{"agent", "--once", "--cluster", kubeObjectsName,
			"--store", "file://" + filepath.Join(dir, "store"), "--spool-dir", filepath.Join(dir, "spool"),
			"--scratch-dir", filepath.Join(dir, "scratch"), "--log-format", "json",
			"--textfile", textfile, "--kubernetes-objects", "--kubeconfig", kubeconfig, "--kubernetes-namespace", kubeObjectsNS,
			"--keep-last", "2"}
		if !slices.Contains(args, "--endpoints") {
			all = append(all, "--endpoints", c.Endpoints()[0])
		}
		code, out, errOut := runCLI(t, nil, append(all, args...)...)
		if code != wantCode {
			t.Fatalf("agent --once %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, wantCode, out, errOut)
		}
		return errOut
	}
	get := func(t *testing.T, what ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "get"}, what...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get %v: %v\n%s", what, err, out)
		}
		return string(out)
	}

	var first []string
	t.Run("created with columns", func(t *testing.T) {
		run(t, exitOK, "--prune-schedule", "")
		out := get(t, "etcdbackups", "-n", kubeObjectsNS)
		t.Logf("kubectl get etcdbackups:\n%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got, want := strings.Fields(lines[0]), []string{"NAME", "AGE", "REVISION", "SIZE", "VERIFIED", "LAST", "DRILL", "DRILLED"}; !slices.Equal(got, want) {
			t.Fatalf("kubectl get etcdbackups header %q, want %q\n%s", got, want, out)
		}
		if len(lines) != 2 {
			t.Fatalf("kubectl get etcdbackups: want one backup\n%s", out)
		}
		row := strings.Fields(lines[1])
		// NAME AGE REVISION SIZE(2 fields: "12.3 KiB") VERIFIED LAST-DRILL DRILLED
		if len(row) != 8 || !strings.HasPrefix(row[0], kubeObjectsName+"-") || row[5] != "yes" || row[6] != "passed" {
			t.Errorf("row %q: want name %s-…, VERIFIED yes, LAST DRILL passed\n%s", row, kubeObjectsName, out)
		}
		first = names(t, srv, etcdBackups)
		out = get(t, "etcdrecoverabilities", kubeobjects.ObjectName(kubeObjectsName))
		if !strings.Contains(out, "passed") || !strings.Contains(out, "1 intact backup(s)") {
			t.Errorf("kubectl get etcdrecoverabilities:\n%s", out)
		}
	})

	t.Run("pruned object deleted", func(t *testing.T) {
		// Drilled each time: retention never prunes the newest proven
		// backup.
		run(t, exitOK, "--prune-schedule", "")
		run(t, exitOK, "--prune-schedule", "@every 1h")
		got := names(t, srv, etcdBackups)
		if len(got) != 2 || slices.Contains(got, first[0]) {
			t.Errorf("objects after keep-last 2 pruned the first backup: %v (first %v)", got, first)
		}
	})

	t.Run("failed drill event", func(t *testing.T) {
		run(t, exitFailed, "--snapshot-schedule", "", "--prune-schedule", "", "--check-prefix", "/registry/no-such-resource/")
		ev := findEvent(t, srv, kubeObjectsNS, kubeobjects.ReasonDrillFailed)
		io, _ := ev["involvedObject"].(map[string]any)
		if io["kind"] != "EtcdBackup" || !strings.HasPrefix(io["name"].(string), kubeObjectsName+"-") {
			t.Errorf("DrillFailed event on %v, want an EtcdBackup", io)
		}
		if out := get(t, "etcdbackups", "-n", kubeObjectsNS, io["name"].(string)); !strings.Contains(out, "failed") {
			t.Errorf("the drilled backup's LAST DRILL is not failed:\n%s", out)
		}
	})

	t.Run("failed backup event", func(t *testing.T) {
		run(t, exitFailed, "--endpoints", "http://127.0.0.1:1", "--drill-schedule", "", "--prune-schedule", "",
			"--snapshot-retries", "0", "--dial-timeout", "1s", "--lock=false")
		ev := findEvent(t, srv, "default", kubeobjects.ReasonBackupFailed)
		if io, _ := ev["involvedObject"].(map[string]any); io["kind"] != "EtcdRecoverability" {
			t.Errorf("BackupFailed event on %v, want the EtcdRecoverability", io)
		}
	})

	t.Run("outage does not fail the backup", func(t *testing.T) {
		before := names(t, srv, etcdBackups)
		srv.Stop()
		errOut := run(t, exitOK, "--drill-schedule", "", "--prune-schedule", "")
		body, err := os.ReadFile(textfile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `lifeboat_kubernetes_sync_failures_total{op="sync"} 1`+"\n") {
			t.Errorf("textfile lacks the sync failure:\n%s", body)
		}
		if !strings.Contains(errOut, "cannot update the Kubernetes objects") {
			t.Errorf("log lacks the sync failure:\n%s", errOut)
		}
		// The API back (a new server on the same etcd): the next run
		// catches up with the backup taken while it was away.
		srv = kubetest.Start(t, kubetest.Options{EtcdServers: c.Endpoints()})
		srv.WriteKubeconfig(t, kubeconfig)
		run(t, exitOK, "--drill-schedule", "", "--prune-schedule", "")
		after := names(t, srv, etcdBackups)
		t.Logf("kubectl get etcdbackups,etcdrecoverabilities -A -o wide:\n%s", get(t, "etcdbackups,etcdrecoverabilities", "-A", "-o", "wide"))
		if len(after) != len(before)+2 {
			t.Errorf("objects %v after two backups (one while the API was down), before %v", after, before)
		}
	})
}

// startKubeWithCRDs starts a kube-apiserver on c, applies the chart's
// CRDs and creates the objects' namespace.
func startKubeWithCRDs(t *testing.T, c *etcdtest.Cluster) *kubetest.Server {
	t.Helper()
	srv := kubetest.Start(t, kubetest.Options{EtcdServers: c.Endpoints()})
	cli := srv.Client()
	raw, err := os.ReadFile(chartCRDs)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var crd kubetest.Object
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			t.Fatalf("%s: %v", chartCRDs, err)
		}
		if _, err := cli.Create(t.Context(), kubetest.CRDs, "", crd); err != nil {
			t.Fatalf("create CRD %s: %v", kubetest.Name(crd), err)
		}
	}
	for _, r := range []kubetest.Resource{etcdBackups, recoverables} {
		if err := cli.WaitCRD(t.Context(), r.Plural+"."+kubeobjects.Group, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Create(t.Context(), kubetest.Namespaces, "", kubetest.NewNamespace(kubeObjectsNS)); err != nil {
		t.Fatal(err)
	}
	return srv
}

// names lists the names of r's objects in the objects' namespace.
func names(t *testing.T, srv *kubetest.Server, r kubetest.Resource) []string {
	t.Helper()
	objs, err := srv.Client().List(t.Context(), r, kubeObjectsNS, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, kubetest.Name(o))
	}
	slices.Sort(out)
	return out
}

// findEvent returns the event of reason in ns, or fails the test.
func findEvent(t *testing.T, srv *kubetest.Server, ns, reason string) kubetest.Object {
	t.Helper()
	evs, err := srv.Client().List(t.Context(), events, ns, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e["reason"] == reason {
			if e["type"] != "Warning" || e["message"] == "" {
				t.Errorf("event %v: want a Warning with a message", e)
			}
			return e
		}
	}
	t.Fatalf("no %s event in namespace %s among %d", reason, ns, len(evs))
	return nil
}
