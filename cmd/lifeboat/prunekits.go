package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/lifeboat-dev/lifeboat/retention/prune"
)

// prunedKit is one recovery kit in `lifeboat prune -o json`.
type prunedKit struct {
	ID      string `json:"id"`
	Action  string `json:"action"`
	Reason  string `json:"reason,omitempty"`
	Deleted bool   `json:"deleted"`
}

func prunedKits(res *prune.Result) []prunedKit {
	kits := []prunedKit{}
	for _, pk := range res.Plan.Kits {
		kits = append(kits, prunedKit{ID: pk.Manifest.ID, Action: string(pk.Action), Reason: pk.Reason,
			Deleted: slices.Contains(res.KitsDeleted, pk.Manifest.ID)})
	}
	return kits
}

// printPrunedKits prints a line per kit that goes, and a count of those kept.
func printPrunedKits(out io.Writer, rep pruneOutput) {
	kept := 0
	for _, k := range rep.Kits {
		switch {
		case k.Action == string(prune.ActionKeep):
			kept++
		case k.Action == string(prune.ActionLocked) || k.Action == string(prune.ActionSkip):
			fmt.Fprintf(out, "recovery kit %s: kept for now (%s)\n", k.ID[:12], k.Reason)
		case rep.DryRun:
			fmt.Fprintf(out, "recovery kit %s: delete (no remaining backup names it)\n", k.ID[:12])
		case k.Deleted:
			fmt.Fprintf(out, "recovery kit %s: deleted\n", k.ID[:12])
		default:
			fmt.Fprintf(out, "recovery kit %s: kept (a backup that could not be deleted names it, or an error)\n", k.ID[:12])
		}
	}
	if kept > 0 {
		fmt.Fprintf(out, "recovery kits: %d kept (named by a remaining backup, or young)\n", kept)
	}
}
