package verify

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// HashKVVersions are the etcd server versions (major.minor) whose HashKV
// rules File's hasher implements: for each, the rules in etcd's source
// (mvcc hashByRev and kvHasher, key index Keep, compaction) were read and
// equal those of 3.7, and the version tests check File's HashKV against
// real servers of that version (the newest patch release the module proxy
// serves, built by scripts/build-etcd.sh: see docs/commands.md, "etcd versions").
// Add a version only with its test.
var HashKVVersions = []string{"3.5", "3.6", "3.7"}

// HashKVRules returns the major.minor of an etcd server version ("3.6.16",
// "v3.5.1", "3.8.0-alpha.0") and whether File computes HashKV by that
// version's rules. A version that does not parse gives "" and false.
func HashKVRules(version string) (minor string, known bool) {
	major, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(version), "v"), ".")
	if !ok {
		return "", false
	}
	mi, _, _ := strings.Cut(rest, ".")
	if !isNumber(major) || !isNumber(mi) {
		return "", false
	}
	minor = major + "." + mi
	return minor, slices.Contains(HashKVVersions, minor)
}

func isNumber(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	return err == nil && strconv.FormatUint(n, 10) == s
}

// CompareMemberHashKV is CompareHashKV for a member whose server version is
// memberVersion (its Status): the member that answered HashKV. When File
// does not know that version's HashKV rules (HashKVRules), the hashes are
// not compared and it returns "not comparable (etcd X.Y): ..." with a nil
// error: a version with other rules must not fail every backup, and an
// equal hash would prove nothing about rules nobody checked.
func CompareMemberHashKV(st Status, memberVersion string, liveHash uint32, liveCompactRev int64) (string, error) {
	minor, known := HashKVRules(memberVersion)
	switch {
	case minor == "":
		return fmt.Sprintf("not comparable (etcd version %q unknown): HashKV rules are known for etcd %s",
			memberVersion, strings.Join(HashKVVersions, ", ")), nil
	case !known:
		return fmt.Sprintf("not comparable (etcd %s): HashKV rules are known for etcd %s",
			minor, strings.Join(HashKVVersions, ", ")), nil
	}
	return CompareHashKV(st, liveHash, liveCompactRev)
}
