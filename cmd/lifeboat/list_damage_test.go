package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
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

// TestCopyAndListDamagedSegment: one flipped byte in a stored change
// segment of the primary. lifeboat copy copies the rest, names the
// segment, records it and exits 1 saying running again does not help
// (never "the next run continues"); lifeboat list then shows the window
// DAMAGED, with the segment and the revisions before and after the hole.
func TestCopyAndListDamagedSegment(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	ctx := t.Context()
	e := newDrillEnv(t)
	e.snapshot(t)
	repo := e.backups(t)
	l, err := repo.List(ctx)
	if err != nil || len(l.Backups) != 1 {
		t.Fatalf("backups: %v %v", l, err)
	}
	anchor := l.Backups[0].Manifest
	cli := e.c.Client(t)
	c := changetest.Start(t, changetest.Options{Client: cli, Repo: repo, Anchor: anchor, SegmentRevisions: 3})
	for i := range 12 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/copy/k%d", i%5), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.Sync(t)
	c.Stop()
	segs, _, err := repo.ListSegments(ctx, anchor.ID)
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	bad := segs[1]
	p := filepath.Join(e.store, filepath.FromSlash(bad.Object.Key))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	code, out, errOut := runCLI(t, nil, append(append([]string{"copy"}, e.args...), "--copy", "file://"+copyDir)...)
	if code != 1 || !strings.Contains(errOut, bad.Object.Key) || !strings.Contains(errOut, "does not help") || strings.Contains(errOut+out, "continues where") {
		t.Errorf("copy: exit %d, want 1 naming %s and saying running again does not help\n%s\n%s", code, bad.Object.Key, out, errOut)
	}
	if !strings.Contains(out, "copied 1 backups, 0 kits, 1 segments") {
		t.Errorf("copy did not copy what is sound:\n%s", out)
	}
	code, out, errOut = runCLI(t, nil, append([]string{"list"}, e.args...)...)
	want := fmt.Sprintf("recoverable through revision %d", bad.First-1)
	if code != 0 || !strings.Contains(out, "DAMAGED") || !strings.Contains(out, bad.Object.Key) || !strings.Contains(out, want) || !strings.Contains(out, "found by copy") {
		t.Errorf("list: exit %d, want the window DAMAGED naming %s and %q\n%s\n%s", code, bad.Object.Key, want, out, errOut)
	}
}

// TestVerifyRecordsDamage: lifeboat verify of a backup whose data object
// no longer matches its manifest's sha256 fails and records the damage
// (found by verify), so list shows the backup broken from then on.
func TestVerifyRecordsDamage(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := newPruneFixture(t)
	m := f.backup(t, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), 30)
	p := filepath.Join(f.dir, filepath.FromSlash(m.Object))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(t)
	cfg.Snapshot.SpoolDir = t.TempDir()
	lg := slog.New(slog.DiscardHandler)
	var out bytes.Buffer
	if err := runVerify(t.Context(), cfg, lg, m.ID, &out); err == nil {
		t.Fatalf("verify of a damaged object passed:\n%s", out.String())
	}
	out.Reset()
	if err := runList(t.Context(), cfg, lg, listOptions{output: "table"}, &out, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "broken: "+m.Object+" is damaged") || !strings.Contains(out.String(), "found by verify") {
		t.Errorf("list after verify:\n%s", out.String())
	}
}
