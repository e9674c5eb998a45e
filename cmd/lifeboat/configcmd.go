package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"

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
	cfg, locate, err := a.checkedConfig()
	if err != nil {
		return err
	}
	if err := checkTLSFiles(cfg.Etcd); err != nil {
		return locate(err)
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

// checkTLSFiles opens etcd's TLS files as a connection would: the CA
// bundle parses, the certificate and key load and are a pair. The error
// names the key and the file.
func checkTLSFiles(e EtcdConfig) error {
	if e.CACert != "" {
		data, err := os.ReadFile(e.CACert)
		if err != nil {
			return cfgErr("etcd.cacert", "cannot read %s: %w", e.CACert, err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			return cfgErr("etcd.cacert", "%s holds no PEM certificate", e.CACert)
		}
	}
	if e.Cert == "" || e.Key == "" {
		return nil // Validate refuses one without the other
	}
	certPEM, err := os.ReadFile(e.Cert)
	if err != nil {
		return cfgErr("etcd.cert", "cannot read %s: %w", e.Cert, err)
	}
	if !holdsPEM(certPEM, func(b *pem.Block) bool {
		_, err := x509.ParseCertificate(b.Bytes)
		return b.Type == "CERTIFICATE" && err == nil
	}) {
		return cfgErr("etcd.cert", "%s holds no PEM certificate", e.Cert)
	}
	keyPEM, err := os.ReadFile(e.Key)
	if err != nil {
		return cfgErr("etcd.key", "cannot read %s: %w", e.Key, err)
	}
	if !holdsPEM(keyPEM, func(b *pem.Block) bool { return strings.HasSuffix(b.Type, "PRIVATE KEY") }) {
		return cfgErr("etcd.key", "%s holds no PEM private key", e.Key)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return cfgErr("etcd.key", "%s is not the private key of etcd.cert %s", e.Key, e.Cert)
		}
		return cfgErr("etcd.key", "%s with etcd.cert %s: %v", e.Key, e.Cert, err)
	}
	return nil
}

// holdsPEM reports whether data holds a PEM block that ok accepts.
func holdsPEM(data []byte, ok func(*pem.Block) bool) bool {
	for rest := bytes.TrimSpace(data); len(rest) > 0; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return false
		}
		if ok(b) {
			return true
		}
	}
	return false
}
