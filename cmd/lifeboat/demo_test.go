package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoHintNamesTheBinaryRun: the demo's closing hint names the program
// as it was run, so `make demo` (which runs .bin/lifeboat, not on PATH)
// suggests commands that work as printed.
func TestDemoHintNamesTheBinaryRun(t *testing.T) {
	wd := t.TempDir()
	tests := []struct {
		name, arg0, want string
	}{
		{name: "from PATH", arg0: "lifeboat", want: "lifeboat"},
		{name: "make demo", arg0: filepath.Join(wd, ".bin", "lifeboat"), want: filepath.Join(".bin", "lifeboat")},
		{name: "relative", arg0: "./lifeboat", want: "./lifeboat"},
		{name: "elsewhere", arg0: "/opt/lb/lifeboat", want: "/opt/lb/lifeboat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := programName(tt.arg0, wd); got != tt.want {
				t.Errorf("programName(%q, %q) = %q, want %q", tt.arg0, wd, got, tt.want)
			}
			var b strings.Builder
			printDemoSummary(&b, programName(tt.arg0, wd), &Config{Store: StoreConfig{URL: "file:///s"}}, "id", 1)
			if !strings.Contains(b.String(), "try:  "+tt.want+" list --store file:///s") {
				t.Errorf("summary does not suggest %q:\n%s", tt.want+" list", b.String())
			}
		})
	}
}
