package repository

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lifeboat-dev/lifeboat/uploader"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
)

// A store's cluster name belongs to one lineage: the etcd cluster that
// first wrote it, plus every cluster restored from one of its backups
// (Manifest.Lineage names the founder's etcd cluster ID). Backups of two
// lineages are never mixed: latest, random, latest-proven and a backup
// before a time are chosen from one lineage (Repo.Lineage, or the
// current one). A lineage started on purpose over another
// (--adopt-cluster) records it in Supersedes and becomes current; two
// lineages where neither supersedes the other (a store written before
// lineages were checked, by two clusters) leave the choice to the
// operator: ErrLineageAmbiguous.

// ErrLineageAmbiguous is wrapped when the store holds backups of more
// than one lineage and none was chosen (Repo.Lineage).
var ErrLineageAmbiguous = errors.New("the store holds backups of more than one etcd cluster lineage")

// Lineage is one lineage's backups in a listing.
type Lineage struct {
	// ID is the founding etcd cluster's ID (hex).
	ID string
	// ClusterIDs are the etcd cluster IDs whose backups it holds (the
	// founder's and those restored from it), oldest first.
	ClusterIDs []string
	// Backups are its trusted backups, newest first (any state but
	// untrusted).
	Backups []*Manifest
	// Supersedes are the lineages it took the name over from on purpose.
	Supersedes []string
}

// Newest is the lineage's newest backup.
func (l *Lineage) Newest() *Manifest { return l.Backups[0] }

// Lineages groups the listing's trusted backups by lineage, the lineage
// of the newest backup first.
func (l *Listing) Lineages() []*Lineage {
	var out []*Lineage
	by := map[string]*Lineage{}
	for _, e := range l.Backups { // newest first
		if e.State == StateUntrusted {
			continue
		}
		m := e.Manifest
		id := m.LineageID()
		g := by[id]
		if g == nil {
			g = &Lineage{ID: id}
			by[id] = g
			out = append(out, g)
		}
		g.Backups = append(g.Backups, m)
		if m.EtcdClusterID != "" && !slices.Contains(g.ClusterIDs, m.EtcdClusterID) {
			g.ClusterIDs = append([]string{m.EtcdClusterID}, g.ClusterIDs...)
		}
		for _, s := range m.Supersedes {
			if !slices.Contains(g.Supersedes, s) {
				g.Supersedes = append(g.Supersedes, s)
			}
		}
	}
	return out
}

// CurrentLineage returns the lineage a restore of latest chooses from:
// the only one, or the newest one when it supersedes every other
// (directly or through the ones it supersedes). nil when the listing
// holds no trusted backup; an error wrapping ErrLineageAmbiguous when
// two lineages compete.
func (l *Listing) CurrentLineage() (*Lineage, error) {
	ls := l.Lineages()
	if len(ls) == 0 {
		return nil, nil
	}
	cur := ls[0]
	covered := map[string]bool{cur.ID: true}
	byID := map[string]*Lineage{}
	for _, g := range ls {
		byID[g.ID] = g
	}
	queue := slices.Clone(cur.Supersedes)
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if covered[id] {
			continue
		}
		covered[id] = true
		if g := byID[id]; g != nil {
			queue = append(queue, g.Supersedes...)
		}
	}
	var rivals []*Lineage
	for _, g := range ls[1:] {
		if !covered[g.ID] {
			rivals = append(rivals, g)
		}
	}
	if len(rivals) == 0 {
		return cur, nil
	}
	return nil, &AmbiguousError{Lineages: append([]*Lineage{cur}, rivals...)}
}

// AmbiguousError lists the competing lineages, newest first.
type AmbiguousError struct{ Lineages []*Lineage }

func (e *AmbiguousError) Error() string {
	var b strings.Builder
	b.WriteString(ErrLineageAmbiguous.Error())
	b.WriteString(" and none supersedes the others; lifeboat will not choose between them:")
	for _, g := range e.Lineages {
		fmt.Fprintf(&b, "\n  lineage %s (etcd cluster %s): newest", g.ID, strings.Join(g.ClusterIDs, ", "))
		for i, m := range g.Backups {
			if i == 2 {
				break
			}
			fmt.Fprintf(&b, " %s", m.ID)
		}
	}
	b.WriteString("\nname one with --lineage ID, or a backup id instead of latest")
	return b.String()
}

func (e *AmbiguousError) Unwrap() error { return ErrLineageAmbiguous }

// Candidates returns the intact, trusted backups of the chosen lineage
// (Repo.Lineage, else the current one), newest first: what latest,
// random, latest-proven and a time choose from. Untrusted backups newer
// than the newest candidate are logged as skipped (Repo.Log), with why.
func (b *Repo) Candidates(ctx context.Context) ([]*Manifest, error) {
	l, err := b.List(ctx)
	if err != nil {
		return nil, err
	}
	return b.candidates(l)
}

// ChosenLineage is the lineage restores choose from in listing l:
// Repo.Lineage, else the current one ("" when l holds no trusted
// backup); an error wrapping ErrLineageAmbiguous when two compete.
func (b *Repo) ChosenLineage(l *Listing) (string, error) {
	if b.Lineage != "" {
		return b.Lineage, nil
	}
	cur, err := l.CurrentLineage()
	if err != nil {
		return "", fmt.Errorf("cluster %q in %s: %w", b.Cluster, b.Store, err)
	}
	if cur == nil {
		return "", nil
	}
	return cur.ID, nil
}

// OfLineage keeps the windows anchored on backups of lineage (and those
// without an anchor, which are not recoverable anyway): a point-in-time
// restore never crosses into another cluster's changes.
func OfLineage(ws []Window, lineage string) []Window {
	var out []Window
	for _, w := range ws {
		if w.Anchor == nil || w.Anchor.LineageID() == lineage {
			out = append(out, w)
		}
	}
	return out
}

func (b *Repo) candidates(l *Listing) ([]*Manifest, error) {
	lineage, err := b.ChosenLineage(l)
	if err != nil {
		return nil, err
	}
	var out []*Manifest
	for _, e := range l.Backups {
		switch {
		case e.State == StateUntrusted:
			if len(out) == 0 && b.Log != nil {
				b.Log.Warn("skipping an untrusted backup: it is not signed by a trusted key; someone without this cluster's signing key wrote to the store (docs/security.md)",
					"backup_id", e.Manifest.ID, "why", e.Problem)
			}
		case e.State != StateOK && e.Damage == nil || e.Manifest.LineageID() != lineage:
			// A backup proven damaged stays a candidate: latest names it
			// and fails loudly, never quietly an older one.
		default:
			out = append(out, e.Manifest)
		}
	}
	if b.Lineage != "" && len(out) == 0 {
		var ids []string
		for _, g := range l.Lineages() {
			ids = append(ids, g.ID)
		}
		return nil, fmt.Errorf("%w of lineage %s for cluster %q in %s (lineages there: %s)", ErrNoBackups, b.Lineage, b.Cluster, b.Store, orNone(ids))
	}
	if len(out) > 0 {
		b.warnUnsigned(out[0])
	}
	return out, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// warnUnsigned logs that m was taken without a signature (allowed).
func (b *Repo) warnUnsigned(m *Manifest) {
	if m.Unsigned() && b.Log != nil {
		b.Log.Warn("using an unsigned backup (signing.allow_unsigned): its origin is not proven", "backup_id", m.ID)
	}
}

// Member is a live etcd member as the lineage check sees it: its ID and
// peer URLs.
type Member struct {
	ID       uint64
	PeerURLs []string
}

// Claim is the lineage a backup of a live cluster joins: written into
// its manifest.
type Claim struct {
	Lineage      string
	RestoredFrom string
	Supersedes   []string
}

// ErrOtherLineage is wrapped when a cluster's backup would go under a
// name held by another etcd cluster's lineage.
var ErrOtherLineage = errors.New("another etcd cluster's backups are stored under this name")

// LineageError is a refused write: cluster ClusterID is not of lineage
// Lineage, which holds the name.
type LineageError struct {
	Store, Cluster string
	ClusterID      string
	Lineages       []*Lineage
	// Copy is set when the write refused is a copy's: ClusterID is then
	// the primary's lineage, and the way out is another copy store.
	Copy bool
}

func (e *LineageError) Error() string {
	var held []string
	for _, g := range e.Lineages {
		held = append(held, fmt.Sprintf("lineage %s of etcd cluster %s", g.ID, strings.Join(g.ClusterIDs, ", ")))
	}
	if e.Copy {
		return fmt.Sprintf("%v: copy store %s holds %s under cluster name %q, which the primary (lineage %s) does not have; "+
			"refusing to copy into it. Check the copy's url and prefix: each cluster needs its own copy store or cluster name",
			ErrOtherLineage, e.Store, strings.Join(held, " and "), e.Cluster, e.ClusterID)
	}
	return fmt.Sprintf("%v: etcd cluster %s is not of %s, which holds cluster name %q in %s, and was not restored from one of its backups; "+
		"refusing to mix them. If this is another cluster, give it its own --cluster name; if you rebuilt this cluster without `lifeboat restore` "+
		"and its backups are to continue under this name, run once with --adopt-cluster %s (docs/security.md#lineage)",
		ErrOtherLineage, e.ClusterID, strings.Join(held, " and "), e.Cluster, e.Store, e.ClusterID)
}

func (e *LineageError) Unwrap() error { return ErrOtherLineage }

// RestoreToken is the cluster token lifeboat restores backup id with
// (restore's default, and what docs/restore.md gives etcdutl): the
// restored members' IDs derive from it, so the restored cluster is
// recognised as the lineage's.
func RestoreToken(id string) string { return "lifeboat-" + id }

// ClaimLineage decides which lineage a backup of etcd cluster clusterID
// (hex), whose members answered as members, joins in b's listing l: the
// store's current lineage when the cluster is one of its clusters or was
// restored from one of its backups (a member's ID is the one etcd gives
// an initial member of its peer URLs and RestoreToken(backup)); a new
// lineage when the name is free, or when adopt is clusterID (superseding
// every lineage there). Anything else is a *LineageError.
func (b *Repo) ClaimLineage(l *Listing, clusterID string, members []Member, adopt string) (Claim, error) {
	ls := l.Lineages()
	if adopt != "" && adopt == clusterID {
		c := Claim{Lineage: clusterID}
		for _, g := range ls {
			if g.ID != clusterID {
				c.Supersedes = append(c.Supersedes, g.ID)
			}
		}
		return c, nil
	}
	if len(ls) == 0 {
		return Claim{Lineage: clusterID}, nil
	}
	cur, err := l.CurrentLineage()
	candidates := []*Lineage{cur}
	if err != nil {
		// Two lineages already (an old store): a cluster of either may
		// go on writing to its own; nothing else may join.
		candidates = ls
	}
	for _, g := range candidates {
		if slices.Contains(g.ClusterIDs, clusterID) {
			return Claim{Lineage: g.ID, Supersedes: g.Supersedes}, nil
		}
	}
	for _, g := range candidates {
		if from := restoredFrom(g, members); from != "" {
			return Claim{Lineage: g.ID, RestoredFrom: from, Supersedes: g.Supersedes}, nil
		}
	}
	return Claim{}, &LineageError{Store: b.Store.String(), Cluster: b.Cluster, ClusterID: clusterID, Lineages: candidates}
}

// restoredFrom returns the backup of g that a member was restored from
// with RestoreToken, or "".
func restoredFrom(g *Lineage, members []Member) string {
	for _, mb := range members {
		if len(mb.PeerURLs) == 0 {
			continue
		}
		urls, err := types.NewURLs(mb.PeerURLs)
		if err != nil {
			continue
		}
		for _, m := range g.Backups {
			if uint64(membership.NewMember("", urls, RestoreToken(m.ID), nil).ID) == mb.ID {
				return m.ID
			}
		}
	}
	return ""
}

// Untrusted counts the listing's untrusted backups.
func (l *Listing) Untrusted() int {
	n := 0
	for _, e := range l.Backups {
		if e.State == StateUntrusted {
			n++
		}
	}
	return n
}

// clusterScanLimit bounds the objects Clusters reads: it serves an
// error message, never a decision.
const clusterScanLimit = 100_000

// Clusters returns the cluster names that have backups in st (the first
// path segment of every key with a snapshots/ segment after it), sorted;
// it stops after clusterScanLimit objects (complete is then false).
func Clusters(ctx context.Context, st uploader.Store) (names []string, complete bool, err error) {
	seen := map[string]bool{}
	n := 0
	errStop := errors.New("stop")
	err = st.List(ctx, "", func(o uploader.ObjectInfo) error {
		if n++; n > clusterScanLimit {
			return errStop
		}
		if c, rest, ok := strings.Cut(o.Key, "/"); ok && strings.HasPrefix(rest, "snapshots/") && !seen[c] {
			seen[c] = true
			names = append(names, c)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, false, err
	}
	slices.Sort(names)
	return names, !errors.Is(err, errStop), nil
}

// OtherClusters says, for a message about no backups of b's cluster,
// which clusters the store does hold: "; clusters in this store: a, b"
// ("; the store holds no cluster's backups", or "" when it cannot be
// listed).
func (b *Repo) OtherClusters(ctx context.Context) string {
	names, complete, err := Clusters(ctx, b.Store)
	switch {
	case err != nil:
		return ""
	case len(names) == 0 && complete:
		return "; the store holds no cluster's backups (check --store and its prefix)"
	case len(names) == 0:
		return ""
	}
	more := ""
	if !complete {
		more = ", …"
	}
	return "; clusters in this store: " + strings.Join(names, ", ") + more + " (check --cluster)"
}

// noBackups is the error of a choice with no backup to choose from.
func (b *Repo) noBackups(ctx context.Context, what string) error {
	return fmt.Errorf("%w of cluster %q in %s%s%s", ErrNoBackups, b.Cluster, b.Store, what, b.OtherClusters(ctx))
}
