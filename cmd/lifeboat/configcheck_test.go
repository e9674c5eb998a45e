package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// TestConfigCheckTrustWarnings: lifeboat config check warns (on stderr,
// exit 0) when backups are encrypted but nothing is signed or checked,
// when unsigned objects are read (signing.allow_unsigned), and while
// lineage.adopt_cluster is left set; a signed or a plain configuration
// gets none of these warnings.
func TestConfigCheckTrustWarnings(t *testing.T) {
	dir := t.TempDir()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	k, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "signing.key")
	if err := signing.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	encryption := "encryption:\n  recipients: [" + id.Recipient().String() + "]\n"
	const (
		unsignedWarning = "WARNING: encryption without signing: anyone with the store's credentials can plant a backup encrypted to your public recipient; see docs/security.md"
		allowWarning    = "WARNING: signing.allow_unsigned is on"
		adoptWarning    = "WARNING: lineage.adopt_cluster is set (8e9e05c52164694d): remove it once the adopting snapshot is stored"
	)
	all := []string{unsignedWarning, allowWarning, adoptWarning}
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"encrypted, not signed", encryption, []string{unsignedWarning}},
		{"encrypted, signed", encryption + "signing:\n  key_file: " + keyFile + "\n", nil},
		{"encrypted, trusted keys only", encryption + "signing:\n  trusted_keys: [" + k.Public().String() + "]\n", nil},
		{"not encrypted, not signed", "cluster: prod\n", nil},
		{"allow unsigned", encryption + "signing:\n  key_file: " + keyFile + "\n  allow_unsigned: true\n", []string{allowWarning}},
		{"adopt cluster", "lineage:\n  adopt_cluster: 8e9e05c52164694d\n", []string{adoptWarning}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeFile(t, "config.yaml", tc.config)
			code, _, errOut := runCLI(t, nil, "config", "check", "--config", cfg)
			if code != 0 {
				t.Fatalf("config check: exit %d, want 0 (warnings only): %s", code, errOut)
			}
			for _, w := range all {
				if got, want := strings.Contains(errOut, w), slices.Contains(tc.want, w); got != want {
					t.Errorf("stderr has %q: %v, want %v; stderr:\n%s", w, got, want, errOut)
				}
			}
		})
	}
}
