package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// HashKVErrorPrefix starts a manifest's hash_kv_status when the live member
// could not be asked (anything but a compaction past the revision): the
// backup is kept, the error is logged and counted
// (lifeboat_snapshot_hashkv_errors_total), and it is never reported as
// "not comparable".
const HashKVErrorPrefix = "error: "

// hashKVFailed reports whether m's live HashKV comparison ended in an error.
func hashKVFailed(m *repository.Manifest) bool {
	return strings.HasPrefix(m.HashKVStatus, HashKVErrorPrefix)
}

// hashKVDeferred returns why the live HashKV comparison is left to the drill
// under mode, or "" when a live member is to be asked. hm and same are
// snapshot.HashKVMember's choice.
func hashKVDeferred(mode string, hm snapshot.MemberStatus, same string) string {
	switch {
	case mode == snapshot.LiveHashKVDefer:
		return "deferred to the drill (snapshot.live_hashkv=defer)"
	case mode == snapshot.LiveHashKVAuto && same != "" && hm.ClusterSize == 1:
		return "deferred to the drill: single-member cluster (snapshot.live_hashkv=auto)"
	}
	return ""
}

// liveHashKV is the live member's answer, as the manifest records it.
type liveHashKV struct {
	member   snapshot.MemberStatus
	same     string // why the snapshot's own member was asked; "" for another
	deferred string // why no member was asked; "" when one was
	hash     uint32
	compact  int64
	err      error
	status   string // set by compare
}

// compare compares the file's HashKV with the live answer. It returns an
// error wrapping verify.ErrHashKVMismatch, naming the member, when the
// hashes differ: the backup must not be kept.
func (lh *liveHashKV) compare(st verify.Status, lg *slog.Logger) error {
	switch {
	case !st.HashKVComparable:
		// The file's hash is not etcd's (rules this build does not know):
		// no member, now or in a drill, can be compared with it.
		lh.status = "not comparable: " + st.HashKVReason
	case lh.deferred != "":
		lh.status = lh.deferred
	case errors.Is(lh.err, snapshot.ErrCompacted):
		// The member compacted past the snapshot's revision since it was
		// taken: the hashes are incomparable, not wrong.
		lh.status = "not comparable: " + lh.err.Error()
	case lh.err != nil:
		lh.status = HashKVErrorPrefix + "live HashKV: " + lh.err.Error()
		lg.Warn("live HashKV failed: backup kept without the live comparison",
			"endpoint", lh.member.Endpoint, "member", lh.member.Name, "revision", st.Revision, "err", lh.err)
	default:
		// The rules are those of the member that answered, whose
		// version may differ from the snapshot's member's in an upgrade.
		status, err := verify.CompareMemberHashKV(st, lh.member.Version, lh.hash, lh.compact)
		if err != nil {
			return fmt.Errorf("hashkv from member %s (%s): %w", lh.member.Name, lh.member.Endpoint, err)
		}
		lh.status = status
	}
	return nil
}

// record fills the manifest's hash_kv fields (after compare).
func (lh *liveHashKV) record(m *repository.Manifest) {
	m.HashKVStatus = lh.status
	if lh.deferred != "" {
		return
	}
	if lh.err == nil {
		m.HashKVLive = lh.hash
	}
	m.HashKVEndpoint = lh.member.Endpoint
	m.HashKVMember = lh.member.Name
	if lh.member.ID != 0 {
		m.HashKVMemberID = fmt.Sprintf("%x", lh.member.ID)
	}
	m.HashKVSameMember = lh.same
}
