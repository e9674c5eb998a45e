package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
)

func newKitCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "kit",
		Short: "The recovery kit: the files outside etcd (PKI, encryption config) a restore on new hosts needs",
		Long: `The recovery kit holds the files a restore on new hosts needs besides the
snapshot (kit.paths: kubeadm, k3s, or files and directories), stored encrypted
with every backup. See docs/kit.md.`,
	}
	c.AddCommand(newKitListCmd(a), newKitShowCmd(a), newKitVerifyCmd(a), newKitRestoreCmd(a))
	return c
}

func newKitListCmd(a *app) *cobra.Command {
	var listOut string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the recovery kits in the store, oldest first, with the backups that name each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(listOut); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runKitList(cmd.Context(), cfg, a.logger(cfg), listOut, a.stdout)
		},
	}
	addOutputFlag(list, &listOut, "table or json")
	return list
}

func newKitShowCmd(a *app) *cobra.Command {
	var showOut string
	show := &cobra.Command{
		Use:   "show [KIT|BACKUP|latest]",
		Short: "Show a kit's files and certificates; with --identity-file also decrypt and check it",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(showOut); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runKitShow(cmd.Context(), cfg, a.logger(cfg), refArg(args), showOut, a.stdout)
		},
	}
	addOutputFlag(show, &showOut, "table or json")
	return show
}

func newKitVerifyCmd(a *app) *cobra.Command {
	verify := &cobra.Command{
		Use:   "verify [KIT|BACKUP|latest]",
		Short: "Check a kit: decrypt it, its content against its id, every certificate and key parses, pairs match; exit 1 on failure",
		Long: `Fetches the kit, checks the object's size and sha256 against its manifest,
decrypts it (--identity-file), checks the archive's sha256 against the kit's
id, parses every certificate and key and checks that each certificate (or
public key) matches the private key beside it (ca.crt and ca.key, sa.pub and
sa.key): what a drill checks of a backup's kit. latest (the default) is the
kit of the newest backup that names one. Exit 1 when any check fails, 2
without an identity.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runKitVerify(cmd.Context(), cfg, a.logger(cfg), refArg(args), a.stdout)
		},
	}
	return verify
}

func newKitRestoreCmd(a *app) *cobra.Command {
	var ro kitRestoreOptions
	rest := &cobra.Command{
		Use:   "restore [KIT|BACKUP|latest] --to DIR",
		Short: "Write a kit's files below DIR at their original paths (--to / puts them back in place)",
		Long: `Writes each file of the kit at DIR joined with its original absolute path, with
its mode (and owner, when running as root). Nothing that exists is overwritten:
without --force the restore refuses before writing anything; --force moves what
is in the way aside to <path>.lifeboat-old-<time>. --dry-run lists what would
be written. latest (the default) is the kit of the newest backup that names one;
a backup id gives that backup's kit.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ro.to == "" {
				return usagef("kit restore: --to DIR is required (--to / puts the files back in place)")
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			ro.ref = refArg(args)
			return runKitRestore(cmd.Context(), cfg, a.logger(cfg), ro, a.stdout, time.Now())
		},
	}
	rest.Flags().StringVar(&ro.to, "to", "", "directory the files go below, at their original paths (/ for in place)")
	rest.Flags().BoolVar(&ro.dryRun, "dry-run", false, "list what would be written; write nothing")
	rest.Flags().BoolVar(&ro.force, "force", false, "move what is in the way aside to <path>.lifeboat-old-<time> instead of refusing")
	return rest
}

func refArg(args []string) string {
	if len(args) == 0 {
		return "latest"
	}
	return args[0]
}

type kitRestoreOptions struct {
	ref, to       string
	dryRun, force bool
}

// kitArea lists the kits and the backups of cfg's cluster.
type kitArea struct {
	repo    kit.Repo
	kits    *kit.Listing
	backups *repository.Listing
	// namedBy are the backups naming each kit, newest first.
	namedBy map[string][]string
}

func openKits(ctx context.Context, cfg *Config, lg *slog.Logger) (*kitArea, error) {
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	a := &kitArea{repo: kit.Repo{Store: backups.Store, Cluster: cfg.Cluster, Signer: backups.Signer, Trust: backups.Trust}, namedBy: map[string][]string{}}
	if a.kits, err = a.repo.List(ctx); err != nil {
		return nil, err
	}
	if a.backups, err = backups.List(ctx); err != nil {
		return nil, err
	}
	for _, e := range a.backups.Backups {
		if e.Manifest.Kit != "" {
			a.namedBy[e.Manifest.Kit] = append(a.namedBy[e.Manifest.Kit], e.Manifest.ID)
		}
	}
	return a, nil
}

// openKit opens the kit area, resolves ref (see find) and reads the
// identities; needIdentity makes their absence a configuration error
// (exit 2): the kit is encrypted.
func openKit(ctx context.Context, cfg *Config, lg *slog.Logger, ref string, needIdentity bool) (*kitArea, *kit.Manifest, []age.Identity, error) {
	a, err := openKits(ctx, cfg, lg)
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := a.find(ref)
	if err != nil {
		return nil, nil, nil, err
	}
	ids, err := identities(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if needIdentity && len(ids) == 0 {
		return nil, nil, nil, cfgErr("encryption.identity_file", "%v", kit.ErrNoIdentity)
	}
	return a, m, ids, nil
}

// find resolves a kit id (or prefix), a backup id, or latest: the kit of
// the newest backup that names one, else the newest kit.
func (a *kitArea) find(ref string) (*kit.Manifest, error) {
	if repository.ValidID(ref) {
		for _, e := range a.backups.Backups {
			if e.Manifest.ID == ref {
				if e.Manifest.Kit == "" {
					return nil, fmt.Errorf("backup %s has no recovery kit (it was taken without kit.paths): %w", ref, kit.ErrNotFound)
				}
				return a.kits.Find(e.Manifest.Kit)
			}
		}
		return nil, fmt.Errorf("backup %s: %w", ref, repository.ErrNoBackups)
	}
	if ref == "latest" {
		for _, e := range a.backups.Backups { // newest first
			if e.Manifest.Kit != "" {
				return a.kits.Find(e.Manifest.Kit)
			}
		}
	}
	return a.kits.Find(ref)
}

type listedKit struct {
	*kit.Manifest
	Backups []string `json:"backups"`
}

func earliest(m *kit.Manifest) (time.Time, string) {
	var t time.Time
	var p string
	for _, c := range m.Certificates {
		if t.IsZero() || c.NotAfter.Before(t) {
			t, p = c.NotAfter, c.Path
		}
	}
	return t, p
}

func runKitList(ctx context.Context, cfg *Config, lg *slog.Logger, output string, out io.Writer) error {
	a, err := openKits(ctx, cfg, lg)
	if err != nil {
		return err
	}
	if output == "json" {
		rows := []listedKit{}
		for _, m := range a.kits.Kits {
			rows = append(rows, listedKit{Manifest: m, Backups: append([]string{}, a.namedBy[m.ID]...)})
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(a.kits.Kits) == 0 {
		fmt.Fprintf(out, "no recovery kit in %s (cluster %s): set kit.paths (kubeadm, k3s or paths) and take a backup\n", a.repo.Store, cfg.Cluster)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIT\tCREATED\tFILES\tCERTS\tFIRST EXPIRY\tBACKUPS\tPATHS")
	for _, m := range a.kits.Kits {
		exp, _ := earliest(m)
		expiry := "-"
		if !exp.IsZero() {
			expiry = exp.UTC().Format(time.DateOnly)
		}
		files := 0
		for _, f := range m.Files {
			if f.Type == kit.TypeFile {
				files++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\n", m.ID[:12], m.CreatedAt.UTC().Format(time.RFC3339), files, len(m.Certificates), expiry, len(a.namedBy[m.ID]), strings.Join(m.Paths, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, o := range a.kits.Orphans {
		fmt.Fprintf(out, "orphan kit object (no manifest; prune removes it): %s\n", o.Key)
	}
	for _, o := range a.kits.Unreadable {
		fmt.Fprintf(out, "unreadable kit manifest: %s\n", o.Key)
	}
	for _, o := range a.kits.Untrusted {
		fmt.Fprintf(out, "untrusted kit manifest (not signed by a trusted key: never shown, verified or restored; docs/security.md): %s\n", o.Key)
	}
	return nil
}

type shownKit struct {
	listedKit
	Check *kit.CheckResult `json:"check,omitempty"`
	// CheckError is why the kit could not be checked or what is wrong.
	CheckError string `json:"check_error,omitempty"`
}

func runKitShow(ctx context.Context, cfg *Config, lg *slog.Logger, ref, output string, out io.Writer) error {
	a, m, ids, err := openKit(ctx, cfg, lg, ref, false)
	if err != nil {
		return err
	}
	s := shownKit{listedKit: listedKit{Manifest: m, Backups: append([]string{}, a.namedBy[m.ID]...)}}
	var checkErr error
	if len(ids) > 0 {
		s.Check, checkErr = a.check(ctx, m, ids)
		if checkErr != nil {
			s.CheckError = checkErr.Error()
		}
	}
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return err
		}
		return checkErr
	}
	writeKitHeader(out, s)
	writeKitFiles(out, s.Manifest)
	writeKitCertificates(out, s.Manifest)
	writeKitCheck(out, s, len(ids) > 0, checkErr)
	return checkErr
}

// writeKitHeader prints what the manifest says of kit s and the backups
// that name it.
func writeKitHeader(out io.Writer, s shownKit) {
	m := s.Manifest
	fmt.Fprintf(out, "kit %s\n", m.ID)
	fmt.Fprintf(out, "  created     %s\n", m.CreatedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "  paths       %s\n", strings.Join(m.Paths, ", "))
	fmt.Fprintf(out, "  object      %s (%s, %s, encrypted to %s)\n", m.Object, units.Bytes(m.ObjectSize), m.Compression, strings.Join(m.Recipients, ", "))
	fmt.Fprintf(out, "  backups     %d", len(s.Backups))
	if len(s.Backups) > 0 {
		fmt.Fprintf(out, " (newest %s)", s.Backups[0])
	}
	fmt.Fprintln(out)
}

// writeKitFiles prints the kit's entries as a table.
func writeKitFiles(out io.Writer, m *kit.Manifest) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODE\tOWNER\tSIZE\tPATH")
	for _, f := range m.Files {
		p := f.Path
		switch f.Type {
		case kit.TypeDir:
			p += "/"
		case kit.TypeSymlink:
			p += " -> " + f.Link
		}
		fmt.Fprintf(tw, "  %s\t%d:%d\t%d\t%s\n", modeString(f), f.UID, f.GID, f.Size, p)
	}
	_ = tw.Flush()
}

// writeKitCertificates prints the certificates found in the kit, if any.
func writeKitCertificates(out io.Writer, m *kit.Manifest) {
	if len(m.Certificates) > 0 {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  EXPIRES\tCA\tSUBJECT\tFILE")
		for _, c := range m.Certificates {
			ca := ""
			if c.IsCA {
				ca = "CA"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.NotAfter.UTC().Format(time.RFC3339), ca, c.Subject, c.Path)
		}
		_ = tw.Flush()
	}
}

// writeKitCheck prints the outcome of decrypting and checking the kit.
func writeKitCheck(out io.Writer, s shownKit, decrypted bool, checkErr error) {
	switch {
	case !decrypted:
		fmt.Fprintln(out, "  not decrypted: give --identity-file to decrypt the kit and check its certificates and keys")
	case checkErr != nil:
		fmt.Fprintf(out, "  check FAILED: %v\n", checkErr)
	default:
		printKitCheck(out, s.Check)
	}
}

// check fetches, decrypts and parses the kit m describes (its object
// against the manifest, its content against its id) and checks its
// certificates and keys, as a drill does. The result is nil when the kit
// could not be read.
func (a *kitArea) check(ctx context.Context, m *kit.Manifest, ids []age.Identity) (*kit.CheckResult, error) {
	k, err := a.repo.Load(ctx, m, ids)
	if err != nil {
		return nil, err
	}
	res, err := k.Check()
	return &res, err
}

// printKitCheck prints what a successful check found.
func printKitCheck(out io.Writer, res *kit.CheckResult) {
	fmt.Fprintf(out, "  checked     decrypted; %d files, %d certificates and %d keys parse; %d pairs match (%s)\n",
		res.Files, res.Certificates, res.Keys, len(res.Pairs), strings.Join(res.Pairs, ", "))
	if !res.EarliestExpiry.IsZero() {
		fmt.Fprintf(out, "  first expiry %s (%s)\n", res.EarliestExpiry.Format(time.RFC3339), res.EarliestPath)
	}
}

// errKitBad is returned (exit 1) when kit verify found the kit damaged,
// undecryptable or with certificates and keys that fail the check.
var errKitBad = errors.New("recovery kit failed verification")

// runKitVerify checks one kit and says whether it is good.
func runKitVerify(ctx context.Context, cfg *Config, lg *slog.Logger, ref string, out io.Writer) error {
	a, m, ids, err := openKit(ctx, cfg, lg, ref, true)
	if err != nil {
		return err
	}
	res, err := a.check(ctx, m, ids)
	if err != nil {
		fmt.Fprintf(out, "kit %s FAILED: %v\n", m.ID, err)
		return fmt.Errorf("%w: %w", errKitBad, err)
	}
	fmt.Fprintf(out, "kit %s is good (%s, named by %d backups)\n", m.ID, m.Object, len(a.namedBy[m.ID]))
	printKitCheck(out, res)
	return nil
}

func modeString(e kit.Entry) string {
	s := e.Mode.String()
	switch e.Type {
	case kit.TypeDir:
		return "d" + s[1:]
	case kit.TypeSymlink:
		return "l" + s[1:]
	}
	return s
}

func runKitRestore(ctx context.Context, cfg *Config, lg *slog.Logger, o kitRestoreOptions, out io.Writer, now time.Time) error {
	a, m, ids, err := openKit(ctx, cfg, lg, o.ref, true)
	if err != nil {
		return err
	}
	k, err := a.repo.Load(ctx, m, ids)
	if err != nil {
		return err
	}
	res, err := kit.Restore(o.to, k, kit.RestoreOptions{Force: o.force, DryRun: o.dryRun, Now: now})
	if res != nil {
		verb := "restoring"
		if o.dryRun {
			verb = "would restore"
		}
		fmt.Fprintf(out, "%s kit %s (%d entries) below %s\n", verb, m.ID, len(res.Planned), o.to)
		for _, p := range res.Planned {
			line := fmt.Sprintf("  %-7s %s %d:%d %s", p.Action, modeString(p.Entry), p.UID, p.GID, p.Target)
			if p.Parent {
				line += " (not a directory, and the kit has entries below it)"
			}
			if p.Aside != "" {
				line += " (the old one moved to " + p.Aside + ")"
			} else if p.Action == kit.ActionReplace && o.dryRun {
				line += " (the old one would be moved aside)"
			}
			fmt.Fprintln(out, line)
		}
		if !res.Owners {
			fmt.Fprintf(out, "not running as root: the files belong to uid %d, not to the owners listed (chown them as root, or restore as root)\n", os.Geteuid())
		}
	}
	if err != nil {
		if errors.Is(err, kit.ErrExists) {
			return fmt.Errorf("%w", err)
		}
		return err
	}
	if !o.dryRun {
		fmt.Fprintf(out, "kit %s restored below %s\n", m.ID, o.to)
	}
	return nil
}

// printKitHint tells a restore of a backup with a recovery kit how to lay
// the kit out: on new hosts the PKI and encryption config come from it.
func printKitHint(out io.Writer, m *repository.Manifest) {
	if m.Kit == "" {
		return
	}
	fmt.Fprintf(out, "this backup's recovery kit is %s: on new hosts, `lifeboat kit restore %s --to /` lays back its PKI and encryption config (--dry-run lists them)\n", m.Kit[:12], m.ID)
}
