package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestListTruncatedManifest: a backup whose manifest is truncated is
// listed as what it is (its manifest unreadable, with the key and the
// error, its data object kept), not as "a data object without a
// manifest (unfinished upload; prune removes them)"; prune says the same.
func TestListTruncatedManifest(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := newPruneFixture(t)
	f.backup(t, time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), 28)
	m := f.backup(t, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), 30)
	p := filepath.Join(f.dir, filepath.FromSlash(f.backups.ManifestKey(m.ID)))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(t)
	lg := slog.New(slog.DiscardHandler)
	var out bytes.Buffer
	if err := runList(t.Context(), cfg, lg, listOptions{output: "table"}, &out, now); err != nil {
		t.Fatalf("list: %v", err)
	}
	got := out.String()
	if strings.Contains(got, "without a manifest") || strings.Contains(got, "unfinished") {
		t.Errorf("list calls the truncated manifest's backup an unfinished upload:\n%s", got)
	}
	for _, want := range []string{f.backups.ManifestKey(m.ID), "unreadable", "unexpected end of JSON", m.Object} {
		if !strings.Contains(got, want) {
			t.Errorf("list does not say %q:\n%s", want, got)
		}
	}
	out.Reset()
	if err := runPrune(t.Context(), cfg, lg, pruneOptions{dryRun: true, output: "table"}, &out, now); err != nil {
		t.Fatalf("prune: %v", err)
	}
	for _, want := range []string{f.backups.ManifestKey(m.ID), "unreadable", "unexpected end of JSON"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("prune does not say %q:\n%s", want, out.String())
		}
	}
}

// TestListDamagedBackup: a data object whose bytes no longer match its
// manifest's sha256, once a reader recorded it, is listed broken with
// the damage in words.
func TestListDamagedBackup(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := newPruneFixture(t)
	m := f.backup(t, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), 30)
	if err := f.backups.RecordDamage(t.Context(), repository.Damage{Object: m.Object, FoundBy: repository.FoundByDrill, Error: "sha256 differs"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runList(t.Context(), f.config(t), slog.New(slog.DiscardHandler), listOptions{output: "table"}, &out, now); err != nil {
		t.Fatalf("list: %v", err)
	}
	if !strings.Contains(out.String(), "broken: "+m.Object+" is damaged: sha256 differs (found by drill") {
		t.Errorf("list:\n%s", out.String())
	}
}
