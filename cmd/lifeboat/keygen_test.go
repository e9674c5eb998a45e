package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// TestKeygen: keygen -o writes a new signing key (0600) and prints its
// public key on one line; -y prints the same public key; -o onto an
// existing file refuses and leaves it as it was; neither or both flags,
// and -y of a file that is no signing key, are usage errors (exit 2)
// with a one-line error, never a stack trace.
func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "signing.key")
	code, out, errOut := runCLI(t, nil, "keygen", "-o", key)
	if code != 0 {
		t.Fatalf("keygen -o: exit %d: %s", code, errOut)
	}
	pub := strings.TrimSuffix(out, "\n")
	if strings.Contains(pub, "\n") || pub == "" {
		t.Fatalf("keygen -o printed %q, want the public key on one line", out)
	}
	if _, err := signing.ParsePublicKey(pub); err != nil {
		t.Errorf("keygen -o printed %q, not a public key: %v", pub, err)
	}
	st, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("key file mode %v, want 0600", got)
	}
	written, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := signing.ParseKey(written)
	if err != nil {
		t.Fatalf("key file: %v", err)
	}
	if got := k.Public().String(); got != pub {
		t.Errorf("key file's public key %s, printed %s", got, pub)
	}
	if strings.Contains(out+errOut, string(written)) || strings.Contains(out, "PRIVATE") {
		t.Error("keygen -o printed the private key")
	}

	code, out, errOut = runCLI(t, nil, "keygen", "-y", key)
	if code != 0 || out != pub+"\n" {
		t.Errorf("keygen -y: exit %d, printed %q; want 0 and %q (stderr %s)", code, out, pub+"\n", errOut)
	}

	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a key at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"-o onto an existing key", []string{"-o", key}, key + " already exists"},
		{"-o onto another file", []string{"-o", garbage}, garbage + " already exists"},
		{"neither flag", nil, "give either -o FILE"},
		{"both flags", []string{"-o", filepath.Join(dir, "new.key"), "-y", key}, "give either -o FILE"},
		{"-y of garbage", []string{"-y", garbage}, "signing key " + garbage + ": not a signing key"},
		{"-y of a missing file", []string{"-y", filepath.Join(dir, "missing.key")}, "missing.key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, append([]string{"keygen"}, tc.args...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (usage); stderr %s", code, exitUsage, errOut)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want it to say %q", errOut, tc.want)
			}
			if strings.Contains(errOut, "goroutine") || strings.Contains(errOut, "panic") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("stderr is not a one-line error:\n%s", errOut)
			}
		})
	}
	if after, err := os.ReadFile(key); err != nil || string(after) != string(written) {
		t.Errorf("the refused keygen -o changed %s (err %v)", key, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.key")); err == nil {
		t.Error("keygen with both flags wrote a key")
	}
	if after, err := os.ReadFile(garbage); err != nil || string(after) != "not a key at all\n" {
		t.Errorf("the refused keygen -o changed %s (err %v)", garbage, err)
	}
}
