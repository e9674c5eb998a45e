package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
)

// needImageLayout returns IMAGE_LAYOUT (make test builds .bin/image) or
// ends the test: Fatal under CI=true, Skip otherwise.
func needImageLayout(t *testing.T) string {
	t.Helper()
	d := os.Getenv("IMAGE_LAYOUT")
	if d == "" {
		msg := "no image layout: run make image and set IMAGE_LAYOUT=$PWD/.bin/image"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := os.Stat(filepath.Join(d, "index.json")); err != nil {
		t.Fatalf("IMAGE_LAYOUT: %v", err)
	}
	return d
}

// chartOnNodeValues are the chart's values of kubeadmCertsChart: cronjob
// mode with kubeadm's etcd PKI, lifeboat's image as imported (never
// pulled), the store a directory of the node mounted by hostPath at
// /store, both CronJobs scheduled 12 hours away (the chart's backup
// schedule, 17 past every hour, once started a Job beside the test's).
const chartOnNodeValues = `mode: cronjob
image: {repository: REPO, tag: "TAG", pullPolicy: Never}
config:
  store: {url: "file:///store"}
  drill: {timeout: 5m}
credentials:
  etcd:
    kubeadm: {enabled: true}
cronjob:
  backup: {schedule: "SCHED"}
  drill: {schedule: "SCHED"}
extraVolumes:
  - name: store
    hostPath: {path: STORE, type: Directory}
extraVolumeMounts:
  - {name: store, mountPath: /store}
# The node runs no kube-proxy: the pods reach the apiserver (for the
# EtcdBackup objects) at the node's address, not the Service's.
extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: "NODEIP"}
  - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
`

// kubeadmCertsChart installs lifeboat on the kubeadm node as a user does
// (a step of TestKubeadmInstall, on its node): image (make image's, as
// imported into the node's containerd), the Helm chart in cronjob mode
// with credentials.etcd.kubeadm.enabled (the node's own etcd at
// $(HOST_IP):2379, kubeadm's etcd client certificate by hostPath, the
// pods on the control-plane node as root), release lb in namespace
// lifeboat. A Job made from the backup CronJob (kubectl create job
// --from) runs and a backup lands in the store (a directory of the node,
// mounted by hostPath: no server); a Job from the drill CronJob runs and
// its verdict, passed, is in the store, read by the lifeboat binary of
// the host; `kubectl get etcdbackups` lists that backup, verified and
// drilled (checkEtcdBackups).
func kubeadmCertsChart(t *testing.T, ctx context.Context, n *kubeadmtest.Node, l *lifeboat, helm, image string) {
	t.Helper()
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := n.Kubectl(ctx, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, n.Tails())
		}
		return out
	}
	i := strings.LastIndex(image, ":")
	if i < strings.LastIndex(image, "/") {
		t.Fatalf("image %q has no tag", image)
	}
	repo, tag := image[:i], image[i+1:]
	store := strings.TrimPrefix(l.store, "file://")
	values := filepath.Join(t.TempDir(), "values.yaml")
	away := time.Now().UTC().Add(12 * time.Hour)
	sched := fmt.Sprintf("%d %d * * *", away.Minute(), away.Hour())
	v := strings.NewReplacer("REPO", repo, "TAG", tag, "STORE", store, "SCHED", sched, "NODEIP", n.IP).Replace(chartOnNodeValues)
	if err := os.WriteFile(values, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(kubeadmtest.Repo(t), "deploy/helm/lifeboat")
	install := exec.CommandContext(ctx, helm, "install", "lb", chart, "-f", values,
		"--namespace", "lifeboat", "--create-namespace", "--kubeconfig", n.Kubeconfig)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}

	// runJob makes a Job from the CronJob and waits until it completes; on
	// failure it shows the pods and the Job's log.
	runJob := func(cronjob, job string) {
		t.Helper()
		start := time.Now()
		kubectl("create", "job", "-n", "lifeboat", job, "--from=cronjob/"+cronjob)
		if _, err := n.Kubectl(ctx, "wait", "-n", "lifeboat", "--for=condition=Complete", "job/"+job, "--timeout=300s"); err != nil {
			pods, _ := n.Kubectl(ctx, "get", "pods", "-n", "lifeboat", "-o", "wide")
			desc, _ := n.Kubectl(ctx, "describe", "job", "-n", "lifeboat", job)
			logs, _ := n.Kubectl(ctx, "logs", "-n", "lifeboat", "job/"+job, "--tail=40")
			t.Fatalf("job %s from cronjob %s: %v\n%s\n%s\n%s\n%s", job, cronjob, err, pods, desc, logs, n.Tails())
		}
		t.Logf("job %s (from cronjob/%s) complete in %.1fs", job, cronjob, time.Since(start).Seconds())
	}

	runJob("lb-lifeboat-backup", "backup-now")
	listed := listStore(t, l)
	if len(listed.Backups) != 1 || listed.Backups[0].State != "ok" {
		t.Fatalf("after the backup Job: %d backups %+v, want 1 ok", len(listed.Backups), listed.Backups)
	}
	t.Logf("backup %s at revision %d", listed.Backups[0].ID, listed.Backups[0].Manifest.Revision)

	runJob("lb-lifeboat-drill", "drill-now")
	listed = listStore(t, l)
	if len(listed.Backups) != 1 || listed.Backups[0].DrillState != "passed" {
		t.Fatalf("after the drill Job: %+v, want the backup's drill passed", listed.Backups)
	}
	checkEtcdBackups(t, kubectl, listed.Backups[0].ID)
}

// storeListing is what kubeadmCertsChart reads of `lifeboat list -o json`.
type storeListing struct {
	Backups []struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Manifest struct {
			Revision int64 `json:"revision"`
		} `json:"manifest"`
		DrillState string `json:"drill_state"`
	} `json:"backups"`
}

// listStore is `lifeboat list -o json` of l's store.
func listStore(t *testing.T, l *lifeboat) storeListing {
	t.Helper()
	out := l.run(t, "list", "-o", "json")
	var s storeListing
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("lifeboat list -o json: %v\n%s", err, out)
	}
	return s
}
