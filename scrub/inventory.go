package scrub

import (
	"context"
	"fmt"
	"strings"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Kinds of scrubbed objects (Finding.Kind).
const (
	KindBackup      = "backup"       // a backup's data object
	KindManifest    = "manifest"     // a backup's manifest
	KindSegment     = "segment"      // a change segment
	KindMarker      = "marker"       // a progress marker
	KindDrillReport = "drill report" // a drill report
	KindKit         = "kit"          // a recovery kit's object
	KindKitManifest = "kit manifest" // a recovery kit's manifest
)

// object is one retained object to scrub.
type object struct {
	uploader.ObjectInfo
	kind string
	// sha256 is the digest a manifest records for the stored bytes (data
	// objects and kits; "" for the others).
	sha256 string
	// encrypted: age, its header is opened every run.
	encrypted bool
	// seg is the listed segment (KindSegment only).
	seg *repository.SegmentInfo
	// kitID is the kit's id (KindKitManifest only).
	kitID string
}

// inventory is what the listings hold.
type inventory struct {
	objects []*object
	// damaged are found by the listings alone (missing, wrong size, a
	// manifest that does not parse).
	damaged []Finding
	// untrusted counts what the trust code reports already.
	untrusted int
}

// take lists the cluster's retained objects: one listing of the whole
// cluster for what exists and its size, and the backup and kit listings
// for what their manifests promise.
func take(ctx context.Context, b *repository.Repo, kits kit.Repo) (*inventory, error) {
	stored := map[string]uploader.ObjectInfo{}
	err := b.Store.List(ctx, b.Cluster+"/", func(o uploader.ObjectInfo) error {
		stored[o.Key] = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the store: %w", err)
	}
	inv := &inventory{}
	if err := inv.backups(ctx, b, stored); err != nil {
		return nil, err
	}
	if err := inv.kits(ctx, kits, stored); err != nil {
		return nil, err
	}
	if err := inv.changes(ctx, b, stored); err != nil {
		return nil, err
	}
	for k, o := range stored {
		if strings.HasPrefix(k, b.Cluster+"/drills/") && strings.HasSuffix(k, ".json") {
			inv.objects = append(inv.objects, &object{ObjectInfo: o, kind: KindDrillReport})
		}
	}
	return inv, nil
}

// backups adds each trusted backup's manifest and data object.
func (inv *inventory) backups(ctx context.Context, b *repository.Repo, stored map[string]uploader.ObjectInfo) error {
	l, err := b.List(ctx)
	if err != nil {
		return fmt.Errorf("list backups: %w", err)
	}
	for _, o := range l.Unreadable {
		inv.damaged = append(inv.damaged, Finding{Key: o.Key, Kind: KindManifest, Problem: "the manifest does not parse (truncated or altered): its backup cannot be restored"})
	}
	for _, e := range l.Backups {
		m := e.Manifest
		if e.State == repository.StateUntrusted {
			inv.untrusted++
			continue
		}
		mk := b.ManifestKey(m.ID)
		if mo, ok := stored[mk]; ok {
			inv.objects = append(inv.objects, &object{ObjectInfo: mo, kind: KindManifest})
		}
		o, ok := stored[m.Object]
		switch {
		case !ok:
			inv.damaged = append(inv.damaged, Finding{Key: m.Object, Kind: KindBackup, Problem: fmt.Sprintf("missing: backup %s's manifest names it", m.ID)})
			continue
		case o.Size != m.ObjectSize:
			inv.damaged = append(inv.damaged, Finding{Key: m.Object, Kind: KindBackup, Problem: fmt.Sprintf("%d bytes, backup %s's manifest says %d", o.Size, m.ID, m.ObjectSize)})
			continue
		}
		inv.objects = append(inv.objects, &object{ObjectInfo: o, kind: KindBackup, sha256: m.ObjectSHA256, encrypted: m.Encryption == "age"})
	}
	return nil
}

// kits adds each trusted kit's manifest and object.
func (inv *inventory) kits(ctx context.Context, kits kit.Repo, stored map[string]uploader.ObjectInfo) error {
	l, err := kits.List(ctx)
	if err != nil {
		return err
	}
	inv.untrusted += len(l.Untrusted)
	for _, o := range l.Unreadable {
		inv.damaged = append(inv.damaged, Finding{Key: o.Key, Kind: KindKitManifest, Problem: "the kit manifest does not parse (truncated or altered): its kit cannot be restored"})
	}
	for _, m := range l.Kits {
		if mo, ok := l.ManifestInfo[m.ID]; ok {
			inv.objects = append(inv.objects, &object{ObjectInfo: mo, kind: KindKitManifest, kitID: m.ID})
		}
		o, ok := stored[m.Object]
		switch {
		case !ok:
			inv.damaged = append(inv.damaged, Finding{Key: m.Object, Kind: KindKit, Problem: fmt.Sprintf("missing: kit %s's manifest names it", m.ID)})
			continue
		case o.Size != m.ObjectSize:
			inv.damaged = append(inv.damaged, Finding{Key: m.Object, Kind: KindKit, Problem: fmt.Sprintf("%d bytes, kit %s's manifest says %d", o.Size, m.ID, m.ObjectSize)})
			continue
		}
		inv.objects = append(inv.objects, &object{ObjectInfo: o, kind: KindKit, sha256: m.ObjectSHA256, encrypted: true})
	}
	return nil
}

// changes adds every generation's segments and progress markers.
func (inv *inventory) changes(ctx context.Context, b *repository.Repo, stored map[string]uploader.ObjectInfo) error {
	gens := map[string]bool{}
	changes := b.Cluster + "/changes/"
	for k := range stored {
		if rest, ok := strings.CutPrefix(k, changes); ok {
			if g, _, ok := strings.Cut(rest, "/"); ok {
				gens[g] = true
			}
		}
	}
	for g := range gens {
		segs, _, err := b.ListSegments(ctx, g)
		if err != nil {
			return err
		}
		for i := range segs {
			si := segs[i]
			inv.objects = append(inv.objects, &object{ObjectInfo: si.Object, kind: KindSegment, seg: &si, encrypted: si.Encryption == "age"})
		}
	}
	markers, _, err := b.ListProgress(ctx)
	if err != nil {
		return err
	}
	for _, ms := range markers {
		for _, mi := range ms {
			inv.objects = append(inv.objects, &object{ObjectInfo: mi.Object, kind: KindMarker})
		}
	}
	return nil
}
