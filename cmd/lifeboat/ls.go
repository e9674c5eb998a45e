package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/inspect"
)

type lsOptions struct {
	source, prefix, output string
	atRevision             int64
	atTime                 string
}

func newLsCmd(a *app) *cobra.Command {
	var o lsOptions
	c := &cobra.Command{
		Use:   "ls SOURCE|--at-revision R|--at-time T [PREFIX]",
		Short: "List the keys of a backup under a prefix (resource, namespace, name, size, mod revision)",
		Long: `ls lists the live keys of a backup's snapshot under PREFIX (every key
without one), in key order. SOURCE is a backup id, latest, latest-proven,
or a point in time: @R or --at-revision R (the state after revision R),
@T or --at-time T (after the last revision received at or before T: RFC
3339 or a duration ago, e.g. 2h): the nearest snapshot with the captured
changes replayed onto it.
Kubernetes keys (/registry/<resource>/<namespace>/<name>) are split into
columns; ENCODING says how the value is stored: protobuf, json, raw, or
encrypted:<provider>:<key> for values encrypted at rest by kube-apiserver.

The first query of a backup fetches it into --cache-dir, checks it against
its manifest and indexes it; later ones read the cache. A prefix with no
key under it prints nothing and exits 0.`,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			at, err := atSource(o.atRevision, o.atTime)
			if err != nil {
				return err
			}
			if at != "" {
				args = append([]string{at}, args...)
			}
			if len(args) == 0 || len(args) > 2 {
				return usagef("give SOURCE (a backup id, latest, latest-proven, @R or @T, or --at-revision/--at-time) and an optional PREFIX")
			}
			o.source = args[0]
			if err := checkSource(o.source); err != nil {
				return err
			}
			if len(args) == 2 {
				o.prefix = args[1]
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runLs(cmd.Context(), a, cfg, a.logger(cfg), o)
		},
	}
	addOutputFlag(c, &o.output, "table or json")
	addAtFlags(c, &o.atRevision, &o.atTime)
	return c
}

// addAtFlags adds --at-revision and --at-time, a point in time as SOURCE.
func addAtFlags(c *cobra.Command, rev *int64, at *string) {
	c.Flags().Int64Var(rev, "at-revision", 0, "the state after revision R (a snapshot plus the captured changes up to R), instead of SOURCE")
	c.Flags().StringVar(at, "at-time", "", "the state after the last revision received at or before T (RFC 3339, or a duration ago: 2h), instead of SOURCE")
}

type lsEntry struct {
	Key            string `json:"key"`
	Resource       string `json:"resource,omitempty"`
	Namespace      string `json:"namespace,omitempty"`
	Name           string `json:"name,omitempty"`
	Size           int64  `json:"size"`
	ModRevision    int64  `json:"mod_revision"`
	CreateRevision int64  `json:"create_revision"`
	Version        int64  `json:"version"`
	Lease          int64  `json:"lease,omitempty"`
	Encoding       string `json:"encoding"`
}

func runLs(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o lsOptions) error {
	s, err := openSource(ctx, a, cfg, lg, o.source)
	if err != nil {
		return err
	}
	defer s.Close()
	return writeLs(a.stdout, s, o.prefix, o.output)
}

// lister is what ls reads: a snapshot's index (inspect.Snapshot).
type lister interface {
	List(prefix string, fn func(*inspect.Entry) error) error
}

func writeLs(out io.Writer, s lister, prefix, output string) error {
	n := 0
	if output == "json" {
		io.WriteString(out, "[")
		err := s.List(prefix, func(e *inspect.Entry) error {
			r, ns, name := splitKubernetesKey([]byte(e.Key))
			if r == "-" {
				r, ns, name = "", "", ""
			}
			b, err := json.Marshal(lsEntry{Key: e.Key, Resource: r, Namespace: ns, Name: name, Size: e.Size,
				ModRevision: e.ModRevision, CreateRevision: e.CreateRevision, Version: e.Version, Lease: e.Lease, Encoding: e.Encoding})
			if err != nil {
				return err
			}
			sep := ",\n  "
			if n == 0 {
				sep = "\n  "
			}
			n++
			_, err = io.WriteString(out, sep+string(b))
			return err
		})
		if err != nil {
			return err
		}
		end := "\n]\n"
		if n == 0 {
			end = "]\n"
		}
		_, err = io.WriteString(out, end)
		return err
	}
	return writeLsTable(out, s, prefix)
}

// writeLsTable writes the table of ls in two passes over the index: the
// first sizes the columns, the second writes each line padded to them, so
// that memory stays flat however many keys the backup has (text/tabwriter
// keeps every line until the end to size them: 64 MiB for 300 000 keys).
// The output is the one text/tabwriter gives (padding 2, no cell holds a
// tab or a newline: splitKubernetesKey quotes control characters).
func writeLsTable(out io.Writer, s lister, prefix string) error {
	header := lsRow{"RESOURCE", "NAMESPACE", "NAME", "SIZE", "MOD-REV", "ENCODING"}
	widths := header.widths(nil)
	n := 0
	err := s.List(prefix, func(e *inspect.Entry) error {
		n++
		r := newLsRow(e)
		widths = r.widths(widths)
		return nil
	})
	if err != nil || n == 0 {
		return err
	}
	bw := bufio.NewWriterSize(out, 1<<16)
	header.write(bw, widths)
	err = s.List(prefix, func(e *inspect.Entry) error {
		r := newLsRow(e)
		return r.write(bw, widths)
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// lsRow is one line of ls's table.
type lsRow [6]string

func newLsRow(e *inspect.Entry) lsRow {
	r, ns, name := splitKubernetesKey([]byte(e.Key))
	if ns == "" {
		ns = "-"
	}
	return lsRow{r, ns, name, strconv.FormatInt(e.Size, 10), strconv.FormatInt(e.ModRevision, 10), e.Encoding}
}

// widths returns w with each column's width raised to this row's cell
// (in characters, as text/tabwriter counts them); the last column is not
// padded.
func (r *lsRow) widths(w []int) []int {
	if w == nil {
		w = make([]int, len(r)-1)
	}
	for i := range w {
		w[i] = max(w[i], utf8.RuneCountInString(r[i]))
	}
	return w
}

// write writes the row, each cell but the last padded to its column's
// width and two spaces.
func (r *lsRow) write(bw *bufio.Writer, w []int) error {
	for i, c := range r[:len(r)-1] {
		bw.WriteString(c)
		pad(bw, w[i]-utf8.RuneCountInString(c)+2)
	}
	bw.WriteString(r[len(r)-1])
	return bw.WriteByte('\n')
}

func pad(bw *bufio.Writer, n int) {
	const spaces = "                                "
	for n > len(spaces) {
		bw.WriteString(spaces)
		n -= len(spaces)
	}
	bw.WriteString(spaces[:n])
}
