package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/inspect"
)

type getOptions struct {
	source, key, output string
	prefix, forApply    bool
	keepOwners          bool // --keep-owner-references
	atRevision          int64
	atTime              string
}

func newGetCmd(a *app) *cobra.Command {
	var o getOptions
	c := &cobra.Command{
		Use:   "get SOURCE|--at-revision R|--at-time T KEY",
		Short: "Print a key's value as it was in a backup, Kubernetes objects decoded (YAML, JSON or raw)",
		Long: `get prints the value of KEY in a backup's snapshot. SOURCE is a backup id,
latest, latest-proven, or a point in time (@R or --at-revision R, @T or
--at-time T: see lifeboat ls --help). Kubernetes objects stored as protobuf are decoded
with the Kubernetes scheme; JSON values pass through; other values print as
a document with their size and bytes (-o raw prints the bytes alone).

--prefix prints every key under KEY (YAML documents, or a JSON List); a
value that cannot be decrypted (KMS, no or a wrong --encryption-config) is
said on stderr (and as a YAML comment) and skipped; one that cannot be
decoded too, and then get exits 1 at the end. --for-apply drops the fields the API server sets
(resourceVersion, uid, creationTimestamp, managedFields, generation,
selfLink, status), so that kubectl apply -f - recreates the object, and
metadata.ownerReferences: they name owners by uid, and the garbage
collector deletes an applied object whose owner's uid is gone. Each
dropped owner is named on stderr (and as a YAML comment);
--keep-owner-references keeps them (the owner restored first, or still there).

Values encrypted at rest by kube-apiserver are decrypted with
--encryption-config (the apiserver's EncryptionConfiguration: aescbc, aesgcm,
secretbox); KMS-encrypted values cannot be decrypted offline. A key with no
value at the backup's revision exits 1: "not found at revision R".`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			at, err := atSource(o.atRevision, o.atTime)
			if err != nil {
				return err
			}
			if at != "" {
				args = append([]string{at}, args...)
			}
			if len(args) != 2 {
				return usagef("give SOURCE (a backup id, latest, latest-proven, @R or @T, or --at-revision/--at-time) and KEY")
			}
			switch o.output {
			case "yaml", "json", "raw":
			default:
				return usagef("--output %q: use yaml, json or raw", o.output)
			}
			if o.forApply && o.output == "raw" {
				return usagef("--for-apply prints YAML or JSON, not raw")
			}
			if o.keepOwners && !o.forApply {
				return usagef("--keep-owner-references goes with --for-apply (without it, get keeps every field)")
			}
			o.source, o.key = args[0], args[1]
			if err := checkSource(o.source); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runGet(cmd.Context(), a, cfg, a.logger(cfg), o)
		},
	}
	f := c.Flags()
	f.StringVarP(&o.output, "output", "o", "yaml", "yaml, json or raw")
	f.BoolVar(&o.prefix, "prefix", false, "every key under KEY")
	f.BoolVar(&o.forApply, "for-apply", false, "drop server-set fields and owner references, for kubectl apply -f -")
	f.BoolVar(&o.keepOwners, "keep-owner-references", false, "with --for-apply, keep metadata.ownerReferences")
	addAtFlags(c, &o.atRevision, &o.atTime)
	return c
}

// errSkipped says get --prefix skipped values it could not show.
var errSkipped = errors.New("some values could not be shown")

func runGet(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o getOptions) error {
	s, err := openSource(ctx, a, cfg, lg, o.source)
	if err != nil {
		return err
	}
	defer s.Close()
	if !o.prefix {
		v, err := s.Get(ctx, o.key)
		if err != nil {
			return fmt.Errorf("backup %s: %w", s.ID, err)
		}
		b, dropped, err := inspect.Render(v, o.output, o.apply())
		if err != nil {
			return fmt.Errorf("backup %s: %s: %w", s.ID, o.key, err)
		}
		if o.output == "yaml" {
			fmt.Fprintf(a.stdout, "# %s at revision %d (backup %s), mod revision %d\n", v.Key, s.Revision, s.ID, v.ModRevision)
		}
		sayDropped(a.stdout, a.stderr, o, v.Key, dropped)
		_, err = a.stdout.Write(b)
		return err
	}
	var entries []inspect.Entry
	if err := s.List(o.key, func(e *inspect.Entry) error { entries = append(entries, *e); return nil }); err != nil {
		return err
	}
	return writeValues(ctx, a.stdout, a.stderr, s, entries, o)
}

func writeValues(ctx context.Context, out, stderr io.Writer, s *inspect.Snapshot, entries []inspect.Entry, o getOptions) error {
	skipped := 0
	var items []json.RawMessage
	for i, e := range entries {
		v, err := s.Value(ctx, e)
		if err != nil {
			return err
		}
		b, dropped, err := inspect.Render(v, o.output, o.apply())
		if err != nil {
			// A value encrypted with a key this machine does not hold
			// (KMS, or no --encryption-config) is said per value; the
			// listing goes on and succeeds. Anything else fails it.
			if !errors.Is(err, inspect.ErrEncrypted) {
				skipped++
			}
			fmt.Fprintf(stderr, "%s: %v\n", e.Key, err)
			if o.output == "yaml" {
				fmt.Fprintf(out, "# %s: %v\n", e.Key, err)
			}
			continue
		}
		switch o.output {
		case "json":
			items = append(items, json.RawMessage(bytes.TrimSpace(b)))
			sayDropped(out, stderr, o, e.Key, dropped)
		case "yaml":
			if i > 0 {
				io.WriteString(out, "---\n")
			}
			fmt.Fprintf(out, "# %s, mod revision %d\n", e.Key, e.ModRevision)
			sayDropped(out, stderr, o, e.Key, dropped)
			out.Write(b)
		default:
			out.Write(b)
		}
	}
	if o.output == "json" {
		if items == nil {
			items = []json.RawMessage{}
		}
		b, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
		if err != nil {
			return err
		}
		out.Write(append(b, '\n'))
	}
	if skipped > 0 {
		return fmt.Errorf("backup %s: %d of %d values under %q could not be decoded: %w (see above)", s.ID, skipped, len(entries), o.key, errSkipped)
	}
	return nil
}

// apply is how inspect.Render prepares objects: nil without --for-apply.
func (o getOptions) apply() *inspect.Apply {
	if !o.forApply {
		return nil
	}
	return &inspect.Apply{KeepOwnerReferences: o.keepOwners}
}

// sayDropped names the owner references --for-apply dropped from key's
// object: on stderr, and as a YAML comment before the document (JSON
// output stays one object or List).
func sayDropped(out, stderr io.Writer, o getOptions, key string, dropped []inspect.Owner) {
	if len(dropped) == 0 {
		return
	}
	names := make([]string, len(dropped))
	for i, d := range dropped {
		names[i] = d.String()
	}
	list := strings.Join(names, ", ")
	fmt.Fprintf(stderr, "%s: dropped metadata.ownerReferences: %s (applied with an owner that is gone, the object would be garbage collected; --keep-owner-references keeps them)\n", key, list)
	if o.output == "yaml" {
		fmt.Fprintf(out, "# dropped metadata.ownerReferences: %s (--keep-owner-references keeps them)\n", list)
	}
}
