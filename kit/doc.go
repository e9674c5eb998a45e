// Package kit provides the recovery kit: the files outside etcd that a
// restore on new hosts needs (kubeadm's /etc/kubernetes/pki and the
// EncryptionConfiguration the kube-apiserver manifest names; k3s's server
// token, server/tls and server/cred), collected from a root directory,
// stored in the backup store encrypted with age, and laid back out under a
// directory.
//
// A kit is a canonical tar archive: its entries sorted by path, each with
// its type, permission bits and owner, no times. Its id (IDFor) is the
// sha256 over those bytes' sha256 and the sorted recipient set, so the same
// files for the same recipients give the same id and a kit is stored once
// however many backups name it, while new recipients get a kit of their
// own, encrypted to them alone (a kit stored before that rule has the
// archive's sha256 as its id, and stays readable):
//
//	<cluster>/kits/<id>-<random>.tar.zst.age   the object (zstd, then age)
//	<cluster>/kits/<id>.json                    its manifest, written last (the commit point)
//
// Both are written conditionally and never replaced. A kit object without
// a manifest is unfinished (prune removes it after the orphan grace); two
// writers of the same kit each put their own object, the first manifest
// wins and the loser deletes its object. The manifest is plaintext and
// holds no secret: paths, modes, owners and sizes of the files, and the
// subject and expiry of each certificate.
//
// A kit read from a store is untrusted input: Parse refuses paths that
// are not clean and absolute, "..", duplicate entries, entries under a
// symbolic link, absolute symlink targets and relative ones that climb
// out of the kit, and anything but files, directories and symlinks; and
// Restore writes only through an os.Root of the target directory, so no
// entry lands outside it (the file system's root, outside which nothing
// is, by plain paths: see openTree).
//
// The package does not decide when a kit is taken (backup does, for every
// backup with kit paths configured), which kits are kept (retention/prune:
// those a kept backup names) or what a drill does with Check's result.
package kit
