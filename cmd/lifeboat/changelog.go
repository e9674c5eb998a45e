package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/repository"
)

type logOptions struct {
	prefix                       string
	since, until                 string
	sinceRevision, untilRevision int64
	output                       string
	generation                   string
}

func newLogCmd(a *app) *cobra.Command {
	var o logOptions
	c := &cobra.Command{
		Use:   "log [PREFIX]",
		Short: "Print the captured changes (revision, time, put/delete, key, size), oldest first",
		Long: `Print the changes in the captured windows of the store: one line per
operation (a multi-op transaction is one revision with several lines), oldest
first, so that the newest is last. PREFIX filters by key prefix, e.g.
/registry/namespaces/shop. --since/--until take an RFC 3339 time or a
duration ago (30m, 2h, 1d); --since-revision/--until-revision are inclusive.
Kubernetes keys (/registry/<resource>/<namespace>/<name>) are split into
columns. Segments are read one at a time; encrypted segments need
--identity-file.

To restore to just before a delete: lifeboat log /registry/namespaces/shop
--since 2h shows the DELETE at revision R; lifeboat restore --to-revision R-1.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			if len(args) == 1 {
				o.prefix = args[0]
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runLog(cmd.Context(), cfg, a.logger(cfg), o, a.stdout, time.Now())
		},
	}
	f := c.Flags()
	f.StringVar(&o.since, "since", "", "only changes received at or after this time (RFC 3339, or a duration ago: 30m, 2h, 1d)")
	f.StringVar(&o.until, "until", "", "only changes received at or before this time (RFC 3339, or a duration ago)")
	f.Int64Var(&o.sinceRevision, "since-revision", 0, "only revisions >= R")
	f.Int64Var(&o.untilRevision, "until-revision", 0, "only revisions <= R")
	f.StringVar(&o.generation, "generation", "", "only this capture generation (its id, as lifeboat list shows)")
	addOutputFlag(c, &o.output, "table or json")
	return c
}

// parseWhen reads --since/--until as every time flag (parseTime).
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	return parseTime("--"+flag, s, now)
}

// changeFilter selects changes by revision, time and key prefix.
type changeFilter struct {
	fromRev, toRev int64 // 0: unbounded
	since, until   time.Time
	prefix         []byte
}

func (o logOptions) filter(now time.Time) (changeFilter, error) {
	f := changeFilter{fromRev: o.sinceRevision, toRev: o.untilRevision, prefix: []byte(o.prefix)}
	var err error
	switch {
	case o.since != "" && o.sinceRevision != 0:
		return f, usagef("--since and --since-revision: give one")
	case o.until != "" && o.untilRevision != 0:
		return f, usagef("--until and --until-revision: give one")
	case o.sinceRevision < 0 || o.untilRevision < 0:
		return f, usagef("--since-revision and --until-revision must be positive")
	case o.untilRevision != 0 && o.untilRevision < o.sinceRevision:
		return f, usagef("--until-revision %d is before --since-revision %d", o.untilRevision, o.sinceRevision)
	}
	if o.since != "" {
		if f.since, err = parseWhen("since", o.since, now); err != nil {
			return f, err
		}
	}
	if o.until != "" {
		if f.until, err = parseWhen("until", o.until, now); err != nil {
			return f, err
		}
	}
	if !f.since.IsZero() && !f.until.IsZero() && f.until.Before(f.since) {
		return f, usagef("--until %s is before --since %s", f.until.Format(time.RFC3339), f.since.Format(time.RFC3339))
	}
	return f, nil
}

// segmentWanted reports whether a segment's revisions can hold a match.
func (f changeFilter) segmentWanted(si repository.SegmentInfo) bool {
	return (f.fromRev == 0 || si.Last >= f.fromRev) && (f.toRev == 0 || si.First <= f.toRev)
}

func (f changeFilter) revisionWanted(r *repository.Revision) bool {
	return (f.fromRev == 0 || r.Revision >= f.fromRev) && (f.toRev == 0 || r.Revision <= f.toRev) &&
		(f.since.IsZero() || !r.Received.Before(f.since)) && (f.until.IsZero() || !r.Received.After(f.until))
}

// loggedChange is one operation in `lifeboat log -o json`.
type loggedChange struct {
	Generation string    `json:"generation"`
	Revision   int64     `json:"revision"`
	Sub        int       `json:"sub_revision"`
	Received   time.Time `json:"received"`
	Op         string    `json:"op"` // put or delete
	Key        string    `json:"key"`
	// KeyBase64 is the key's bytes when they are not UTF-8 (Key then
	// holds them with replacement characters).
	KeyBase64 []byte `json:"key_base64,omitempty"`
	ValueSize int    `json:"value_size"`
	// For a put: the key's version after it, its create revision and
	// lease (0: none).
	Version        int64 `json:"version,omitempty"`
	CreateRevision int64 `json:"create_revision,omitempty"`
	Lease          int64 `json:"lease,omitempty"`
}

// recoverableWindows lists the windows, or the one of generation gen
// (an error naming the generations when it is not there).
func recoverableWindows(ctx context.Context, b *repository.Repo, gen string) ([]repository.Window, error) {
	l, err := b.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	ws, err := b.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("list capture windows: %w", err)
	}
	if gen == "" {
		return ws, nil
	}
	var names []string
	for _, w := range ws {
		if w.Generation == gen {
			return []repository.Window{w}, nil
		}
		names = append(names, w.Generation)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("generation %s: the store holds no capture generation of cluster %q", gen, b.Cluster)
	}
	return nil, fmt.Errorf("generation %s: not in the store; its generations are %s", gen, strings.Join(names, ", "))
}

// needIdentity fails when segment si is encrypted and no identity was
// given, naming the recipients of its anchor and what to pass.
func needIdentity(si repository.SegmentInfo, w *repository.Window, ids []age.Identity) error {
	if si.Encryption != "age" || len(ids) > 0 {
		return nil
	}
	to := "its recipients"
	if w.Anchor != nil && len(w.Anchor.Recipients) > 0 {
		to = strings.Join(w.Anchor.Recipients, ", ")
	}
	return &ConfigError{Key: "encryption.identity_file", Err: fmt.Errorf(
		"segment %s is encrypted with age (to %s): pass --identity-file (or encryption.identity_file, LIFEBOAT_ENCRYPTION_IDENTITY_FILE) with the matching age identity", si.Object.Key, to)}
}

func runLog(ctx context.Context, cfg *Config, lg *slog.Logger, o logOptions, out io.Writer, now time.Time) error {
	f, err := o.filter(now)
	if err != nil {
		return err
	}
	b, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	ids, err := identities(cfg)
	if err != nil {
		return err
	}
	ws, err := recoverableWindows(ctx, b, o.generation)
	if err != nil {
		return err
	}
	p := newChangePrinter(out, o.output == "json")
	p.generations = len(ws) > 1
	for i := range ws {
		w := &ws[i]
		for _, si := range w.Segments {
			if !f.segmentWanted(si) {
				continue
			}
			if err := needIdentity(si, w, ids); err != nil {
				return err
			}
			// One segment in memory at a time: a segment is bounded by
			// the writer's size bound.
			s, _, err := b.ReadSegment(ctx, si, ids)
			if err != nil {
				return err
			}
			for j := range s.Revisions {
				r := &s.Revisions[j]
				if !f.revisionWanted(r) {
					continue
				}
				for k, op := range r.Ops {
					if bytes.HasPrefix(op.Key, f.prefix) {
						if err := p.print(w.Generation, r, k, &op); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return p.end()
}

// changePrinter streams changes as a table or a JSON array.
type changePrinter struct {
	out  io.Writer
	json bool
	n    int
	// generations: name each generation in the table before its first
	// row (revisions of two generations can repeat after a restore of
	// the cluster).
	generations bool
	lastGen     string
}

func newChangePrinter(out io.Writer, asJSON bool) *changePrinter {
	return &changePrinter{out: out, json: asJSON}
}

// Fixed-width columns: rows are printed as segments are read, never
// held to align them.
const changeRow = "%-10s %-24s %-6s %9s  %-28s %-20s %s\n"

func (p *changePrinter) print(gen string, r *repository.Revision, sub int, op *repository.Op) error {
	if p.json {
		c := loggedChange{Generation: gen, Revision: r.Revision, Sub: sub, Received: r.Received.UTC(), Op: "put",
			Key: string(op.Key), ValueSize: len(op.Value), Version: op.Version, CreateRevision: op.CreateRevision, Lease: op.Lease}
		if op.Delete {
			c.Op, c.Version, c.CreateRevision, c.Lease = "delete", 0, 0, 0
		}
		if !utf8.Valid(op.Key) {
			c.KeyBase64 = op.Key
		}
		data, err := json.Marshal(c)
		if err != nil {
			return err
		}
		sep := ",\n  "
		if p.n == 0 {
			sep = "[\n  "
		}
		p.n++
		_, err = fmt.Fprintf(p.out, "%s%s", sep, data)
		return err
	}
	if p.n == 0 {
		fmt.Fprintf(p.out, changeRow, "REVISION", "RECEIVED", "OP", "SIZE", "RESOURCE", "NAMESPACE", "NAME")
	}
	if p.generations && gen != p.lastGen {
		fmt.Fprintf(p.out, "# generation %s\n", gen)
		p.lastGen = gen
	}
	p.n++
	kind, size := "PUT", units.Bytes(int64(len(op.Value)))
	if op.Delete {
		kind, size = "DELETE", "-"
	}
	res, ns, name := splitKubernetesKey(op.Key)
	_, err := fmt.Fprintf(p.out, changeRow, fmt.Sprint(r.Revision), r.Received.UTC().Format("2006-01-02T15:04:05.000Z"), kind, size, res, ns, name)
	return err
}

func (p *changePrinter) end() error {
	if p.json {
		if p.n == 0 {
			_, err := fmt.Fprintln(p.out, "[]")
			return err
		}
		_, err := fmt.Fprintln(p.out, "\n]")
		return err
	}
	if p.n == 0 {
		_, err := fmt.Fprintln(p.out, "no captured change matches")
		return err
	}
	return nil
}

// splitKubernetesKey splits /registry/<resource>/<namespace>/<name>
// (namespaced), /registry/<resource>/<name> (cluster-scoped) and
// /registry/<group>/<resource>/<namespace>/<name> (a group, named with
// a dot) into columns; any other key is "-", "-", the key (quoted when
// it is not printable UTF-8).
func splitKubernetesKey(key []byte) (resource, namespace, name string) {
	k := string(key)
	if !utf8.ValidString(k) || strings.ContainsFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "-", "-", fmt.Sprintf("%q", k)
	}
	rest, ok := strings.CutPrefix(k, "/registry/")
	if !ok {
		return "-", "-", k
	}
	parts := strings.Split(rest, "/")
	if len(parts) >= 3 && strings.Contains(parts[0], ".") {
		parts = append([]string{parts[0] + "/" + parts[1]}, parts[2:]...)
	}
	switch len(parts) {
	case 2:
		return parts[0], "", parts[1]
	case 3:
		return parts[0], parts[1], parts[2]
	}
	return "-", "-", k
}
