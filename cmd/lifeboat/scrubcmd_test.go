package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestScrubCommand: lifeboat scrub over an encrypted primary and a copy
// exits 0 when both are sound; one byte flipped in the copy's older
// backup makes it exit 1 naming the object (the primary still sound)
// and records the damage in the copy; without an identity, or with a
// read_data that is not a percentage, it exits 2.
func TestScrubCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	id := restoretest.NewIdentity(t)
	idFile := filepath.Join(t.TempDir(), "id.txt")
	if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	e.args = append(e.args, "--recipient", id.Recipient().String())
	t.Setenv("LIFEBOAT_COPIES", "file://"+copyDir)
	e.snapshot(t)
	e.snapshot(t)
	if code, out, errOut := runCLI(t, nil, append([]string{"copy"}, e.args...)...); code != 0 {
		t.Fatalf("copy: exit %d\n%s\n%s", code, out, errOut)
	}
	scrubArgs := func(extra ...string) []string {
		return append(append([]string{"scrub", "--identity-file", idFile}, e.args...), extra...)
	}
	code, out, errOut := runCLI(t, nil, scrubArgs("--read-data", "100%")...)
	if code != 0 || !strings.Contains(out, "primary (") || !strings.Contains(out, "copy1 (") || strings.Count(out, ": sound") != 2 {
		t.Fatalf("scrub of sound stores: exit %d\n%s\n%s", code, out, errOut)
	}

	st, err := uploader.NewDir(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	cp := &repository.Repo{Store: st, Cluster: "test"}
	l, err := cp.List(t.Context())
	if err != nil || len(l.Backups) != 2 {
		t.Fatalf("copy's backups: %v, %v", l, err)
	}
	older := l.Backups[1].Manifest.Object
	p := filepath.Join(copyDir, filepath.FromSlash(older))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, scrubArgs("--read-data", "100", "-o", "json")...)
	if code != 1 {
		t.Fatalf("scrub of a damaged copy: exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	var res []scrubStore
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 2 {
		t.Fatalf("scrub -o json: %v\n%s", err, out)
	}
	if !res[0].Sound() || len(res[1].Damaged) != 1 || res[1].Damaged[0].Key != older {
		t.Errorf("primary %+v, copy %+v; want the primary sound and the copy's %s damaged", res[0].Result, res[1].Result, older)
	}
	recs, err := cp.ReadDamage(t.Context())
	if err != nil || !slices.ContainsFunc(recs.Current, func(d repository.Damage) bool { return d.Object == older }) {
		t.Errorf("the copy's damage records: %+v, %v; want %s", recs, err, older)
	}

	t.Run("no identity", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, append([]string{"scrub"}, e.args...)...)
		if code != 2 || !strings.Contains(errOut, "identity") {
			t.Errorf("scrub without an identity: exit %d, want 2\n%s\n%s", code, out, errOut)
		}
	})
	t.Run("bad read_data", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, scrubArgs("--read-data", "150%")...)
		if code != 2 || !strings.Contains(errOut, "percentage") {
			t.Errorf("--read-data 150%%: exit %d, want 2\n%s\n%s", code, out, errOut)
		}
	})
}

// TestScrubConfig: the scrub keys in the file and the environment, and
// their errors at the key's line.
func TestScrubConfig(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string // error; "" for none
		read       float64
	}{
		{name: "defaults", file: "cluster: a\n", read: 5},
		{name: "percent", file: "scrub:\n  read_data: 2.5%\n  cycle: 14d\n  schedule: '@daily'\n", read: 2.5},
		{name: "number", file: "scrub:\n  read_data: 10\n", read: 10},
		{name: "environment", file: "cluster: a\n", env: map[string]string{"LIFEBOAT_SCRUB_READ_DATA": "7%"}, read: 7},
		{name: "not a percentage", file: "scrub:\n  read_data: five\n", want: `config FILE:2: scrub.read_data: "five" is not a percentage from 0% to 100% (e.g. 5%)`},
		{name: "too much", file: "scrub:\n  read_data: 101%\n", want: `config FILE:2: scrub.read_data: "101%" is not a percentage from 0% to 100% (e.g. 5%)`},
		{name: "short cycle", file: "scrub:\n  cycle: 10m\n", want: "config FILE:2: scrub.cycle: 10m0s: must be at least 1h (every object is read in full once per cycle)"},
		{name: "bad schedule", file: "scrub:\n  schedule: every day\n", want: `config FILE:2: scrub.schedule: "every day" is not a cron schedule`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "c.yaml", tc.file)
			cfg, err := LoadConfig(path, envMap(tc.env), nil)
			if tc.want != "" {
				if want := strings.ReplaceAll(tc.want, "FILE", path); err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("LoadConfig: %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if float64(cfg.Scrub.ReadData) != tc.read {
				t.Errorf("scrub.read_data = %v, want %v", cfg.Scrub.ReadData, tc.read)
			}
		})
	}
}
