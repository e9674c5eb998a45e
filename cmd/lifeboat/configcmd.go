package main

import (
	"fmt"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/repository"

	"github.com/spf13/cobra"
)

func newConfigCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
	}
	c.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Validate the configuration and print the effective values, secrets redacted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConfigCheck(a)
		},
	})
	return c
}

func runConfigCheck(a *app) error {
	cfg, err := a.config()
	if err != nil {
		return err
	}
	enc, err := encodingFromConfig(cfg)
	if err != nil {
		return err
	}
	ids, err := identities(cfg)
	if err != nil {
		return err
	}
	out, err := cfg.Redacted()
	if err != nil {
		return err
	}
	fmt.Fprint(a.stdout, "# effective configuration (secrets redacted)\n"+out)
	for _, w := range append(encryptionWarnings(enc, ids), trustWarnings(cfg, enc)...) {
		fmt.Fprintln(a.stderr, "WARNING: "+w)
	}
	return nil
}

// trustWarnings reports trust settings that leave what the store says
// unchecked, or that are meant to be on only for a while.
func trustWarnings(cfg *Config, enc repository.Encoding) []string {
	var out []string
	if len(enc.Recipients) > 0 && cfg.Signing.KeyFile == "" && len(cfg.Signing.TrustedKeys) == 0 {
		out = append(out, "encryption without signing: anyone with the store's credentials can plant a backup encrypted to your public recipient; see docs/security.md "+
			"(lifeboat keygen -o FILE, then signing.key_file on the writers and signing.trusted_keys on the readers)")
	}
	if cfg.Signing.AllowUnsigned {
		out = append(out, "signing.allow_unsigned is on: unsigned backups, drill reports and progress markers are read, and their origin is not proven; "+
			"turn it off once every retained backup is signed")
	}
	if id := cfg.Lineage.AdoptCluster; id != "" {
		out = append(out, fmt.Sprintf("lineage.adopt_cluster is set (%s): remove it once the adopting snapshot is stored; "+
			"while it is set, snapshots of etcd cluster %s skip the lineage check and supersede every other lineage under the name", id, id))
	}
	return out
}

// encryptionWarnings reports encryption set up so that this host cannot
// read its own backups back (verify, restore and drills would fail).
func encryptionWarnings(enc repository.Encoding, ids []age.Identity) []string {
	if len(enc.Recipients) == 0 {
		return nil
	}
	if len(ids) == 0 {
		return []string{"backups are encrypted but encryption.identity_file is not set: verify, restore and drills cannot read them on this host; keep the identity somewhere safe and set it where they run"}
	}
	want := map[string]bool{}
	for _, k := range enc.RecipientKeys {
		want[k] = true
	}
	for _, id := range ids {
		if x, ok := id.(*age.X25519Identity); ok && want[x.Recipient().String()] {
			return nil
		}
	}
	return []string{"encryption.identity_file matches none of encryption.recipients: backups written with this configuration cannot be decrypted with it"}
}
