package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// marker is in every secret value below; it must never be shown.
const marker = "S3cr3tMarker"

// Every config key whose value is text is classified here (item 14).
// TestEveryTextKeyIsClassified fails for a new key until it is: a URL or
// anything else that can carry a credential must be a secret (redacted by
// its type) or refuse credentials outright.
var (
	// secretKeys hold credentials: their type redacts them everywhere.
	// The values are what the tests set them to.
	secretKeys = map[string]string{
		"etcd.password":     marker + "-password",
		"agent.pushgateway": "http://lifeboat:" + marker + "@127.0.0.1:1/", // user:password
		// A webhook's path and query are its token (Slack, Teams, ...).
		"notify.webhooks": "http://hook:" + marker + "@127.0.0.1:1/services/" + marker + "?token=" + marker,
	}
	// credentialFreeURLs are URLs that refuse credentials (there is a
	// proper place for them: --user/--password, the AWS credential chain),
	// so their values can be shown. The values must be refused.
	credentialFreeURLs = map[string]string{
		"etcd.endpoints":    "http://root:" + marker + "@127.0.0.1:2379",
		"etcd.member":       "http://root:" + marker + "@127.0.0.1:2379",
		"store.url":         "s3://AKIA:" + marker + "@bucket/prefix",
		"store.s3.endpoint": "http://AKIA:" + marker + "@127.0.0.1:9000",
		"fleet.stores":      "s3://AKIA:" + marker + "@bucket/prefix",
	}
	// plainKeys cannot carry a credential: names, paths, enums,
	// schedules, public keys, addresses.
	plainKeys = map[string]bool{
		"cluster": true, "capture.compaction_levels": true,
		"signing.key_file": true, "signing.trusted_keys": true, "fleet.cache_dir": true, "fleet.drills.schedule": true, "fleet.drills.identities": true, "lineage.adopt_cluster": true, "lineage.select": true, "log.level": true, "log.format": true,
		"etcd.cacert": true, "etcd.cert": true, "etcd.key": true, "etcd.user": true,
		"snapshot.spool_dir": true, "snapshot.live_hashkv": true, "store.compression": true,
		"store.s3.region": true, "store.s3.sse": true, "store.s3.sse_kms_key_id": true, "store.s3.storage_class": true, "store.s3.profile": true,
		"store.object_lock.mode": true,
		"encryption.recipients":  true, "encryption.recipients_file": true, "encryption.identity_file": true,
		"retention.time_zone": true,
		"drill.scratch_dir":   true, "drill.etcd_binary": true, "drill.check_prefixes": true, "drill.store": true, // a copy's name (copies[].url are checked by TestCopiesConfig: credentials refused, never echoed)
		"schedule.snapshot": true, "schedule.prune": true, "schedule.drill": true, "schedule.drill_target": true, "scrub.schedule": true,
		"agent.listen": true, "agent.textfile": true,
		"notify.on":         true,
		"inspect.cache_dir": true, "inspect.encryption_config": true, // paths (the file holds keys; its path does not)

		"kit.paths": true, "kit.root": true, // presets and paths (the files hold keys; their paths do not)
		"kubernetes.kubeconfig": true, "kubernetes.namespace": true, // a path (the file holds credentials; its path does not) and a name
	}
)

func TestEveryTextKeyIsClassified(t *testing.T) {
	c := DefaultConfig()
	seen := map[string]bool{}
	for _, o := range options(&c) {
		ft := o.field.Type()
		text := ft.Kind() == reflect.String || (ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String)
		if !text {
			continue
		}
		seen[o.key] = true
		_, secret := secretKeys[o.key]
		_, free := credentialFreeURLs[o.key]
		n := 0
		for _, b := range []bool{secret, free, plainKeys[o.key]} {
			if b {
				n++
			}
		}
		if n != 1 {
			t.Errorf("config key %s is classified %d times: put it in exactly one of secretKeys (it can hold a credential: make it a snapshot.Secret), credentialFreeURLs (a URL that refuses credentials) or plainKeys", o.key, n)
		}
		if secret && ft != secretType && ft != secretsType {
			t.Errorf("config key %s holds a credential but its type %s does not redact it: use snapshot.Secret", o.key, ft)
		}
		if !secret && (ft == secretType || ft == secretsType) {
			t.Errorf("config key %s is a Secret: list it in secretKeys", o.key)
		}
	}
	for _, m := range []map[string]string{secretKeys, credentialFreeURLs} {
		for k := range m {
			if !seen[k] {
				t.Errorf("classified key %s is not a text key of the configuration", k)
			}
		}
	}
	for k := range plainKeys {
		if !seen[k] {
			t.Errorf("classified key %s is not a text key of the configuration", k)
		}
	}
}

// secretEnv sets every secret key (and etcd.user, which a password needs).
func secretEnv(extra map[string]string) map[string]string {
	env := map[string]string{"LIFEBOAT_ETCD_USER": "root"}
	for k, v := range secretKeys {
		env[envName(k)] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func assertNoMarker(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, marker) {
		i := strings.Index(s, marker)
		t.Errorf("%s shows a secret: …%s…", what, s[max(0, i-120):min(len(s), i+40)])
	}
}

// TestSecretsNeverShown (item 14): every secret key set to a value holding
// the marker; the marker is in none of config check's output, the logs and
// error of a failing run (etcd, the webhook and the Pushgateway all fail:
// their url.Errors echo URLs), /status, and the errors of credential-free
// URL keys given credentials.
func TestSecretsNeverShown(t *testing.T) {
	t.Run("config check", func(t *testing.T) {
		code, out, errOut := runCLI(t, secretEnv(nil), "config", "check")
		if code != 0 {
			t.Fatalf("config check exit %d: %s", code, errOut)
		}
		assertNoMarker(t, "config check", out+errOut)
		if strings.Count(out, "<redacted>") < len(secretKeys) {
			t.Errorf("config check does not mark the secrets redacted:\n%s", out)
		}
	})

	t.Run("credentials refused in URL keys", func(t *testing.T) {
		keys := make([]string, 0, len(credentialFreeURLs))
		for k := range credentialFreeURLs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env := map[string]string{envName(k): credentialFreeURLs[k]}
			if k == "store.s3.endpoint" {
				env["LIFEBOAT_STORE_URL"] = "s3://bucket"
			}
			for _, cmd := range [][]string{{"config", "check"}, {"snapshot"}} {
				code, out, errOut := runCLI(t, env, cmd...)
				if code != 2 {
					t.Errorf("%s with credentials in %s: exit %d, want 2 (refused)", cmd[0], k, code)
				}
				if !strings.Contains(errOut, k) && !strings.Contains(errOut, "credentials") {
					t.Errorf("%s: the error does not say what is wrong: %s", k, errOut)
				}
				assertNoMarker(t, k+" error", out+errOut)
			}
		}
	})

	// A webhook that first breaks the connection (net/http's url.Error
	// then holds the URL) and then answers 400.
	// It is also a Pushgateway that refuses the push (the push library
	// quotes the whole push URL in its error).
	var calls, pushes atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			pushes.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if calls.Add(1) == 1 {
			if hj, ok := w.(http.Hijacker); ok {
				conn, _, _ := hj.Hijack()
				conn.Close()
				return
			}
		}
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer hook.Close()
	hookURL := strings.Replace(hook.URL, "http://", "http://hook:"+marker+"@", 1) + "/services/" + marker + "?token=" + marker

	t.Run("logs and error of a failing run", func(t *testing.T) {
		dir := t.TempDir()
		gw := strings.Replace(hook.URL, "http://", "http://lifeboat:"+marker+"@", 1)
		env := secretEnv(map[string]string{"LIFEBOAT_NOTIFY_WEBHOOKS": hookURL, "LIFEBOAT_AGENT_PUSHGATEWAY": gw})
		code, out, errOut := runCLI(t, env, "agent", "--once", "--cluster", "s", "--store", "file://"+filepath.Join(dir, "store"),
			"--spool-dir", filepath.Join(dir, "spool"), "--scratch-dir", filepath.Join(dir, "scratch"),
			"--endpoints", "http://127.0.0.1:1", "--dial-timeout", "1s", "--lock=false", "--snapshot-retries", "0",
			"--prune-schedule", "", "--drill-schedule", "", "--log-level", "debug", "--log-format", "json")
		if code != exitFailed {
			t.Fatalf("agent --once exit %d, want 1\n%s", code, errOut)
		}
		for _, want := range []string{"notification failed", "push metrics"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("the run did not reach %q:\n%s", want, errOut)
			}
		}
		if calls.Load() == 0 || pushes.Load() == 0 {
			t.Errorf("the webhook was called %d times, the Pushgateway %d", calls.Load(), pushes.Load())
		}
		assertNoMarker(t, "agent --once output", out+errOut)
	})

	t.Run("/status", func(t *testing.T) {
		dir := t.TempDir()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		for k, v := range secretEnv(map[string]string{"LIFEBOAT_NOTIFY_WEBHOOKS": hookURL}) {
			t.Setenv(k, v)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var stderr syncbuf.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"agent", "--cluster", "s", "--store", "file://" + filepath.Join(dir, "store"),
				"--spool-dir", filepath.Join(dir, "spool"), "--scratch-dir", filepath.Join(dir, "scratch"),
				"--endpoints", "http://127.0.0.1:1", "--dial-timeout", "1s", "--lock=false", "--snapshot-retries", "0",
				"--listen", addr, "--run-at-start", "--snapshot-schedule", "@every 1h", "--prune-schedule", "", "--drill-schedule", "",
				"--log-level", "debug", "--log-format", "json"}, io.Discard, &stderr)
		}()
		var body string
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(strings.ReplaceAll(body, " ", ""), `"result":"failure"`) {
			if time.Now().After(deadline) {
				t.Fatalf("no failed snapshot in /status: %s\n%s", body, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
			resp, err := http.Get("http://" + addr + "/status")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		assertNoMarker(t, "/status", body)
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the agent did not stop")
		}
		assertNoMarker(t, "agent log", stderr.String())
	})
}
