package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const cronHelp = "is not a cron schedule (5 fields with optional seconds, @every 30m, @daily, CRON_TZ=…)"

// TestConfigErrorMessages pins what a tired admin reads for a mistake in
// the file, the environment or a flag: the file and line (or the variable,
// or the flag) of the value, the key, a did-you-mean for an unknown key,
// and types in words, never go-yaml's !!str internals. FILE stands for the
// file's path.
func TestConfigErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  string
		env   map[string]string
		flags map[string]string
		want  string
	}{
		// Unknown keys, with the nearest known one.
		{name: "misspelt key", file: "retention:\n  keep_last: 3\n  keep_dialy: 7\n",
			want: "config FILE:3: retention.keep_dialy: unknown key, did you mean retention.keep_daily?"},
		{name: "misspelt key in the example", file: "cluster: prod\nretention:\n  keep_lst: 3\n",
			want: "config FILE:3: retention.keep_lst: unknown key, did you mean retention.keep_last?"},
		{name: "misspelt section", file: "cluster: prod\nretension:\n  keep_last: 3\n",
			want: "config FILE:2: retension: unknown key, did you mean retention?"},
		{name: "misspelt top-level key", file: "clustr: prod\n",
			want: "config FILE:1: clustr: unknown key, did you mean cluster?"},
		{name: "key outside its section", file: "cluster: prod\nkeep_last: 3\n",
			want: "config FILE:2: keep_last: unknown key, did you mean retention.keep_last?"},
		{name: "key nothing like a known one", file: "cluster: prod\nfrobnicate: 3\n",
			want: "config FILE:2: frobnicate: unknown key"},
		{name: "misspelt key of a copy", file: "copies:\n  - name: dr\n    url: file:///a\n    retension: {keep_last: 1}\n",
			want: "config FILE:4: copies[0].retension: unknown key, did you mean copies[0].retention?"},

		// Types in words.
		{name: "a word for a count", file: "retention:\n  keep_last: five\n",
			want: `config FILE:2: retention.keep_last: "five" is not a whole number`},
		{name: "a fraction for a count", file: "retention:\n  keep_last: 1.5\n",
			want: `config FILE:2: retention.keep_last: "1.5" is not a whole number`},
		{name: "one endpoint, not a list", file: "etcd:\n  endpoints: https://10.0.0.11:2379\n",
			want: "config FILE:2: etcd.endpoints: want a list, e.g. [https://10.0.0.11:2379]"},
		{name: "a number for a list", file: "etcd: {endpoints: 5}\n",
			want: "config FILE:1: etcd.endpoints: want a list, e.g. [5]"},
		{name: "not a boolean", file: "capture:\n  enabled: maybe\n",
			want: `config FILE:2: capture.enabled: "maybe" is not true or false`},
		{name: "not a duration", file: "snapshot:\n  timeout: soon\n",
			want: `config FILE:2: snapshot.timeout: "soon" is not a duration, e.g. 30m or 7d`},
		{name: "not a size", file: "snapshot:\n  writeback_chunk: lots\n",
			want: `config FILE:2: snapshot.writeback_chunk: "lots" is not a size, e.g. 8MiB`},
		{name: "a list for one value", file: "etcd:\n  cacert: [a.pem, b.pem]\n",
			want: "config FILE:2: etcd.cacert: want one value, not a list"},
		{name: "a value for a section", file: "etcd: 5\n",
			want: `config FILE:1: etcd: want a section of keys indented below it, not "5"`},
		{name: "a list for the file", file: "- a\n- b\n",
			want: "config FILE:1: want keys (cluster: …, etcd: …), not a list"},
		{name: "not a size in a copy", file: "copies:\n  - name: dr\n    url: s3://bkt/x\n    s3: {part_size: lots}\n",
			want: `config FILE:4: copies[0].s3.part_size: "lots" is not a size, e.g. 8MiB`},

		// What Validate finds, at its line.
		{name: "bad cron", file: "cluster: prod\nschedule:\n  snapshot: \"*/5 * * *\"\n",
			want: `config FILE:3: schedule.snapshot: "*/5 * * *" ` + cronHelp + `: expected 5 to 6 fields, found 4: [*/5 * * *]`},
		{name: "bad store url", file: "store:\n  url: ftp://x\n",
			want: `config FILE:2: store.url: "ftp://x" is not a file:///path or s3://bucket/prefix URL`},
		{name: "zero duration", file: "etcd:\n  endpoints: [http://a:2379]\n  dial_timeout: 0s\n",
			want: "config FILE:3: etcd.dial_timeout: must be positive"},
		{name: "bad copy name", file: "cluster: prod\ncopies:\n  - {name: DR, url: file:///a}\n",
			want: `config FILE:3: copies[0].name: "DR": give a name of lower-case letters, digits and hyphens (up to 32), like dr or eu-west`},

		// The environment and flags name the variable and the flag.
		{name: "bad cron from the environment", env: map[string]string{"LIFEBOAT_SCHEDULE_SNAPSHOT": "*/5 * * *"},
			want: `config: environment LIFEBOAT_SCHEDULE_SNAPSHOT (schedule.snapshot): "*/5 * * *" ` + cronHelp + `: expected 5 to 6 fields, found 4: [*/5 * * *]`},
		{name: "the environment over a good file", file: "schedule:\n  snapshot: \"@daily\"\n", env: map[string]string{"LIFEBOAT_SCHEDULE_SNAPSHOT": "daily"},
			want: `config: environment LIFEBOAT_SCHEDULE_SNAPSHOT (schedule.snapshot): "daily" ` + cronHelp + `: expected 5 to 6 fields, found 1: [daily]`},
		{name: "a word for a count in the environment", env: map[string]string{"LIFEBOAT_RETENTION_KEEP_LAST": "five"},
			want: `config: environment LIFEBOAT_RETENTION_KEEP_LAST (retention.keep_last): "five" is not a whole number`},
		{name: "bad cron flag", flags: map[string]string{"schedule.snapshot": "*/5 * * *"},
			want: `config: --snapshot-schedule (schedule.snapshot): "*/5 * * *" ` + cronHelp + `: expected 5 to 6 fields, found 4: [*/5 * * *]`},
		{name: "bad size flag", flags: map[string]string{"snapshot.writeback_chunk": "lots"},
			want: `config: --writeback-chunk (snapshot.writeback_chunk): "lots" is not a size, e.g. 8MiB`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = writeFile(t, "config.yaml", tc.file)
			}
			_, err := LoadConfig(path, envMap(tc.env), tc.flags)
			if err == nil {
				t.Fatalf("LoadConfig succeeded, want %q", tc.want)
			}
			if got, want := err.Error(), strings.ReplaceAll(tc.want, "FILE", path); got != want {
				t.Errorf("LoadConfig:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestUnknownEnvironment: a LIFEBOAT_* variable that is no setting is a
// warning (exit 0) in every command that reads the configuration, an
// error (exit 2) in config check, and never one for the variables
// lifeboat, its tests and scripts use that are not settings.
func TestUnknownEnvironment(t *testing.T) {
	store := t.TempDir()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string // on stderr; "" is no warning about the environment
	}{
		{name: "misspelt in list", env: map[string]string{"LIFEBOAT_RETENTION_KEEP_LST": "3"}, args: []string{"list", "--store", "file://" + store},
			want: "WARNING: environment LIFEBOAT_RETENTION_KEEP_LST is not a lifeboat setting (ignored); did you mean LIFEBOAT_RETENTION_KEEP_LAST?"},
		{name: "nothing like a setting in list", env: map[string]string{"LIFEBOAT_FROBNICATE": "1"}, args: []string{"list", "--store", "file://" + store},
			want: "WARNING: environment LIFEBOAT_FROBNICATE is not a lifeboat setting (ignored)\n"},
		{name: "misspelt in config check", env: map[string]string{"LIFEBOAT_RETENTION_KEEP_LST": "3"}, args: []string{"config", "check"}, code: exitUsage,
			want: "lifeboat: config: environment LIFEBOAT_RETENTION_KEEP_LST is not a lifeboat setting; did you mean LIFEBOAT_RETENTION_KEEP_LAST?\n"},
		{name: "two in config check", env: map[string]string{"LIFEBOAT_STORE_UR": "file:///x", "LIFEBOAT_CLUSTERS": "a"}, args: []string{"config", "check"}, code: exitUsage,
			want: "lifeboat: config: environment LIFEBOAT_CLUSTERS is not a lifeboat setting; did you mean LIFEBOAT_CLUSTER?; environment LIFEBOAT_STORE_UR is not a lifeboat setting; did you mean LIFEBOAT_STORE_URL?\n"},
		{name: "lifeboat's own variables", args: []string{"config", "check"}, env: map[string]string{
			"LIFEBOAT_BIN": "/bin/true", "LIFEBOAT_BENCH_BIN": "x", "LIFEBOAT_BENCH_SNAPSHOT": "x", "LIFEBOAT_REPLAY_REVISIONS": "1",
			"LIFEBOAT_BUILD_SRC": "/tmp", "LIFEBOAT_PROP_SEED": "1", "LIFEBOAT_INSPECT_OBJECTS": "1", "LIFEBOAT_TEST_SYSFILTER": "0",
			"LIFEBOAT_CAPTURE": "false", "LIFEBOAT_SIGNING_KEY": "", "LIFEBOAT_CLUSTER": "prod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tc.env, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, errOut)
			}
			if tc.want == "" {
				if strings.Contains(errOut, "environment LIFEBOAT_") {
					t.Errorf("stderr warns of lifeboat's own variables:\n%s", errOut)
				}
				return
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr lacks\n%s\nin\n%s", tc.want, errOut)
			}
		})
	}
}

// TestConfigCheckTLS: config check opens the etcd TLS files: the CA
// bundle parses, the certificate and key load and are a pair (exit 2
// naming the key and the file when not).
func TestConfigCheckTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeTLS(t, dir, "a")
	_, _, otherKey := writeTLS(t, dir, "b")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tlsFile := func(ca, cert, key string) string {
		return "etcd:\n  endpoints: [https://10.0.0.11:2379]\n  cacert: " + ca + "\n  cert: " + cert + "\n  key: " + key + "\n"
	}
	for _, tc := range []struct {
		name string
		file string
		args []string
		want string // "" is exit 0
	}{
		{name: "a good pair and CA", file: tlsFile(ca, cert, key)},
		{name: "missing CA", file: tlsFile(missing, cert, key),
			want: "lifeboat: config FILE:3: etcd.cacert: cannot read " + missing + ": open " + missing + ": no such file or directory\n"},
		{name: "CA not PEM", file: tlsFile(garbage, cert, key),
			want: "lifeboat: config FILE:3: etcd.cacert: " + garbage + " holds no PEM certificate\n"},
		{name: "certificate not PEM", file: tlsFile(ca, garbage, key),
			want: "lifeboat: config FILE:4: etcd.cert: " + garbage + " holds no PEM certificate\n"},
		{name: "missing key", file: tlsFile(ca, cert, missing),
			want: "lifeboat: config FILE:5: etcd.key: cannot read " + missing + ": open " + missing + ": no such file or directory\n"},
		{name: "key not PEM", file: tlsFile(ca, cert, garbage),
			want: "lifeboat: config FILE:5: etcd.key: " + garbage + " holds no PEM private key\n"},
		{name: "key of another certificate", file: tlsFile(ca, cert, otherKey),
			want: "lifeboat: config FILE:5: etcd.key: " + otherKey + " is not the private key of etcd.cert " + cert + "\n"},
		{name: "missing CA by flag", file: tlsFile(ca, cert, key), args: []string{"--cacert", missing},
			want: "lifeboat: config: --cacert (etcd.cacert): cannot read " + missing + ": open " + missing + ": no such file or directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeFile(t, "config.yaml", tc.file)
			code, _, errOut := runCLI(t, nil, append([]string{"config", "check", "--config", cfg}, tc.args...)...)
			if tc.want == "" {
				if code != 0 {
					t.Fatalf("config check: exit %d, want 0: %s", code, errOut)
				}
				return
			}
			if code != exitUsage {
				t.Errorf("config check: exit %d, want %d", code, exitUsage)
			}
			if want := strings.ReplaceAll(tc.want, "FILE", cfg); errOut != want {
				t.Errorf("stderr:\n got %s\nwant %s", errOut, want)
			}
		})
	}
}

// writeTLS writes a CA, a client certificate it signs and the
// certificate's key into dir, named by prefix.
func writeTLS(t *testing.T, dir, prefix string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: prefix + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: prefix + " client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caTmpl, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, prefix+"-"+name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", leafDER), write("key.pem", "PRIVATE KEY", keyDER)
}

// TestEveryLifeboatVariableIsKnown keeps otherEnv in step with the
// repository: every LIFEBOAT_* name in its code, scripts and docs is an
// option's variable or one of otherEnv's, so none of them is ever warned
// of as a mistake. The names below are deliberate mistakes of tests and
// docs.
func TestEveryLifeboatVariableIsKnown(t *testing.T) {
	mistakes := map[string]bool{
		"LIFEBOAT_RETENTION_KEEP_LST": true, "LIFEBOAT_FROBNICATE": true, "LIFEBOAT_STORE_UR": true, "LIFEBOAT_CLUSTERS": true,
		"LIFEBOAT_IDENTITY_FILE": true, // a made-up secret the drill's replay child must not get
	}
	name := regexp.MustCompile(`LIFEBOAT_[A-Z0-9_]+`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == ".bin" || n == "testdata" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".sh", ".md", ".yaml", ".yml", ".tpl", ".txt", ".service", "":
		default:
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(data, 0) >= 0 {
			return nil // a binary (a lifeboat built in the tree), not text
		}
		var env []string
		for _, n := range name.FindAllString(string(data), -1) {
			if !mistakes[n] && !strings.HasSuffix(n, "_") { // LIFEBOAT_BENCH_: a family
				env = append(env, n+"=x")
			}
		}
		for _, m := range unknownEnv(env) {
			t.Errorf("%s: %s: add it to otherEnv (configenv.go) if lifeboat uses it", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
