// Package kubeadm restores the etcd of a kubeadm control-plane node in
// place: lifeboat restore --kubeadm.
//
// ReadNode reads the node's static pods (/etc/kubernetes/manifests/
// etcd.yaml and kube-apiserver.yaml under a root directory, "/" on a real
// node): the member's name, its data dir (the host path of the etcd-data
// volume), peer and client URLs, initial cluster, and the certificates the
// apiserver uses to reach etcd. NewJournal plans a restore from it; Run
// carries it out in phases, each recorded in a journal on the node
// (/etc/kubernetes/lifeboat/restore.json, written to a temporary name,
// fsynced, renamed, the directory fsynced) before the next begins:
//
//	planned     the plan: source, data dirs, expected checks
//	aside       etcd.yaml and kube-apiserver.yaml renamed into
//	            /etc/kubernetes/lifeboat/manifests, one after the other
//	stopped     etcd's database no longer locked, its ports and the
//	            apiserver's closed (kubelet stopped both static pods; once
//	            etcd is gone, the apiserver's process is killed rather
//	            than left to spend its 30 s grace waiting for etcd)
//	written     the backup restored into <data dir>.lifeboat-new-<time>
//	            (Options.Write: fetch, verify, replay, etcdutl restore)
//	            and read back (revision, keys, HashKV)
//	swapped     <data dir> renamed to <data dir>.lifeboat-old-<time>, the
//	            new dir renamed to <data dir>
//	etcd        etcd.yaml back; etcd healthy with the written revision,
//	            key count and (when comparable) HashKV
//	done        kube-apiserver.yaml back; /readyz answers ok
//
// Invariant: the old data dir is never deleted or written: until swapped it
// is where it was, afterwards at the name the journal records; and
// kubelet never runs etcd on a data dir that is being changed, because
// etcd.yaml stays out of the manifests directory from aside until etcd.
// Every step is idempotent (it looks at the files before acting), so a
// crash at any point followed by Run on the same journal finishes the job;
// Rollback puts the old data dir and both manifests back from any phase.
//
// It does not fetch backups, select them or talk to the store: the caller's
// Options.Write does (cmd/lifeboat). It restores this node's member; on a
// control plane of several (ReadMembers: the member's own database, else
// the running member, else etcd.yaml, whose --initial-cluster names only
// the first node on the first node), the journal's initial cluster names
// them all, each node restores its own from the same backup, and the
// etcd phase waits (Options.MembersTimeout) until a majority serves, then
// checks every member's HashKV at the written revision.
package kubeadm
