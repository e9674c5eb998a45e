package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's generated region from the option table")

// TestDocs: docs/configuration.md's option reference is the table's; -update
// rewrites it, keeping the prose around the markers.
func TestDocs(t *testing.T) {
	path := filepath.Join("..", "..", configDocPath)
	if *update {
		if err := updateConfigDoc(path); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	if diff := cmp.Diff(spliceConfigDoc(got), got); diff != "" {
		t.Errorf("%s is stale: run go test ./cmd/lifeboat -run TestDocs -update (-want +got):\n%s", configDocPath, diff)
	}
	for i := range optionTable {
		if d := optionTable[i]; !strings.Contains(got, "| `"+d.Key+"` | `--"+d.Flag+"` |") {
			t.Errorf("%s does not list %s", configDocPath, d.Key)
		}
	}
}

func TestSpliceConfigDocKeepsProse(t *testing.T) {
	doc := "# Configuration\n\nprose above\n\n" + docBegin + "\nold table\n" + docEnd + "\n\nprose below\n"
	got := spliceConfigDoc(doc)
	if !strings.HasPrefix(got, "# Configuration\n\nprose above\n\n"+docBegin+"\n") || !strings.HasSuffix(got, docEnd+"\n\nprose below\n") {
		t.Errorf("prose not kept:\n%s", got)
	}
	if strings.Contains(got, "old table") {
		t.Errorf("old table kept:\n%s", got)
	}
	if again := spliceConfigDoc(got); again != got {
		t.Errorf("splicing twice changes the file")
	}
}

// TestCompletion: lifeboat completion bash|zsh|fish prints a script.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		t.Run(sh, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, "completion", sh)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "lifeboat") || len(out) < 1000 {
				t.Errorf("completion %s printed no script:\n%s", sh, out)
			}
		})
	}
	code, out, _ := runCLI(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "completion") {
		t.Errorf("lifeboat --help does not list completion (exit %d):\n%s", code, out)
	}
}

// TestHelpShowsTypesAndGroups: help names each flag's type and lists a
// command's flags by group, without other groups' flags.
func TestHelpShowsTypesAndGroups(t *testing.T) {
	tests := []struct {
		args      []string
		want, not []string
	}{
		{args: []string{"snapshot", "--help"},
			want: []string{"--timeout duration", "--s3-part-size size", "--endpoints strings", "--writeback-chunk size", "etcd connection flags:", "Store flags:", "Encryption flags:", "Snapshot flags:", "--log-level string"},
			not:  []string{"--keep-last", "--listen", "--webhook", "--snapshot-schedule", "--scratch-dir", "Retention flags:", "Agent flags:"}},
		{args: []string{"prune", "--help"}, want: []string{"--keep-last int", "--keep-within duration", "--dry-run", "Retention flags:"}, not: []string{"--endpoints", "--listen"}},
		{args: []string{"agent", "--help"}, want: []string{"--keep-last int", "--listen string", "--lock ", "(default true)", "--webhook strings", "--once", "Agent flags:", "Notifications flags:"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("help lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("help shows %q:\n%s", n, out)
				}
			}
		})
	}
}

// TestTypedFlagsRefuseBadValues: a typed flag parses its value as it is
// given, with the option's own parser; a bad one is a usage error (exit 2)
// naming the flag.
func TestTypedFlagsRefuseBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"prune", "--keep-last", "three"},
		{"snapshot", "--timeout", "soon"},
		{"snapshot", "--s3-part-size", "lots"},
		{"agent", "--lock=maybe"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, _, errOut := runCLI(t, nil, args...)
			if code != 2 || !strings.Contains(errOut, args[1][:strings.IndexAny(args[1]+"=", "=")]) {
				t.Errorf("exit %d, want 2 naming the flag: %s", code, errOut)
			}
		})
	}
	if code, out, errOut := runCLI(t, nil, "config", "check", "--s3-part-size", "64M", "--store", "s3://bucket"); code != 0 || !strings.Contains(out, "part_size: 67108864") {
		t.Errorf("--s3-part-size 64M: exit %d\n%s%s", code, out, errOut)
	}
}
