package kubeadm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Phase is the last step of a restore that is complete.
type Phase string

// The phases in order (doc.go says what each means), and the end of a
// rollback.
const (
	PhasePlanned    Phase = "planned"
	PhaseAside      Phase = "aside"
	PhaseStopped    Phase = "stopped"
	PhaseWritten    Phase = "written"
	PhaseSwapped    Phase = "swapped"
	PhaseEtcd       Phase = "etcd"
	PhaseDone       Phase = "done"
	PhaseRolledBack Phase = "rolled-back"
)

var order = []Phase{PhasePlanned, PhaseAside, PhaseStopped, PhaseWritten, PhaseSwapped, PhaseEtcd, PhaseDone}

// index is the phase's place in order (-1 for rolled-back).
func (p Phase) index() int {
	for i, q := range order {
		if q == p {
			return i
		}
	}
	return -1
}

// Finished reports whether nothing is left to do: done or rolled back.
func (p Phase) Finished() bool { return p == PhaseDone || p == PhaseRolledBack }

// JournalFile is the journal's path under a node's root.
const JournalFile = LifeboatDir + "/restore.json"

// journalFormat is the journal's format version.
const journalFormat = 1

// Source is what a restore restores: a backup by id (the one "latest"
// meant when the restore was planned, so a rerun restores the same one),
// or a point in time.
type Source struct {
	Backup     string `json:"backup,omitempty"`
	ToRevision int64  `json:"to_revision,omitempty"`
	ToTime     string `json:"to_time,omitempty"`
}

func (s Source) String() string {
	switch {
	case s.ToRevision != 0:
		return fmt.Sprintf("revision %d (point in time)", s.ToRevision)
	case s.ToTime != "":
		return fmt.Sprintf("time %s (point in time)", s.ToTime)
	}
	return "backup " + s.Backup
}

// Expected is what the written data dir holds, read back from its
// database before etcd starts on it: what the started member must answer.
type Expected struct {
	Revision         int64  `json:"revision"`
	CompactRevision  int64  `json:"compact_revision"`
	TotalKeys        int    `json:"total_keys"`
	HashKV           uint32 `json:"hashkv"`
	HashKVComparable bool   `json:"hashkv_comparable"`
	HashKVReason     string `json:"hashkv_reason,omitempty"`
}

// Event is one phase reached, with when.
type Event struct {
	Phase Phase     `json:"phase"`
	At    time.Time `json:"at"`
	Note  string    `json:"note,omitempty"`
}

// Journal is a restore's plan and progress, kept on the node. Paths are
// under the node's root.
type Journal struct {
	Format  int       `json:"format"`
	Started time.Time `json:"started"`
	Phase   Phase     `json:"phase"`
	Source  Source    `json:"source"`
	// RevisionBump and MarkCompacted are etcdutl's restore options
	// (kubeadm restores default to 1000000000 and true: watchers re-list).
	// Write raises RevisionBump with Bump when the old data dir's revision
	// (OldRevision, read once etcd stopped) would not be left behind.
	RevisionBump  uint64 `json:"revision_bump"`
	MarkCompacted bool   `json:"mark_compacted"`
	OldRevision   int64  `json:"old_revision,omitempty"`
	// KeepLifeboatKeys keeps lifeboat's own keys in the restored data
	// (restore.RemoveOwnKeys removes them otherwise).
	KeepLifeboatKeys bool `json:"keep_lifeboat_keys,omitempty"`
	// Member is the restored member: name, peer URLs, the initial cluster
	// (every member, each node restoring its own; one member by default)
	// and the new cluster's token.
	Name           string   `json:"name"`
	PeerURLs       []string `json:"peer_urls"`
	InitialCluster string   `json:"initial_cluster"`
	Token          string   `json:"token"`
	// DataDir is the member's data dir; NewDataDir where the backup is
	// written; OldDataDir where the old data dir goes (and stays).
	DataDir    string `json:"data_dir"`
	NewDataDir string `json:"new_data_dir"`
	OldDataDir string `json:"old_data_dir"`
	// Manifests is kubelet's static pod directory; Aside where etcd.yaml
	// and kube-apiserver.yaml wait while the member is restored.
	Manifests string `json:"manifests"`
	Aside     string `json:"aside"`
	// RestoredDataDir is where a rollback put the restored data dir.
	RestoredDataDir string    `json:"restored_data_dir,omitempty"`
	Expected        *Expected `json:"expected,omitempty"`
	Events          []Event   `json:"events"`

	file string
}

// NewJournal plans the restore of source onto node n: the data dirs are
// named after now; the token is the new cluster's.
func NewJournal(n *Node, src Source, bump uint64, markCompacted bool, token string, now time.Time) *Journal {
	stamp := now.UTC().Format("20060102T150405Z")
	return &Journal{
		Format: journalFormat, Started: now.UTC(), Phase: PhasePlanned, Source: src,
		RevisionBump: bump, MarkCompacted: markCompacted,
		Name: n.Name, PeerURLs: n.PeerURLs, InitialCluster: n.Name + "=" + n.PeerURLs[0], Token: token,
		DataDir: n.DataDir, NewDataDir: n.DataDir + ".lifeboat-new-" + stamp, OldDataDir: n.DataDir + ".lifeboat-old-" + stamp,
		Manifests: n.Path(ManifestsDir), Aside: n.Path(LifeboatDir + "/manifests"),
		file: n.Path(JournalFile),
	}
}

// Bump returns the revision bump for a source at revision src: the
// planned RevisionBump, raised when needed so that the restored revision
// (src + bump) is above the old data dir's by at least the planned bump.
// Every client of the old cluster (kubelet, controllers, informers) has
// seen revisions up to OldRevision and waits for a higher one ("too large
// resource version") instead of re-listing: restoring an older backup
// onto a cluster already restored once with the same bump would leave
// them waiting. 0 stays 0 (no bump asked for).
func (j *Journal) Bump(src int64) uint64 {
	if j.RevisionBump == 0 || src+int64(j.RevisionBump) > j.OldRevision+int64(j.RevisionBump)/2 {
		return j.RevisionBump
	}
	return uint64(j.OldRevision-src) + j.RevisionBump
}

// LoadJournal reads the journal of the node under root; (nil, nil) when
// there is none.
func LoadJournal(root string) (*Journal, error) {
	file := filepath.Join(root, JournalFile)
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read restore journal %s: %w", file, err)
	}
	var j Journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("restore journal %s: %w (move it aside to start anew; it names the old data dir)", file, err)
	}
	if j.Format != journalFormat {
		return nil, fmt.Errorf("restore journal %s: format %d, this lifeboat reads %d", file, j.Format, journalFormat)
	}
	if j.Phase.index() < 0 && j.Phase != PhaseRolledBack {
		return nil, fmt.Errorf("restore journal %s: unknown phase %q", file, j.Phase)
	}
	j.file = file
	return &j, nil
}

// File is the journal's path.
func (j *Journal) File() string { return j.file }

// advance records phase p as reached and saves the journal.
func (j *Journal) advance(p Phase, at time.Time, note string) error {
	j.Phase = p
	j.Events = append(j.Events, Event{Phase: p, At: at.UTC(), Note: note})
	return j.save()
}

// save writes the journal durably: a temporary file, fsync, rename, fsync
// of the directory.
func (j *Journal) save() error {
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(j.file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("restore journal: %w", err)
	}
	tmp := j.file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("restore journal: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write restore journal %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync restore journal %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("restore journal %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, j.file); err != nil {
		return fmt.Errorf("restore journal: %w", err)
	}
	return syncDir(dir)
}

// Archive renames a finished journal to restore-<started>.json beside it,
// so a new restore can start; the record stays.
func (j *Journal) Archive() (string, error) {
	to := filepath.Join(filepath.Dir(j.file), "restore-"+j.Started.Format("20060102T150405Z")+".json")
	if err := os.Rename(j.file, to); err != nil {
		return "", fmt.Errorf("archive restore journal: %w", err)
	}
	return to, syncDir(filepath.Dir(j.file))
}

// syncDir fsyncs a directory, so renames in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// Others are the members of the journal's initial cluster other than its
// own (none for a single-member control plane).
func (j *Journal) Others() []Member {
	ms, err := ParseMembers(j.InitialCluster, "the journal's initial cluster")
	if err != nil {
		return nil
	}
	return ms.Others(j.Name)
}
