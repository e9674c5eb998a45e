package kubeadm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one member of the etcd cluster a restore brings back.
type Member struct {
	Name    string
	PeerURL string // its first peer URL
}

func (m Member) String() string { return m.Name + "=" + m.PeerURL }

// Members are the members of a node's etcd cluster, sorted by name, and
// where they were read.
type Members struct {
	List   []Member
	Source string
}

// InitialCluster is the members as etcd's --initial-cluster.
func (ms Members) InitialCluster() string {
	s := make([]string, len(ms.List))
	for i, m := range ms.List {
		s[i] = m.String()
	}
	return strings.Join(s, ",")
}

// Others are the members other than the one named name.
func (ms Members) Others(name string) []Member {
	var out []Member
	for _, m := range ms.List {
		if m.Name != name {
			out = append(out, m)
		}
	}
	return out
}

// ParseMembers reads an --initial-cluster value (name=peerURL,...; a
// member with several peer URLs is named once per URL).
func ParseMembers(initialCluster, source string) (Members, error) {
	ms := Members{Source: source}
	seen := map[string]bool{}
	for _, p := range list(initialCluster) {
		name, u, ok := strings.Cut(p, "=")
		if !ok || name == "" || u == "" {
			return Members{}, fmt.Errorf("%s: %q is not name=peerURL", source, p)
		}
		if _, err := hostPort(u); err != nil {
			return Members{}, fmt.Errorf("%s: member %s: %w", source, name, err)
		}
		if !seen[name] {
			seen[name] = true
			ms.List = append(ms.List, Member{Name: name, PeerURL: u})
		}
	}
	if len(ms.List) == 0 {
		return Members{}, fmt.Errorf("%s names no member", source)
	}
	ms.sort()
	return ms, nil
}

func (ms *Members) sort() {
	slices.SortFunc(ms.List, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
}

// ReadMembers returns the members of node n's etcd cluster. etcd.yaml's
// --initial-cluster is not enough: kubeadm init writes only the first
// node there, however many join later. So the members come from the
// member's own database (its data dir's members bucket, readable once
// etcd stopped), else from the running member (its member list, as it
// sees it), and only then from etcd.yaml.
func ReadMembers(ctx context.Context, n *Node) (Members, error) {
	db := filepath.Join(n.DataDir, "member", "snap", "db")
	ms, err := membersFromDB(db)
	if err == nil {
		return ms, n.checkSelf(ms)
	}
	why := err.Error()
	if errors.Is(err, errLocked) {
		ms, err = membersLive(ctx, n)
		if err == nil {
			return ms, n.checkSelf(ms)
		}
		why = err.Error()
	}
	ms, err = ParseMembers(n.InitialCluster, "etcd.yaml's --initial-cluster (the data dir's members: "+why+")")
	if err != nil {
		return Members{}, err
	}
	return ms, n.checkSelf(ms)
}

// checkSelf makes sure the node's own member is among ms, at its peer URL.
func (n *Node) checkSelf(ms Members) error {
	for _, m := range ms.List {
		if m.Name == n.Name {
			if !slices.Contains(n.PeerURLs, m.PeerURL) {
				return fmt.Errorf("%s: member %s has peer URL %s, etcd.yaml says %s", ms.Source, m.Name, m.PeerURL, strings.Join(n.PeerURLs, ","))
			}
			return nil
		}
	}
	return fmt.Errorf("%s: this node's member %s is not among %s", ms.Source, n.Name, ms.InitialCluster())
}

var errLocked = errors.New("etcd holds its database (it is running)")

// dbMember is a member as etcd stores it in its members bucket.
type dbMember struct {
	ID        uint64   `json:"id"`
	Name      string   `json:"name"`
	PeerURLs  []string `json:"peerURLs"`
	IsLearner bool     `json:"isLearner"`
}

// membersFromDB reads the members bucket of etcd's database file db,
// read-only; errLocked when etcd holds it.
func membersFromDB(db string) (Members, error) {
	if _, err := os.Stat(db); err != nil {
		return Members{}, err
	}
	b, err := bolt.Open(db, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return Members{}, errLocked
	}
	if err != nil {
		return Members{}, fmt.Errorf("open %s: %w", db, err)
	}
	defer b.Close()
	ms := Members{Source: "the members bucket of " + db}
	err = b.View(func(tx *bolt.Tx) error {
		removed := map[string]bool{}
		if rb := tx.Bucket([]byte("members_removed")); rb != nil {
			_ = rb.ForEach(func(k, _ []byte) error { removed[string(k)] = true; return nil })
		}
		mb := tx.Bucket([]byte("members"))
		if mb == nil {
			return errors.New("no members bucket in " + db)
		}
		return mb.ForEach(func(k, v []byte) error {
			if removed[string(k)] {
				return nil
			}
			var m dbMember
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("member %s in %s: %w", k, db, err)
			}
			return ms.add(fmt.Sprintf("%x", m.ID), m.Name, m.PeerURLs)
		})
	})
	if err != nil {
		return Members{}, err
	}
	if len(ms.List) == 0 {
		return Members{}, errors.New("no member in the members bucket of " + db)
	}
	ms.sort()
	return ms, nil
}

// add appends a member; one that never started has no name yet, and a
// restore cannot name it.
func (ms *Members) add(id, name string, peerURLs []string) error {
	if name == "" || len(peerURLs) == 0 {
		return fmt.Errorf("%s: member %s (%s) has not started yet (no name): remove it (etcdctl member remove %s) or start it, then restore", ms.Source, id, strings.Join(peerURLs, ","), id)
	}
	ms.List = append(ms.List, Member{Name: name, PeerURL: peerURLs[0]})
	return nil
}

// membersLive asks the running member for its member list (its own view:
// serializable, so that a member without quorum answers too).
func membersLive(ctx context.Context, n *Node) (Members, error) {
	cli, err := n.etcdClient()
	if err != nil {
		return Members{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return Members{}, fmt.Errorf("member list from %s: %w", strings.Join(n.ClientURLs, ","), err)
	}
	ms := Members{Source: "the member list of the running etcd at " + n.ClientURLs[0]}
	for _, m := range resp.Members {
		if err := ms.add(fmt.Sprintf("%x", m.ID), m.Name, m.PeerURLs); err != nil {
			return Members{}, err
		}
	}
	ms.sort()
	return ms, nil
}
