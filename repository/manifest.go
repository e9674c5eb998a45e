package repository

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ManifestFormat is the manifest format version this build writes and reads.
const ManifestFormat = 1

// Manifest describes one backup. It is written last, after the data object
// is complete and verified: a backup exists exactly when its manifest does.
// It is plaintext JSON and never holds secrets.
type Manifest struct {
	Format  int    `json:"format"`
	ID      string `json:"id"`
	Cluster string `json:"cluster"`

	// Source: where and when the snapshot was taken.
	EtcdClusterID  string    `json:"etcd_cluster_id"`
	EtcdMemberID   string    `json:"etcd_member_id"`
	EtcdMemberName string    `json:"etcd_member_name,omitempty"`
	Endpoint       string    `json:"endpoint"`
	EtcdVersion    string    `json:"etcd_version"`
	StorageVersion string    `json:"storage_version,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	// RevisionAt is when the first bytes of the snapshot stream arrived:
	// etcd had fixed the snapshot's revision by then, so at RevisionAt
	// the cluster was at Revision or later, while at CreatedAt (taken
	// before the stream was asked for) it may still have been below.
	// Zero in manifests written before it was recorded (RevisionTime).
	RevisionAt time.Time `json:"revision_at,omitzero"`
	// DurationSeconds is how long taking, verifying and storing took.
	DurationSeconds float64 `json:"duration_seconds"`

	// Content of the snapshot, from the file itself (verify.Status).
	Revision        int64  `json:"revision"`
	CompactRevision int64  `json:"compact_revision"`
	TotalKeys       int    `json:"total_keys"`
	DBSize          int64  `json:"db_size"`
	SnapshotSHA256  string `json:"snapshot_sha256"`
	BoltHash        uint32 `json:"bolt_hash"`
	// HashKV is etcd's HashKV at Revision computed from the snapshot;
	// HashKVLive is what the live member answered; HashKVStatus says whether
	// they were compared ("match") or why not ("not comparable: ...").
	HashKV       uint32 `json:"hash_kv"`
	HashKVLive   uint32 `json:"hash_kv_live,omitempty"`
	HashKVStatus string `json:"hash_kv_status"`
	// HashKVEndpoint, HashKVMember (name) and HashKVMemberID say which live
	// member answered HashKV: another member than the snapshot's when one
	// could, so that member divergence is detected. HashKVSameMember says
	// why the snapshot's own member answered (empty when another did). All
	// empty when the comparison was deferred to the drill.
	HashKVEndpoint   string `json:"hash_kv_endpoint,omitempty"`
	HashKVMember     string `json:"hash_kv_member,omitempty"`
	HashKVMemberID   string `json:"hash_kv_member_id,omitempty"`
	HashKVSameMember string `json:"hash_kv_same_member,omitempty"`

	// The stored data object.
	Object       string     `json:"object"`
	ObjectSize   int64      `json:"object_size"`
	ObjectSHA256 string     `json:"object_sha256"`
	Compression  string     `json:"compression"` // "zstd", "s2" or "none"
	Encryption   string     `json:"encryption"`  // "age" or "none"
	Recipients   []string   `json:"recipients,omitempty"`
	LockMode     string     `json:"object_lock_mode,omitempty"`
	RetainUntil  *time.Time `json:"object_lock_retain_until,omitempty"`
	LegalHold    bool       `json:"object_lock_legal_hold,omitempty"`

	// Kit is the id (sha256) of the recovery kit stored with this backup
	// (package kit: <cluster>/kits/<kit>.json); empty without kit.paths.
	Kit string `json:"kit,omitempty"`

	// Lineage is the etcd cluster ID (hex) of the cluster that first
	// wrote this store's cluster name: the backup's own EtcdClusterID, or
	// that of the cluster it was restored from, transitively (see
	// LineageID; empty in manifests written before lineages were
	// recorded, which then belong to their own EtcdClusterID's).
	Lineage string `json:"lineage,omitempty"`
	// RestoredFrom is the backup this cluster was restored from, when
	// that is how it joined the lineage (recorded on the first backup
	// after the restore).
	RestoredFrom string `json:"restored_from,omitempty"`
	// Supersedes are the lineages this one took the name over from on
	// purpose (--adopt-cluster after a rebuild lifeboat did not restore):
	// a restore of latest then chooses this lineage over them.
	Supersedes []string `json:"supersedes,omitempty"`

	AgentVersion string `json:"agent_version"`

	// note is what the reader's signature check found (not stored).
	note trustNote
}

// LineageID is the lineage the backup belongs to: Lineage, or its own
// etcd cluster ID for a manifest written before lineages were recorded.
func (m *Manifest) LineageID() string {
	if m.Lineage != "" {
		return m.Lineage
	}
	return m.EtcdClusterID
}

// State names the etcd state the backup holds: its lineage, revision and
// the HashKV computed from its snapshot. Two backups with one state hold
// the same keys and values (an idle cluster's). Empty when the snapshot's
// HashKV was not computed: unknown is a state of its own.
func (m *Manifest) State() string {
	if m.Revision <= 0 || m.HashKV == 0 {
		return ""
	}
	return fmt.Sprintf("%s/%d/%08x", m.LineageID(), m.Revision, m.HashKV)
}

// Untrusted says why the manifest is not to be trusted (nil when it is,
// or when its reader checks no signatures): an *UntrustedError.
func (m *Manifest) Untrusted() error { return m.note.untrusted }

// Unsigned reports whether the manifest was read without a signature
// because the reader allows unsigned manifests (a warning).
func (m *Manifest) Unsigned() bool { return m.note.unsigned }

// RevisionTime is the time from which the snapshot's state is the
// cluster's (a point-in-time window starts there): RevisionAt, or
// CreatedAt for a manifest written before RevisionAt was recorded.
func (m *Manifest) RevisionTime() time.Time {
	if !m.RevisionAt.IsZero() {
		return m.RevisionAt
	}
	return m.CreatedAt
}

var idPattern = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-r[0-9]+$`)

// NewID returns the backup id for a snapshot taken at t of revision rev:
// UTC time then revision, so ids sort by time.
func NewID(t time.Time, rev int64) string {
	return fmt.Sprintf("%s-r%d", t.UTC().Format("20060102T150405Z"), rev)
}

// ValidID reports whether id has the shape NewID produces.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// IDTime returns the time an id names (when its snapshot started, UTC, to
// the second); ok is false when id is not a backup id.
func IDTime(id string) (t time.Time, ok bool) {
	if !ValidID(id) {
		return time.Time{}, false
	}
	t, err := time.Parse("20060102T150405Z", id[:16])
	return t, err == nil
}

// ErrBadManifest is wrapped by manifest decoding errors.
var ErrBadManifest = errors.New("bad manifest")

// ParseManifest decodes and validates a manifest. Unknown fields are
// tolerated (newer writers may add some); a wrong format version, a missing
// or malformed id, and inconsistent fields are errors wrapping ErrBadManifest.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the manifest's fields for consistency.
func (m *Manifest) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadManifest, fmt.Sprintf(format, a...))
	}
	switch {
	case m.Format != ManifestFormat:
		return bad("format %d, this build reads format %d", m.Format, ManifestFormat)
	case !ValidID(m.ID):
		return bad("id %q is not of the form 20060102T150405Z-r123", m.ID)
	case m.Revision <= 0:
		return bad("revision %d", m.Revision)
	case m.Object == "" || strings.Contains(m.Object, ".."):
		return bad("object key %q", m.Object)
	case len(m.ObjectSHA256) != 64:
		return bad("object_sha256 %q", m.ObjectSHA256)
	case len(m.SnapshotSHA256) != 64:
		return bad("snapshot_sha256 %q", m.SnapshotSHA256)
	case m.ObjectSize < 0 || m.DBSize < 0:
		return bad("negative size")
	case ValidateCompression(m.Compression) != nil:
		return bad("compression %q", m.Compression)
	case m.Encryption != "age" && m.Encryption != "none":
		return bad("encryption %q", m.Encryption)
	case m.Encryption == "age" && len(m.Recipients) == 0:
		return bad("encryption age without recipients")
	case m.Kit != "" && !validKitID(m.Kit):
		return bad("kit %q is not a sha256", m.Kit)
	}
	return nil
}

// Marshal encodes the manifest as indented JSON.
func (m *Manifest) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// validKitID reports whether id is 64 lower-case hex digits (a kit id; the
// kit package owns kits, this is only the manifest's shape check).
func validKitID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
