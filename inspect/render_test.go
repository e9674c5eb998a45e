package inspect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestForApply: the fields the API server sets go, and the owner
// references too unless kept; what was dropped is returned.
func TestForApply(t *testing.T) {
	const obj = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"shop","uid":"u-1","resourceVersion":"9",` +
		`"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d4","uid":"u-rs","controller":true},"junk"]},` +
		`"spec":{"x":1},"status":{"phase":"Running"}}`
	tests := []struct {
		name        string
		in          string
		keepOwners  bool
		wantJSON    string
		wantDropped []Owner
	}{
		{"owners dropped", obj, false, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"shop"},"spec":{"x":1}}`,
			[]Owner{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d4", UID: "u-rs"}, {}}},
		{"owners kept", obj, true, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"shop",` +
			`"ownerReferences":[{"apiVersion":"apps/v1","controller":true,"kind":"ReplicaSet","name":"web-7d4","uid":"u-rs"},"junk"]},"spec":{"x":1}}`, nil},
		{"no owners", `{"kind":"ConfigMap","metadata":{"name":"c","uid":"u"}}`, false, `{"kind":"ConfigMap","metadata":{"name":"c"}}`, nil},
		{"no metadata", `{"kind":"X"}`, false, `{"kind":"X"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped, err := ForApply([]byte(tt.in), tt.keepOwners)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(got), tt.wantJSON); diff != "" {
				t.Errorf("object (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(dropped, tt.wantDropped); diff != "" {
				t.Errorf("dropped (-got +want):\n%s", diff)
			}
		})
	}
	if _, _, err := ForApply([]byte("not json"), false); err == nil {
		t.Error("ForApply of bad JSON: no error")
	}
	if got := (Owner{Kind: "ReplicaSet", Name: "web-7d4", UID: "u-rs"}).String(); got != "ReplicaSet web-7d4 (uid u-rs)" {
		t.Errorf("Owner.String() = %q", got)
	}
}
