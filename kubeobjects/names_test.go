package kubeobjects

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNames(t *testing.T) {
	tests := []struct {
		cluster, id         string
		object, backup, lbl string
	}{
		{"prod", "20261130T113800Z-r250001", "prod", "prod-20261130t113800z-r250001", "prod"},
		{"Prod_EU.1", "20261130T113800Z-r1", "prod-eu-1", "prod-eu-1-20261130t113800z-r1", "Prod_EU.1"},
		{"-x-", "20261130T113800Z-r1", "x", "x-20261130t113800z-r1", "h-" + hash("-x-")},
		{"…", "20261130T113800Z-r1", "cluster-" + hash("…"), "cluster-" + hash("…") + "-20261130t113800z-r1", "h-" + hash("…")},
	}
	for _, tt := range tests {
		t.Run(tt.cluster, func(t *testing.T) {
			if got := ObjectName(tt.cluster); got != tt.object {
				t.Errorf("ObjectName(%q) = %q, want %q", tt.cluster, got, tt.object)
			}
			if got := BackupName(tt.cluster, tt.id); got != tt.backup {
				t.Errorf("BackupName(%q, %q) = %q, want %q", tt.cluster, tt.id, got, tt.backup)
			}
			if got := LabelValue(tt.cluster); got != tt.lbl {
				t.Errorf("LabelValue(%q) = %q, want %q", tt.cluster, got, tt.lbl)
			}
		})
	}
}

// FuzzNames: whatever the cluster name and id, the names are valid
// object names and the label a valid label value, and distinct clusters
// whose names differ only in what a name cannot hold still get one name
// each per backup only through their hash when sanitizing empties them.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"prod", "Prod_EU.1", "", "-", strings.Repeat("a", 300), "ü", "a..b"} {
		f.Add(s, "20261130T113800Z-r250001")
	}
	f.Fuzz(func(t *testing.T, cluster, id string) {
		for _, n := range []string{ObjectName(cluster), BackupName(cluster, id)} {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Errorf("name %q of cluster %q, id %q: %v", n, cluster, id, errs)
			}
		}
		if errs := validation.IsValidLabelValue(LabelValue(cluster)); len(errs) > 0 {
			t.Errorf("label %q of cluster %q: %v", LabelValue(cluster), cluster, errs)
		}
	})
}
