package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/inspect"
)

type diffOptions struct {
	a, b, prefix string
	values       bool
}

func newDiffCmd(a *app) *cobra.Command {
	var o diffOptions
	c := &cobra.Command{
		Use:   "diff SOURCE SOURCE [PREFIX]",
		Short: "List the keys added, deleted and changed between two backups",
		Long: `diff compares the live keys of two backups under PREFIX (every key
without one), in key order: "+ KEY" was added, "- KEY" deleted, "~ KEY"
changed (its value differs; the mod revisions are shown). SOURCE is a
backup id, latest, latest-proven, or a point in time: @R (the state after
revision R) or @T (RFC 3339, or a duration ago such as @2h). Values are compared by size and 64-bit hash (xxHash)
from the indexes, without reading the snapshots; --values also prints a
unified diff of the decoded objects (YAML). diff exits 0 whether or not
there are differences.`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.a, o.b = args[0], args[1]
			for _, s := range args[:2] {
				if err := checkSource(s); err != nil {
					return err
				}
			}
			if len(args) == 3 {
				o.prefix = args[2]
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runDiff(cmd.Context(), a, cfg, a.logger(cfg), o)
		},
	}
	c.Flags().BoolVar(&o.values, "values", false, "print a unified diff of each changed object")
	return c
}

func runDiff(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o diffOptions) error {
	in, err := newInspector(ctx, a, cfg, lg)
	if err != nil {
		return err
	}
	sa, err := in.open(ctx, o.a)
	if err != nil {
		return err
	}
	defer sa.Close()
	sb, err := in.open(ctx, o.b)
	if err != nil {
		return err
	}
	defer sb.Close()
	counts := map[string]int{}
	render := func(s *inspect.Snapshot, e *inspect.Entry) ([]byte, error) {
		if e == nil {
			return nil, nil
		}
		v, err := s.Value(ctx, *e)
		if err != nil {
			return nil, err
		}
		b, _, err := inspect.Render(v, "yaml", nil)
		if err != nil {
			return []byte(fmt.Sprintf("# %v\n", err)), nil
		}
		return b, nil
	}
	err = inspect.Diff(sa, sb, o.prefix, func(c inspect.Change) error {
		counts[c.Op]++
		switch c.Op {
		case "added":
			fmt.Fprintf(a.stdout, "+ %s (mod revision %d)\n", c.Key, c.B.ModRevision)
		case "deleted":
			fmt.Fprintf(a.stdout, "- %s (mod revision %d)\n", c.Key, c.A.ModRevision)
		default:
			fmt.Fprintf(a.stdout, "~ %s (mod revision %d -> %d)\n", c.Key, c.A.ModRevision, c.B.ModRevision)
		}
		if !o.values {
			return nil
		}
		va, err := render(sa, c.A)
		if err != nil {
			return err
		}
		vb, err := render(sb, c.B)
		if err != nil {
			return err
		}
		fmt.Fprint(a.stdout, inspect.UnifiedDiff(sa.ID+":"+c.Key, sb.ID+":"+c.Key, va, vb))
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "%s (revision %d) -> %s (revision %d): %d added, %d deleted, %d changed\n",
		sa.ID, sa.Revision, sb.ID, sb.Revision, counts["added"], counts["deleted"], counts["changed"])
	return nil
}
