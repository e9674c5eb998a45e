package snapshot_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/snapshot"
)

func TestSecretRedaction(t *testing.T) {
	const pw = "hunter2-s3cret"
	s := snapshot.Secret(pw)
	type holder struct {
		User     string
		Password snapshot.Secret
	}
	h := holder{User: "root", Password: s}
	var logBuf bytes.Buffer
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("connect", "password", s, "cfg", h)
	var textBuf bytes.Buffer
	slog.New(slog.NewTextHandler(&textBuf, nil)).Info("connect", "password", s)
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]string // json.Marshal escapes < and >
	if err := json.Unmarshal(js, &decoded); err != nil {
		t.Fatal(err)
	}
	txt, err := s.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"%v":           fmt.Sprintf("%v", s),
		"%s":           fmt.Sprintf("%s", s),
		"%q":           fmt.Sprintf("%q", s),
		"%+v struct":   fmt.Sprintf("%+v", h),
		"%#v struct":   fmt.Sprintf("%#v", h),
		"%v pointer":   fmt.Sprintf("%v", &h),
		"slog json":    logBuf.String(),
		"slog text":    textBuf.String(),
		"json.Marshal": decoded["Password"],
		"MarshalText":  string(txt),
	}
	for name, out := range outputs {
		t.Run(name, func(t *testing.T) {
			if strings.Contains(out, pw) {
				t.Errorf("output reveals the secret: %s", out)
			}
			if !strings.Contains(out, "<redacted>") {
				t.Errorf("output lacks <redacted>: %s", out)
			}
		})
	}
	if got := s.Reveal(); got != pw {
		t.Errorf("Reveal() = %q, want %q", got, pw)
	}
	if got := fmt.Sprint(snapshot.Secret("")); got != "" {
		t.Errorf("empty secret prints %q, want empty", got)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := snapshot.Config{Endpoints: []string{"https://10.0.0.1:2379", "10.0.0.2:2379"}}
	tests := []struct {
		name    string
		mod     func(c *snapshot.Config)
		wantErr string // substring; "" = valid
	}{
		{name: "valid", mod: func(*snapshot.Config) {}},
		{name: "valid full", mod: func(c *snapshot.Config) {
			c.CACert, c.Cert, c.Key, c.User, c.Password = "ca", "c", "k", "root", "pw"
			c.Member = "https://10.0.0.1:2379/"
		}},
		{name: "valid unix", mod: func(c *snapshot.Config) { c.Endpoints = []string{"unix:///run/etcd.sock"} }},
		{name: "no endpoints", mod: func(c *snapshot.Config) { c.Endpoints = nil }, wantErr: "endpoints: empty"},
		{name: "empty endpoint", mod: func(c *snapshot.Config) { c.Endpoints = []string{""} }, wantErr: "endpoints: entry 1"},
		{name: "bad scheme", mod: func(c *snapshot.Config) { c.Endpoints = []string{"ftp://x:1"} }, wantErr: `scheme "ftp"`},
		{name: "no port", mod: func(c *snapshot.Config) { c.Endpoints = []string{"etcd.local"} }, wantErr: "endpoints: entry 1"},
		{name: "no host", mod: func(c *snapshot.Config) { c.Endpoints = []string{"https://"} }, wantErr: "no host"},
		{name: "credentials", mod: func(c *snapshot.Config) { c.Endpoints = []string{"http://root:pw@a:1"} }, wantErr: "holds credentials"},
		{name: "duplicate", mod: func(c *snapshot.Config) { c.Endpoints = []string{"http://a:1", "http://a:1/"} }, wantErr: "listed twice"},
		{name: "cert without key", mod: func(c *snapshot.Config) { c.Cert = "c" }, wantErr: "cert set without key"},
		{name: "key without cert", mod: func(c *snapshot.Config) { c.Key = "k" }, wantErr: "key set without cert"},
		{name: "password without user", mod: func(c *snapshot.Config) { c.Password = "pw" }, wantErr: "password set without user"},
		{name: "user without password", mod: func(c *snapshot.Config) { c.User = "root" }, wantErr: "set --password"},
		{name: "negative timeout", mod: func(c *snapshot.Config) { c.DialTimeout = -1 }, wantErr: "dial timeout"},
		{name: "bad member", mod: func(c *snapshot.Config) { c.Member = "followers" }, wantErr: "member:"},
		{name: "member not an endpoint", mod: func(c *snapshot.Config) { c.Member = "http://elsewhere:2379" }, wantErr: "not one of the endpoints"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			c.Endpoints = append([]string(nil), ok.Endpoints...)
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			}
			if err != nil && c.Password != "" && strings.Contains(err.Error(), c.Password.Reveal()) {
				t.Fatalf("error reveals the password: %v", err)
			}
		})
	}
}

func TestClientConfigFiles(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name    string
		cfg     snapshot.Config
		wantErr []string
	}{
		{name: "missing CA", cfg: snapshot.Config{CACert: missing}, wantErr: []string{"read CA file " + missing, "--cacert"}},
		{name: "garbage CA", cfg: snapshot.Config{CACert: garbage}, wantErr: []string{"read CA file " + garbage, "no PEM certificate"}},
		{name: "missing cert", cfg: snapshot.Config{Cert: missing, Key: garbage}, wantErr: []string{"client certificate file " + missing, "--cert"}},
		{name: "missing key", cfg: snapshot.Config{Cert: garbage, Key: missing}, wantErr: []string{"client key file " + missing, "--key"}},
		{name: "garbage pair", cfg: snapshot.Config{Cert: garbage, Key: garbage}, wantErr: []string{"load client certificate " + garbage, "--cert", "--key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Endpoints = []string{"https://127.0.0.1:2379"}
			_, err := tt.cfg.ClientConfig()
			if err == nil {
				t.Fatal("ClientConfig() = nil error")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
	t.Run("plain http has no TLS", func(t *testing.T) {
		cc, err := snapshot.Config{Endpoints: []string{"http://127.0.0.1:2379"}}.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cc.TLS != nil {
			t.Error("TLS configured for a plain http endpoint")
		}
		if cc.DialTimeout != snapshot.DefaultDialTimeout {
			t.Errorf("DialTimeout = %v, want %v", cc.DialTimeout, snapshot.DefaultDialTimeout)
		}
	})
	t.Run("https without files uses system roots", func(t *testing.T) {
		cc, err := snapshot.Config{Endpoints: []string{"https://127.0.0.1:2379"}, User: "u", Password: "p"}.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cc.TLS == nil || cc.TLS.RootCAs != nil {
			t.Errorf("TLS = %+v, want a config with system roots", cc.TLS)
		}
		if cc.Username != "u" || cc.Password != "p" {
			t.Errorf("credentials not passed on")
		}
	})
}

// FuzzValidateEndpoint: the endpoint rule never panics, and its error never
// shows an endpoint that holds credentials.
func FuzzValidateEndpoint(f *testing.F) {
	for _, s := range []string{
		"http://127.0.0.1:2379", "https://etcd:2379/", "127.0.0.1:2379", "unix:///run/etcd.sock", "unixs:a",
		"http://", "ftp://a:1", "http://root:hunter2@a:1", "https://root:hunter2-very-long-secret@etcd-0.example.com:2379", "root:hunter2@a:1", " http://a:1", "http://[::1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ep string) {
		err := snapshot.ValidateEndpoint(ep)
		if err == nil {
			return
		}
		host := ep
		if _, rest, ok := strings.Cut(host, "://"); ok {
			host = rest
		}
		host, _, _ = strings.Cut(host, "/")
		// (A long host, so that the error's own words cannot contain it.)
		if strings.Contains(host, "@") && len(host) >= 40 && strings.Contains(err.Error(), host) {
			t.Fatalf("ValidateEndpoint(%q) error shows its credentials: %v", ep, err)
		}
	})
}
