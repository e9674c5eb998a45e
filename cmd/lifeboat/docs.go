package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// configDocPath is the configuration reference, generated from the option
// table between the markers (prose around them is kept).
const configDocPath = "docs/configuration.md"

// The markers of the generated region (deploy's TestDocsGeneratedOptionsMarkers
// checks them too).
const (
	docBegin = "<!-- BEGIN GENERATED OPTIONS -->"
	docEnd   = "<!-- END GENERATED OPTIONS -->"
	docNote  = "<!-- generated from cmd/lifeboat/options.go: edit the table there, then run `go test ./cmd/lifeboat -run TestDocs -update` (or `lifeboat docs`) -->"
)

// newDocsCmd is the hidden command that rewrites docs/configuration.md
// from the option table (run in the repository's root).
func newDocsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:    "docs [FILE]",
		Short:  "Write the configuration reference from the option table (internal)",
		Hidden: true,
		Args:   cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := configDocPath
			if len(args) == 1 {
				path = args[0]
			}
			return updateConfigDoc(path)
		},
	}
}

// updateConfigDoc writes the generated reference into path, between the
// markers; a file without them gets them appended.
func updateConfigDoc(path string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(spliceConfigDoc(string(old))), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// spliceConfigDoc replaces the generated region of doc (or appends one).
func spliceConfigDoc(doc string) string {
	gen := docBegin + "\n" + docNote + "\n" + configReference() + docEnd + "\n"
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		if doc == "" {
			doc = "# Configuration\n\n"
		} else if !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + gen
	}
	return doc[:i] + gen + strings.TrimPrefix(doc[j+len(docEnd):], "\n")
}

// configReference renders the option table as Markdown: one table per
// group, and which commands take its flags.
func configReference() string {
	var b strings.Builder
	b.WriteString("Types: `duration` takes Go's `90s`, `1h30m` and also `d`, `w`, `y` (`30d`); `size` takes bytes with binary units (`8MiB`, `8 MiB`, `8M`); `strings` is a YAML list in the file, comma-separated in the environment, a repeatable (or comma-separated) flag. A command shows the flags of its groups in `--help`, and only those it reads: the writers' `--recipient`, `--recipients-file`, `--adopt-cluster` and `--s3-create-bucket` are `snapshot`'s, the agent's and the demo's (`--s3-create-bucket` also `copy`'s), and a reader never creates a bucket; every command that reads the store also takes the etcd, store, upload, encryption, spool and drill flags (hidden where they are not its own), so one set of flags serves them all.\n")
	var c Config
	opts := options(&c)
	for _, g := range groupNames {
		var rows []option
		for _, o := range opts {
			if o.section() == g.g {
				rows = append(rows, o)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n\n", g.title)
		if g.doc != "" {
			b.WriteString(g.doc + "\n\n")
		}
		var cmds []string
		for _, name := range []string{"snapshot", "list", "verify", "fetch", "restore", "drill", "prune", "scrub", "copy", "ls", "get", "diff", "demo", "agent", "fleet status", "fleet serve"} {
			if commandGroups[name]&g.g != 0 {
				cmds = append(cmds, "`"+name+"`")
			}
		}
		if g.g == groupGlobal {
			b.WriteString("Flags of every command.\n\n")
		} else {
			fmt.Fprintf(&b, "Flags of %s and `config check`.\n\n", strings.Join(cmds, ", "))
		}
		b.WriteString("| key | flag | environment | type | default | description |\n|---|---|---|---|---|---|\n")
		for _, o := range rows {
			env := make([]string, 0, 2)
			for _, e := range o.envNames() {
				env = append(env, "`"+e+"`")
			}
			def := ""
			if o.Default != "" {
				def = "`" + o.Default + "`"
			}
			help := o.Help
			if o.Doc != "" {
				help += "; " + o.Doc
			}
			if isSecret(o.field.Type()) {
				help += " (secret: redacted)"
			}
			fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s | %s | %s |\n", o.key, o.Flag, strings.Join(env, " "), typeName(o.field.Type()), def, mdEscape(help))
		}
	}
	return b.String()
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
