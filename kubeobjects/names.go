package kubeobjects

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxName is the longest object name (a DNS subdomain); maxLabel the
// longest label value.
const (
	maxName  = 253
	maxLabel = 63
)

// ObjectName is cluster's EtcdRecoverability name: the cluster name in
// lower case with every character a name cannot hold made '-', or, when
// that leaves nothing or is too long, "cluster-" and a hash of the name.
func ObjectName(cluster string) string {
	n := dnsName(cluster)
	if n == "" || len(n) > maxName-len("-20060102t150405z-r9223372036854775807") {
		return "cluster-" + hash(cluster)
	}
	return n
}

// BackupName is the EtcdBackup name of backup id of cluster:
// ObjectName(cluster), '-', the id in lower case (or, for an id that
// leaves nothing or a name too long, "backup-" and a hash of both).
func BackupName(cluster, id string) string {
	part := dnsName(id)
	n := ObjectName(cluster) + "-" + part
	if part == "" || len(n) > maxName {
		return "backup-" + hash(cluster+"/"+id)
	}
	return n
}

// LabelValue is cluster as a label value: itself when it is one,
// otherwise "h-" and a hash of it.
func LabelValue(cluster string) string {
	if validLabel(cluster) {
		return cluster
	}
	return "h-" + hash(cluster)
}

func validLabel(s string) bool {
	if s == "" || len(s) > maxLabel || !alnum(rune(s[0])) || !alnum(rune(s[len(s)-1])) {
		return false
	}
	for _, r := range s {
		if !alnum(r) && r != '-' && r != '_' && r != '.' {
			return false
		}
	}
	return true
}

// dnsName lower-cases s and replaces every character but a-z, 0-9 and '-'
// with '-', trimming '-' at both ends: a valid DNS-1123 subdomain.
func dnsName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
			continue
		}
		b.WriteByte('-')
	}
	return strings.Trim(b.String(), "-")
}

func alnum(r rune) bool {
	return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
