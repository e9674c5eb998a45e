package child

import (
	"flag"
	"fmt"
	"io"

	"github.com/lifeboat-dev/lifeboat/internal/sysfilter"
)

// skipSyncs makes every fsync-like call of this process (fsync,
// fdatasync, sync_file_range, syncfs, sync) return success at once
// without writing anything out, for all its threads (sysfilter.Answer).
// It is for the drill's children (the restore and the throwaway etcd),
// whose data is deleted seconds later: on a 1.1 GB database bbolt's
// syncs of the restored copy wrote the whole gigabyte to disk, about a
// second of the drill, and a burst of writes beside the live etcd's WAL
// when the drill runs on its node. Pages that are never synced are
// mostly never written: the drill deletes the directory first.
func skipSyncs() error { return sysfilter.Answer(sysfilter.SyncCalls, 0) }

// NoSyncFlag registers the drill children's --no-sync flag on fs
// (RunRestore, RunEtcd).
func NoSyncFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("no-sync", false, "skip fsync and its kin: the data is thrown away (skipSyncs)")
}

// SkipSyncsIf calls skipSyncs when on. A refused filter is said on
// stderr, as child's, and the child syncs as usual.
func SkipSyncsIf(on bool, stderr io.Writer, child string) {
	if !on {
		return
	}
	if err := skipSyncs(); err != nil {
		fmt.Fprintf(stderr, "lifeboat-%s: syncing as usual: %v\n", child, err)
	}
}
