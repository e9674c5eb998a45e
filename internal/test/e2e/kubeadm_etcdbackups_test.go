package e2e

import (
	"strings"
	"testing"
)

// checkEtcdBackups: `kubectl get etcdbackups` on the node lists the
// backup id that the chart's CronJob Jobs wrote (kubernetesObjects, on by
// default: the CRDs from the chart's crds/, the objects written by the
// Jobs' agent --once through the pod's ServiceAccount), verified, with its
// passed drill; the cluster's EtcdRecoverability says the same.
func checkEtcdBackups(t *testing.T, kubectl func(...string) string, id string) {
	t.Helper()
	out := kubectl("get", "etcdbackups", "-n", "lifeboat")
	t.Logf("kubectl get etcdbackups -n lifeboat:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get etcdbackups: want one backup, %s's", id)
	}
	row := strings.Fields(lines[1])
	if !strings.HasSuffix(row[0], "-"+strings.ToLower(id)) || !strings.Contains(lines[1], " yes ") || !strings.Contains(lines[1], " passed ") {
		t.Errorf("kubectl get etcdbackups: want %s's object, VERIFIED yes, LAST DRILL passed:\n%s", id, out)
	}
	rec := kubectl("get", "etcdrecoverabilities")
	t.Logf("kubectl get etcdrecoverabilities:\n%s", rec)
	if !strings.Contains(rec, "passed") || !strings.Contains(rec, "1 intact backup(s)") {
		t.Errorf("kubectl get etcdrecoverabilities: want 1 intact backup and a passed drill:\n%s", rec)
	}
}
