package drill

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// PhaseReplay is the point-in-time drill's replay phase (between verify
// and restore).
const PhaseReplay = "replay"

// ErrTargetCompacted is wrapped when the live cluster has compacted past
// a point-in-time drill's target: its HashKV at the target is gone, so
// the restored copy cannot be compared with it. Such a target is refused
// before anything is fetched; it is no verdict.
var ErrTargetCompacted = errors.New("the live cluster has compacted the target revision")

// LiveHash is the live cluster's HashKV at one revision.
type LiveHash struct {
	Hash uint32
	// CompactRevision is the member's compact revision the hash was
	// computed over (-1 or 0 when it never compacted).
	CompactRevision int64
	// Member, Endpoint and ClusterID (hex, as manifests write it) name
	// the member that answered.
	Member, Endpoint, ClusterID string
}

// LiveCluster is the live cluster a point-in-time drill compares with.
// SessionLive implements it over a snapshot.Session.
type LiveCluster interface {
	// HashKV returns the HashKV of one live member at rev (0: its
	// current revision). A rev the member has compacted wraps
	// ErrTargetCompacted. Any error is an error of the drill run.
	HashKV(ctx context.Context, rev int64) (LiveHash, error)
}

// PointInTimeOptions make a drill a point-in-time drill: replay Plan's
// segments onto its snapshot, restore and boot the result, and compare
// its HashKV at Plan.Revision with Live's.
type PointInTimeOptions struct {
	Plan *restore.PointInTimePlan
	Live LiveCluster
}

// SessionLive is the live cluster behind sess: each HashKV asks the
// member a backup's live comparison would ask (snapshot.HashKVMember: a
// healthy follower before the leader, since etcd blocks writes on the
// member while it hashes).
func SessionLive(sess *snapshot.Session) LiveCluster { return sessionLive{sess} }

type sessionLive struct{ s *snapshot.Session }

func (l sessionLive) HashKV(ctx context.Context, rev int64) (LiveHash, error) {
	members, err := l.s.Members(ctx)
	if err != nil {
		return LiveHash{}, fmt.Errorf("live cluster: %w", err)
	}
	m, why := snapshot.HashKVMember(members, "")
	if m.Endpoint == "" || m.Err != nil {
		return LiveHash{}, fmt.Errorf("live cluster: no member can answer HashKV (%s): check the etcd endpoints", why)
	}
	h, compact, err := l.s.HashKV(ctx, m.Endpoint, rev)
	lh := LiveHash{Hash: h, CompactRevision: compact, Member: m.Name, Endpoint: m.Endpoint, ClusterID: fmt.Sprintf("%x", m.ClusterID)}
	if errors.Is(err, snapshot.ErrCompacted) {
		// Its compact revision, for the message: the hash now.
		if _, c, cerr := l.s.HashKV(ctx, m.Endpoint, 0); cerr == nil {
			return lh, fmt.Errorf("%w: revision %d is below the live compact revision %d of member %s", ErrTargetCompacted, rev, c, m.Endpoint)
		}
		return lh, fmt.Errorf("%w: %w", ErrTargetCompacted, err)
	}
	if err != nil {
		return lh, fmt.Errorf("live cluster: %w", err)
	}
	return lh, nil
}

// BackupLive is a committed backup standing in for the live cluster: a
// point-in-time drill to its revision compares the restored copy's
// HashKV with the one the backup recorded (its manifest's, computed from
// its snapshot, matched with the live member's when it was taken). The
// fleet hub reaches no cluster: it drills a replay from an older backup
// to a newer one's revision this way. Its HashKV at any other revision
// is an error of the run.
func BackupLive(m *repository.Manifest) LiveCluster { return backupLive{m} }

type backupLive struct{ m *repository.Manifest }

func (b backupLive) HashKV(_ context.Context, rev int64) (LiveHash, error) {
	m := b.m
	if rev != m.Revision || m.HashKV == 0 {
		return LiveHash{}, fmt.Errorf("backup %s records HashKV at revision %d only (%08x), not at %d", m.ID, m.Revision, m.HashKV, rev)
	}
	return LiveHash{Hash: m.HashKV, CompactRevision: m.CompactRevision, Member: "backup " + m.ID, Endpoint: "backup " + m.ID, ClusterID: m.EtcdClusterID}, nil
}

// PickTarget picks the target of the agent's point-in-time drill:
// uniformly among the revisions from the live cluster's compact revision
// to the newest captured-through revision that a recoverable window of
// the live cluster's history holds. That history is the windows after the
// last one sealed because the cluster changed under the capture (its
// revisions went backwards: it was restored; or its cluster ID changed),
// of the live cluster (clusterID, hex; "" to skip the check). ok is false
// when no window holds a revision at or above compact: then the agent
// drills a snapshot as without capture. intn returns a uniform number in
// [0, n).
func PickTarget(windows []repository.Window, compact int64, clusterID string, intn func(n int64) int64) (rev int64, ok bool) {
	start := 0
	for i, w := range windows {
		if w.Sealed && (w.SealReason == "revision_backwards" || w.SealReason == "cluster_id") {
			start = i + 1
		}
	}
	type span struct{ from, to int64 }
	var spans []span
	for _, w := range windows[start:] {
		if !w.Recoverable() || !sameCluster(w.Anchor.EtcdClusterID, clusterID) {
			continue
		}
		from := max(w.From, compact, 1)
		if from > w.Through {
			continue
		}
		spans = append(spans, span{from, w.Through})
	}
	if len(spans) == 0 {
		return 0, false
	}
	// Merge overlaps, so that each revision counts once.
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	merged := spans[:1]
	for _, s := range spans[1:] {
		last := &merged[len(merged)-1]
		if s.from <= last.to+1 {
			last.to = max(last.to, s.to)
			continue
		}
		merged = append(merged, s)
	}
	var n int64
	for _, s := range merged {
		n += s.to - s.from + 1
	}
	k := intn(n)
	for _, s := range merged {
		if size := s.to - s.from + 1; k < size {
			return s.from + k, true
		} else {
			k -= size
		}
	}
	return 0, false // intn out of range
}

func sameCluster(a, b string) bool {
	if a == "" || b == "" {
		return true
	}
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	return err1 != nil || err2 != nil || x == y
}

// pointInTimeReport starts the report's point-in-time section from the plan.
func pointInTimeReport(p *restore.PointInTimePlan) *repository.PointInTimeDrill {
	r := &repository.PointInTimeDrill{
		TargetRevision: p.Revision, Generation: p.Window.Generation, SnapshotRevision: p.Snapshot.Revision,
		Segments: len(p.Segments),
	}
	if !p.Target.Time.IsZero() {
		t := p.Target.Time.UTC()
		r.TargetTime = &t
	}
	if n := len(p.Segments); n > 0 {
		r.FirstSegment, r.LastSegment = p.Segments[0].Object.Key, p.Segments[n-1].Object.Key
	}
	return r
}

// liveHash asks the live cluster for its HashKV at the target, before
// anything is fetched: a target it compacted is refused at once.
func (d *drill) liveHash(ctx context.Context) error {
	pt := d.o.PointInTime
	lh, err := pt.Live.HashKV(ctx, pt.Plan.Revision)
	if err != nil {
		if errors.Is(err, ErrTargetCompacted) {
			return fmt.Errorf("drill to revision %d: %w: a point-in-time drill compares with the live cluster's HashKV at its target, pick a revision at or above the live compact revision", pt.Plan.Revision, err)
		}
		return fmt.Errorf("drill to revision %d: hashkv of the live cluster: %w", pt.Plan.Revision, err)
	}
	r := d.rep.PointInTime
	r.LiveHashKV, r.LiveCompactRevision, r.LiveMember, r.LiveEndpoint = lh.Hash, lh.CompactRevision, lh.Member, lh.Endpoint
	return nil
}

// replay checks the fetched snapshot against its manifest (the file is
// changed next, so the structural check runs before, not beside the
// restore) and replays the plan's segments onto it, in a child process
// (restore.ReplayInChild). A snapshot or a chain that fails, and a replay process
// that crashes, are verdicts; a store error is not, nor a replay process
// killed from outside (ErrKilled: an OOM killer, an operator).
func (d *drill) replay(ctx context.Context, spool string) error {
	m, p := d.m, d.o.PointInTime.Plan
	t := d.now()
	st, vErr := verify.File(ctx, spool)
	d.phase(PhaseVerify, d.now().Sub(t))
	if err := d.structureChecks(st, vErr); err != nil {
		return err
	}
	if vErr != nil {
		return d.failed()
	}
	d.check("snapshot revision", strconv.FormatInt(m.Revision, 10), strconv.FormatInt(st.Revision, 10), st.Revision == m.Revision)
	d.check("snapshot keys", strconv.Itoa(m.TotalKeys), strconv.Itoa(st.TotalKeys), st.TotalKeys == m.TotalKeys)
	if st.HashKVComparable && m.HashKV != 0 {
		d.check("snapshot hashkv", hex32(m.HashKV), hex32(st.HashKV), st.HashKV == m.HashKV)
	}
	if err := d.failed(); err != nil {
		return err
	}

	// The changes are applied in a child process (this process reads
	// and checks them): etcd's mvcc code runs without this process's
	// soft memory limit, and a panic there ends only the child.
	t = d.now()
	rs, err := restore.ReplayInChild(ctx, spool, p, d.o.Backups, d.o.Identities, d.lg)
	d.phase(PhaseReplay, d.now().Sub(t))
	r := d.rep.PointInTime
	r.Revisions, r.Ops, r.Leases = rs.Revisions, rs.Ops, rs.Leases
	r.ReplaySeconds = round3(d.now().Sub(t).Seconds())
	if r.ReplaySeconds > 0 {
		r.RevisionsPerSecond = float64(int64(float64(rs.Revisions) / r.ReplaySeconds))
	}
	want := fmt.Sprintf("revisions %d-%d replay as recorded", p.Snapshot.Revision+1, p.Revision)
	var (
		ce    *repository.ChainError
		crash *child.Crash
	)
	switch {
	case err == nil:
		d.check("replay", want, fmt.Sprintf("%d revisions, %d operations from %d segments", rs.Revisions, rs.Ops, rs.Segments), true)
	case ctx.Err() != nil, errors.Is(err, child.ErrKilled):
		return err
	case errors.Is(err, restore.ErrReplay), errors.As(err, &ce), errors.Is(err, repository.ErrBadSegment), repository.IsDamage(err), errors.As(err, &crash):
		// The changes do not fit the snapshot, the chain is broken, a
		// segment is damaged, or etcd's storage code crashed the replay
		// process on them: a verdict on what the store holds, as a
		// crash of the throwaway etcd on the restored data is. Damage
		// of a segment is recorded: the window ends before it from now
		// on, whatever later drills of earlier targets find.
		if de := repository.SegmentDamage(err, p.Segments); de != nil {
			d.noteDamage(ctx, de)
		}
		d.check("replay", want, err.Error(), false)
		return d.failed()
	default:
		return err
	}
	return nil
}

// pointInTimeChecks compares the restored member with the live cluster at
// the target: its revision, then, after compacting it to the live compact
// revision, its HashKV at the target.
func (d *drill) pointInTimeChecks(ctx context.Context, cli *clientv3.Client, srv *child.Etcd) error {
	r := d.rep.PointInTime
	rev := r.TargetRevision
	all, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("count keys on restored etcd: %w", err)
	}
	d.check("revision", strconv.FormatInt(rev, 10), strconv.FormatInt(all.Header.Revision, 10), all.Header.Revision == rev)

	live := r.LiveCompactRevision
	h, err := cli.HashKV(ctx, srv.ClientURL, rev)
	if err == nil && h.CompactRevision < live {
		// The copy has the snapshot's compaction; the live cluster has
		// compacted since: compact the copy to the same revision, so that
		// both hash the same history.
		if _, err = cli.Compact(ctx, live, clientv3.WithCompactPhysical()); err == nil {
			h, err = cli.HashKV(ctx, srv.ClientURL, rev)
		}
	}
	want := fmt.Sprintf("%s at compact revision %d (live member %s)", hex32(r.LiveHashKV), live, orNone(r.LiveEndpoint))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.requestFailed = true
		d.check("hashkv", want, "error: "+err.Error(), false)
		return nil
	}
	r.RestoredHashKV, r.RestoredCompactRevision = h.Hash, h.CompactRevision
	got := fmt.Sprintf("%s at compact revision %d", hex32(h.Hash), h.CompactRevision)
	if h.CompactRevision > live {
		// The snapshot was compacted past what the live member keeps
		// now (compaction never goes back on one cluster): not the same
		// history, so no verdict either way.
		return fmt.Errorf("hashkv at revision %d: the restored copy is compacted at %d, the live member %s at %d: not comparable", rev, h.CompactRevision, orNone(r.LiveEndpoint), live)
	}
	d.check("hashkv", want, got, h.Hash == r.LiveHashKV && h.CompactRevision == live)
	return nil
}

// pointInTimeSpace is the extra scratch space a replay may need: the
// decoded changes land in the database file.
func pointInTimeSpace(p *restore.PointInTimePlan) uint64 {
	var n int64
	for _, s := range p.Segments {
		n += s.Object.Size
	}
	return uint64(4 * n)
}
