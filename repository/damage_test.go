package repository

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestDamageRecord: a recorded damage of a backup's data object is
// signed, listed as current, marks the backup broken with the record's
// words, is kept when recorded again, and turns obsolete once the object
// is replaced (another size) or gone; an unsigned record with signing
// configured is shown but marks nothing broken.
func TestDamageRecord(t *testing.T) {
	k := signingKey(t)
	b := writer(newDirBackups(t), k)
	m := putBackupWith(t, b, "20261130T113800Z-r42", func(*Manifest) {})
	ctx := t.Context()
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	d := Damage{Object: m.Object, FoundBy: FoundByDrill, FoundAt: at, Error: "sha256 mismatch"}
	if err := b.RecordDamage(ctx, d); err != nil {
		t.Fatalf("RecordDamage: %v", err)
	}
	d.FoundBy, d.Error = FoundByScrub, "again"
	if err := b.RecordDamage(ctx, d); err != nil {
		t.Fatalf("RecordDamage again: %v", err)
	}
	r := reader(b, false, k)
	l, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := l.DamageOf(m.Object)
	if got == nil || got.FoundBy != FoundByDrill || got.Error != "sha256 mismatch" || got.Untrusted != "" || got.Size != m.ObjectSize {
		t.Fatalf("DamageOf = %+v, want the first record, trusted, size %d", got, m.ObjectSize)
	}
	if e := l.Backups[0]; e.State != StateBroken || !strings.Contains(e.Problem, "sha256 mismatch") {
		t.Errorf("backup state %q problem %q, want broken naming the damage", e.State, e.Problem)
	}
	raw := readRaw(t, b.Store, b.DamageKey(m.Object))
	if !strings.Contains(string(raw), "signature") {
		t.Errorf("record not signed:\n%s", raw)
	}

	// Unsigned with trust configured: shown, marks nothing.
	unsigned := writer(b, nil)
	if err := unsigned.Store.Delete(ctx, b.DamageKey(m.Object)); err != nil {
		t.Fatal(err)
	}
	if err := unsigned.RecordDamage(ctx, d); err != nil {
		t.Fatal(err)
	}
	l, err = reader(b, false, k).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.DamageOf(m.Object); got == nil || got.Untrusted == "" {
		t.Errorf("unsigned record = %+v, want shown as untrusted", got)
	}
	if e := l.Backups[0]; e.State != StateOK {
		t.Errorf("an untrusted record made the backup %s: %s", e.State, e.Problem)
	}

	// The object replaced (another size): obsolete.
	replaceRaw(t, b.Store, m.Object, append(readRaw(t, b.Store, m.Object), 0))
	l, err = r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.DamageOf(m.Object) != nil || len(l.Damage.Obsolete) != 1 {
		t.Errorf("after replacing the object: current %v obsolete %v, want one obsolete record", l.Damage.Current, l.Damage.Obsolete)
	}
	// Recording again replaces the obsolete record.
	if err := b.RecordDamage(ctx, d); err != nil {
		t.Fatal(err)
	}
	if dr, err := r.ReadDamage(ctx); err != nil || len(dr.Current) != 1 || len(dr.Obsolete) != 0 {
		t.Errorf("ReadDamage = %+v, %v; want one current", dr, err)
	}
	// Gone: nothing recorded, the record obsolete.
	if err := b.Store.Delete(ctx, m.Object); err != nil {
		t.Fatal(err)
	}
	if err := b.RecordDamage(ctx, d); err != nil {
		t.Fatal(err)
	}
	if dr, err := r.ReadDamage(ctx); err != nil || len(dr.Current) != 0 || len(dr.Obsolete) != 1 {
		t.Errorf("ReadDamage after delete = %+v, %v; want one obsolete", dr, err)
	}
}

func TestRecordDamageRefusesOtherClusters(t *testing.T) {
	b := newDirBackups(t)
	err := b.RecordDamage(t.Context(), Damage{Object: "other/snapshots/x.db", FoundBy: FoundByDrill, Error: "x"})
	if err == nil {
		t.Fatal("recorded damage of another cluster's object")
	}
	if err := b.RecordDamage(t.Context(), Damage{Object: "c1/snapshots/none.db", FoundBy: FoundByDrill, Error: "x"}); err != nil {
		t.Errorf("damage of a missing object: %v, want nil (nothing to record)", err)
	}
	if _, err := b.Store.Stat(t.Context(), b.DamageKey("c1/snapshots/none.db")); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("a record of a missing object was written: %v", err)
	}
}

func FuzzParseDamage(f *testing.F) {
	f.Add([]byte(`{"format":1,"object":"c/x","found_by":"drill","found_at":"2026-12-04T10:00:00Z","error":"e"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDamage(b)
		if err == nil && d.Validate() != nil {
			t.Fatal("parsed an invalid record")
		}
	})
}
