package restore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// The members of one restored cluster differ only in their raft log:
// etcdutl writes the same database for each (the snapshot with the
// cluster's member list and the consistent index of that log's last
// entry), and a WAL and raft snapshot whose metadata names the member
// itself. Restore therefore runs etcdutl for the first member only and
// clones the others from it: the database copied in the kernel
// (copy_file_range) and synced, and each member's own WAL and raft
// snapshot written here the way etcdutl writes them
// (TestClonedMemberMatchesEtcdutl compares them byte for byte).

// cloneChunk is how much of the database one copy call moves between
// two checks of the context.
const cloneChunk = 256 << 20

// cloneMember writes member m as a copy of the restored member first:
// its database copied from first's and synced, then its own raft log.
func cloneMember(ctx context.Context, p *plan, first, m RestoredMember) error {
	src := filepath.Join(first.DataDir, "member", "snap", "db")
	snapDir := filepath.Join(m.DataDir, "member", "snap")
	if err := cloneDB(ctx, src, snapDir); err != nil {
		return fmt.Errorf("member %s: copy the database of member %s: %w", m.Name, first.Name, err)
	}
	walDir := m.WALDir
	if walDir == "" {
		walDir = filepath.Join(m.DataDir, "member", "wal")
	}
	if err := writeMemberLog(p, m.Name, snapDir, walDir); err != nil {
		return fmt.Errorf("member %s: write its raft log: %w", m.Name, err)
	}
	return nil
}

// cloneDB copies the database src into snapDir/db (created 0600, its
// directories 0700), checking ctx between chunks, and syncs the file and
// its directory.
func cloneDB(ctx context.Context, src, snapDir string) error {
	if err := fileutil.CreateDirAll(zap.NewNop(), snapDir); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(snapDir, "db"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// *os.File to *os.File: io.CopyN ends in copy_file_range.
		n, err := io.CopyN(out, in, cloneChunk)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if n < cloneChunk {
			break
		}
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return writeback.SyncDir(snapDir)
}

// writeMemberLog writes member name's WAL (in walDir) and raft snapshot
// (in snapDir) as a fresh member of the plan's cluster: the member list
// as configuration changes at term 1, committed, with the member's own
// ID in the WAL's metadata; what etcdutl's restore writes beside the
// database.
func writeMemberLog(p *plan, name, snapDir, walDir string) error {
	lg := zap.NewNop()
	urls, err := types.NewURLsMap(p.cluster)
	if err != nil {
		return err
	}
	cl, err := membership.NewClusterFromURLsMap(lg, p.token, urls)
	if err != nil {
		return err
	}
	self := cl.MemberByName(name)
	if self == nil {
		return fmt.Errorf("%s is not in the cluster %q", name, p.cluster)
	}
	md, err := proto.Marshal(&etcdserverpb.Metadata{NodeID: new(uint64(self.ID)), ClusterID: new(uint64(cl.ID()))})
	if err != nil {
		return err
	}
	ents, voters, err := memberEntries(cl)
	if err != nil {
		return err
	}
	commit, term := uint64(len(ents)), uint64(1)
	w, err := wal.Create(lg, walDir, md)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Save(&raftpb.HardState{Term: new(term), Vote: new(voters[0]), Commit: new(commit)}, ents); err != nil {
		return err
	}
	conf := &raftpb.ConfState{Voters: voters}
	rs := raftpb.Snapshot{
		Data:     etcdserver.GetMembershipInfoInV2Format(lg, cl),
		Metadata: &raftpb.SnapshotMetadata{Index: new(commit), Term: new(term), ConfState: conf},
	}
	if err := snap.New(lg, snapDir).SaveSnap(&rs); err != nil {
		return err
	}
	if err := w.SaveSnapshot(&walpb.Snapshot{Index: new(commit), Term: new(term), ConfState: conf}); err != nil {
		return err
	}
	return w.Close()
}

// memberEntries are the cluster's members as committed configuration
// changes (one per member, by ascending ID, at term 1) and their IDs.
func memberEntries(cl *membership.RaftCluster) ([]*raftpb.Entry, []uint64, error) {
	var ents []*raftpb.Entry
	var ids []uint64
	for i, id := range cl.MemberIDs() {
		ctx, err := json.Marshal(cl.Member(id))
		if err != nil {
			return nil, nil, err
		}
		cc, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(id)), Context: ctx})
		if err != nil {
			return nil, nil, err
		}
		ents = append(ents, &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Term: new(uint64(1)), Index: new(uint64(i + 1)), Data: cc})
		ids = append(ids, uint64(id))
	}
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("no members")
	}
	return ents, ids, nil
}
