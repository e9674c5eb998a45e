package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// The site-loss test's names: the buckets of the primary store and of
// its copy, the AWS profiles that reach each, and the namespace written.
const (
	siteBucket  = "site"
	copyBucket  = "dr-copy"
	siteProfile = "site"
	copyProfile = "dr"
	vaultNS     = "vault"
	// siteSnapshotEvery is the agent's snapshot schedule: a backup (and
	// its kit) every few seconds besides capture's anchor.
	siteSnapshotEvery = 3 * time.Second
	// siteCopyEvery is agent.copy_interval: how soon captured changes
	// reach the copy.
	siteCopyEvery = time.Second
)

// TestSiteLoss is issue 22's proof: the whole site is lost (the primary
// store, etcd's data, the PKI and the encryption config, every process)
// and the cluster comes back under a new root from the copy alone, with
// only the age identity and the copy's credentials kept outside the
// site, as docs/restore.md "The site is gone" tells an SRE.
//
// The site: a kubeadm-like PKI under a fake root (kittest.Kubeadm, with
// the kube-apiserver manifest naming an aescbc EncryptionConfiguration),
// etcd serving clients and peers over TLS with the etcd certificates, and
// kube-apiserver reaching etcd with its etcd client certificate, serving
// with apiserver.crt, signing tokens with sa.key and encrypting Secrets at
// rest. It writes a namespace with Secrets, ConfigMaps and a
// ServiceAccount, and a token of that account is issued (TokenRequest).
// `lifeboat agent` backs up on a short schedule with the kit (the kubeadm
// preset under kit.root, age), captures, and copies everything to a copy
// store (copies:, its own versitygw and credentials); more is written
// after the first backup, so that only capture has it.
//
// Then everything is destroyed, and from the copy: `kit verify latest`
// checks the kit (decrypted, every pair matching), `kit restore latest
// --to NEWROOT` lays the PKI and encryption config back with their modes
// and contents; `restore --to-revision R` (the newest revision the copy
// holds) writes etcd's data dir; etcd starts with the restored
// certificates; and a new kube-apiserver with the restored PKI and
// encryption config serves the Secrets decrypted (still ciphertext in
// etcd), every object of the namespace with its uid, contents and
// resourceVersion, and accepts the token issued before the disaster as
// the ServiceAccount (a token with a forged signature is refused). The
// recovery time, from `kit restore` to the old Secrets served, is logged
// (docs/restore.md).
func TestSiteLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("real kube-apiserver, etcd binary, two versitygw and the agent")
	}
	x := &siteLoss{lifeboat: needLifeboat(t), etcd: etcdtest.Current.Need(t), kube: kubetest.NeedBinary(t), dir: t.TempDir(), begin: time.Now()}
	x.runSite(t)
	x.disaster(t)
	c, cli := x.recoverFromCopy(t)
	checkBack(t, c, x.vault.objects)
	(&site{cli: cli}).checkEncryptedAtRest(t, x.vault)
	checkToken(t, c, x.vault)
}

// siteLoss is TestSiteLoss's state from step to step.
type siteLoss struct {
	lifeboat, etcd, kube string // the binaries
	dir                  string
	begin                time.Time

	outside string // what the SRE keeps off the site: the identity, the copy's credentials
	idFile  string
	stores  *stores
	site    *site
	vault   *vault
	lb      *lifeboat // the site's
	agent   *captureAgent
	dr      *lifeboat // the SRE's, on the copy
	through int64     // the revision of the last write
	tree    map[string]fileState
}

// runSite starts the stores and the site, writes the namespace, runs the
// agent until the backups, the kit and the captured writes are in the
// copy, and notes the PKI's files.
func (x *siteLoss) runSite(t *testing.T) {
	t.Helper()
	x.outside = filepath.Join(x.dir, "outside")
	if err := os.Mkdir(x.outside, 0o700); err != nil {
		t.Fatal(err)
	}
	x.stores = startStores(t, x.dir)
	x.site = startSite(t, filepath.Join(x.dir, "site"), x.etcd, x.kube)
	c := x.site.api.Client()
	x.vault = writeVault(t, c)
	id, idFile := kittest.Identity(t, x.outside)
	x.idFile = idFile
	x.lb = x.stores.siteLifeboat(t, x.lifeboat, id.Recipient().String(), idFile, x.site.etcdFlags())
	x.lb.agentConfig = x.stores.copiesConfig()
	needCopies(t, x.lb)
	x.agent = x.lb.capture(t, []string{x.site.etcd.ClientURL}, x.site.agentArgs()...)
	x.agent.waitCaptured(t, currentRevision(t, x.site.cli))
	x.vault.writeMore(t, c) // after the first backup: only capture has these
	x.through = currentRevision(t, x.site.cli)
	x.agent.waitCaptured(t, x.through)
	waitKitBackups(t, x.lb, 2)
	x.site.checkEncryptedAtRest(t, x.vault)
	checkToken(t, c, x.vault)
	x.dr = x.stores.copyLifeboat(t, x.lifeboat, idFile, x.outside)
	waitCopy(t, x.dr, x.agent, x.through)
	x.tree = readTree(t, x.site.root, x.site.tree.Files)
	t.Logf("site up, written, backed up and copied in %.1fs", time.Since(x.begin).Seconds())
}

// disaster stops every process of the site and deletes the primary
// store, etcd's data, the PKI and the encryption config.
func (x *siteLoss) disaster(t *testing.T) {
	t.Helper()
	x.agent.stop(t)
	x.site.destroy(t)
	x.stores.site.Stop()
	if err := os.RemoveAll(x.stores.site.Dir); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := x.lb.runCode(t, "list"); code == 0 {
		t.Fatalf("lifeboat list of the lost primary store exits 0:\n%s%s", out, errOut)
	}
}

// recoverFromCopy follows docs/restore.md "The site is gone" with what
// was kept outside: kit verify, kit restore, restore to the copy's newest
// revision, etcd and kube-apiserver on the restored PKI, until the first
// Secret reads back decrypted; it logs the recovery time and returns a
// client of the new kube-apiserver and of the new etcd.
func (x *siteLoss) recoverFromCopy(t *testing.T) (*kubetest.Client, *clientv3.Client) {
	t.Helper()
	dr := x.dr
	// Step 0 of the page: the copy's kit decrypts and checks.
	if out := dr.run(t, "kit", "verify", "latest"); !strings.Contains(out, fmt.Sprintf("%d pairs match", x.site.tree.Pairs)) {
		t.Fatalf("kit verify of the copy's kit:\n%s", out)
	}
	start := time.Now()
	phases := &phaseClock{last: start}
	newRoot := filepath.Join(x.dir, "newroot")
	dr.run(t, "kit", "restore", "latest", "--to", newRoot)
	phases.done("kit restore")
	checkTree(t, newRoot, x.tree)
	r := newestRevision(t, dr)
	if r < x.through {
		t.Fatalf("the copy is recoverable through revision %d, want %d (the last write)", r, x.through)
	}
	out := dr.run(t, restoreArgsTLS(t, filepath.Join(x.dir, "etcd-restored"), "--to-revision", strconv.FormatInt(r, 10),
		"--bump-revision", strconv.Itoa(bump), "--mark-compacted")...)
	phases.done("restore --to-revision")
	etcd := etcdtest.StartRestoredTLS(t, x.etcd, etcdFlags(t, out), etcdTLS(filepath.Join(newRoot, "etc/kubernetes/pki")))
	phases.done("etcd healthy")
	api := kubetest.Start(t, apiOptions(x.kube, newRoot, etcd.ClientURL))
	phases.done("kube-apiserver ready")
	c := api.Client()
	first := x.vault.secrets()[0]
	got, err := c.Get(t.Context(), kubetest.Secrets, first.ns, first.name)
	recovery := time.Since(start)
	if err != nil {
		t.Fatalf("%s from the restored cluster: %v", first, err)
	}
	phases.done("first Secret read")
	t.Logf("recovery time (kit restore to the old Secrets served): %.1fs (%s); the whole test %.1fs", recovery.Seconds(), phases, time.Since(x.begin).Seconds())
	if !reflect.DeepEqual(got["data"], first.want) {
		t.Errorf("%s after the recovery: %v, want %v", first, got["data"], first.want)
	}
	return c, etcd.Client(t)
}

// phaseClock notes how long each step of the recovery took.
type phaseClock struct {
	last   time.Time
	phases []string
}

func (p *phaseClock) done(what string) {
	now := time.Now()
	p.phases = append(p.phases, fmt.Sprintf("%s %.1fs", what, now.Sub(p.last).Seconds()))
	p.last = now
}

func (p *phaseClock) String() string { return strings.Join(p.phases, ", ") }

// stores are the primary store (lost with the site) and its copy, each
// a versitygw of its own with its own credentials, reached through AWS
// profiles of one shared credentials file (the agent's).
type stores struct {
	site, copy  *s3test.Server
	credentials string
}

func startStores(t *testing.T, dir string) *stores {
	t.Helper()
	st := &stores{site: s3test.Start(t), copy: s3test.Start(t), credentials: filepath.Join(dir, "aws-credentials")}
	st.site.CreateBucket(t, siteBucket, false)
	st.copy.CreateBucket(t, copyBucket, false)
	writeProfiles(t, st.credentials, map[string]*s3test.Server{siteProfile: st.site, copyProfile: st.copy})
	return st
}

// writeProfiles writes an AWS shared credentials file with a profile of
// each server's keys.
func writeProfiles(t *testing.T, file string, profiles map[string]*s3test.Server) {
	t.Helper()
	var b strings.Builder
	for name, srv := range profiles {
		fmt.Fprintf(&b, "[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n\n", name, srv.AccessKey, srv.SecretKey)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// awsEnv is the environment of a lifeboat reaching S3 only through the
// profiles of credentials (no instance metadata, no other file).
func awsEnv(credentials, none string) []string {
	return []string{"AWS_SHARED_CREDENTIALS_FILE=" + credentials, "AWS_CONFIG_FILE=" + none, "AWS_EC2_METADATA_DISABLED=true"}
}

// s3Flags are the flags of a store on srv reached with profile.
func s3Flags(srv *s3test.Server, profile string) []string {
	return []string{"--s3-endpoint", srv.Endpoint, "--s3-path-style", "--s3-region", srv.Region, "--s3-profile", profile}
}

// siteLifeboat is the site's lifeboat: the primary store, the etcd TLS
// flags, encryption to the identity's recipient.
func (st *stores) siteLifeboat(t *testing.T, bin, rcp, idFile string, etcdFlags []string) *lifeboat {
	t.Helper()
	dir := t.TempDir()
	return &lifeboat{
		bin: bin, store: "s3://" + siteBucket + "/lb", spool: filepath.Join(dir, "spool"),
		flags: append(append(s3Flags(st.site, siteProfile), etcdFlags...),
			"--recipient", rcp, "--identity-file", idFile, "--scratch-dir", filepath.Join(dir, "scratch")),
		env: awsEnv(st.credentials, filepath.Join(dir, "no-such-aws-file")),
	}
}

// copyLifeboat is the SRE's lifeboat after the disaster: the copy's
// address, its credentials alone (a file of one profile, kept in
// outside) and the identity; nothing of the site.
func (st *stores) copyLifeboat(t *testing.T, bin, idFile, outside string) *lifeboat {
	t.Helper()
	creds := filepath.Join(outside, "aws-credentials")
	writeProfiles(t, creds, map[string]*s3test.Server{copyProfile: st.copy})
	dir := t.TempDir()
	return &lifeboat{
		bin: bin, store: "s3://" + copyBucket + "/lb", spool: filepath.Join(dir, "spool"),
		flags: append(s3Flags(st.copy, copyProfile), "--identity-file", idFile, "--scratch-dir", filepath.Join(dir, "scratch")),
		env:   awsEnv(creds, filepath.Join(dir, "no-such-aws-file")),
	}
}

// copiesConfig is the agent's copies: section, a copy named dr in the
// copy store, reached with its own profile.
func (st *stores) copiesConfig() string {
	return fmt.Sprintf(`copies:
  - name: %s
    url: s3://%s/lb
    s3:
      endpoint: %q
      region: %q
      path_style: true
      profile: %s
`, copyProfile, copyBucket, st.copy.Endpoint, st.copy.Region, copyProfile)
}

// needCopies fails the test (never skips it) when lifeboat does not take
// the copies: section: without copies there is nothing to restore from.
func needCopies(t *testing.T, l *lifeboat) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "copies.yaml")
	if err := os.WriteFile(f, []byte(fmt.Sprintf("store:\n  url: %q\n%s", l.store, l.agentConfig)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := l.runCode(t, "config", "check", "--config", f); code != 0 {
		t.Fatalf("lifeboat refuses the agent's copies: section (exit %d): the site-loss test needs the agent to copy to a second store (issue 22's copies)\n%s%s", code, out, errOut)
	}
}

// waitCopy waits until the agent's copy holds a backup with its kit (two
// of them) and is recoverable through revision through, reading the copy
// as the SRE will, with its credentials only.
func waitCopy(t *testing.T, dr *lifeboat, agent *captureAgent, through int64) {
	t.Helper()
	agent.waitCapturedIn(t, dr, through)
	size, keys := waitKitBackups(t, dr, 2)
	t.Logf("the copy's newest backup: %d keys, a %d KiB database", keys, size>>10)
}

// site is the control plane that is lost: the fake root with its PKI,
// etcd over TLS, kube-apiserver.
type site struct {
	root string
	tree kittest.Tree
	etcd *etcdtest.Process
	cli  *clientv3.Client
	api  *kubetest.Server
}

// startSite makes a kubeadm-like tree below root and starts etcd and
// kube-apiserver on it, as kubeadm's static pods would.
func startSite(t *testing.T, root, etcdBin, kubeBin string) *site {
	t.Helper()
	now := time.Now()
	s := &site{root: root, tree: kittest.Kubeadm(t, root, now, now.Add(365*24*time.Hour))}
	s.etcd = etcdtest.StartBinaryTLS(t, etcdBin, etcdTLS(s.pki()))
	s.cli = s.etcd.Client(t)
	s.api = kubetest.Start(t, apiOptions(kubeBin, root, s.etcd.ClientURL))
	return s
}

func (s *site) pki() string { return filepath.Join(s.root, "etc/kubernetes/pki") }

// etcdFlags are the lifeboat flags that reach the site's etcd, with the
// client certificate kubeadm makes for health checks.
func (s *site) etcdFlags() []string {
	p := s.pki()
	return []string{"--cacert", filepath.Join(p, "etcd/ca.crt"),
		"--cert", filepath.Join(p, "etcd/healthcheck-client.crt"), "--key", filepath.Join(p, "etcd/healthcheck-client.key")}
}

// agentArgs are the agent's flags beyond capture's: the kit of the
// kubeadm preset under the fake root, a short snapshot schedule and copy
// interval.
func (s *site) agentArgs() []string {
	return []string{"--kit-path", "kubeadm", "--kit-root", s.root, "--snapshot-schedule", "@every " + siteSnapshotEvery.String(),
		"--copy-interval", siteCopyEvery.String()}
}

// etcdTLS is how kubeadm's etcd serves with the certificates under pki:
// server.crt to clients, peer.crt to peers, both checked against the
// etcd CA; the test's own client presents healthcheck-client.crt.
func etcdTLS(pki string) *etcdtest.TLS {
	e := func(n string) string { return filepath.Join(pki, "etcd", n) }
	return &etcdtest.TLS{CAFile: e("ca.crt"), CertFile: e("server.crt"), KeyFile: e("server.key"),
		PeerCertFile: e("peer.crt"), PeerKeyFile: e("peer.key"),
		ClientCertFile: e("healthcheck-client.crt"), ClientKeyFile: e("healthcheck-client.key")}
}

// apiOptions is kube-apiserver as kubeadm runs it on the tree below root:
// serving with apiserver.crt, trusting ca.crt for clients and the front
// proxy's CA for aggregated requests, service-account keys sa.pub and
// sa.key, etcd over TLS with apiserver-etcd-client.crt, and the
// EncryptionConfiguration the manifest names.
func apiOptions(kubeBin, root, etcdURL string) kubetest.Options {
	p := func(n string) string { return filepath.Join(root, "etc/kubernetes/pki", n) }
	return kubetest.Options{
		Binary: kubeBin, EtcdServers: []string{etcdURL},
		EtcdCAFile: p("etcd/ca.crt"), EtcdCertFile: p("apiserver-etcd-client.crt"), EtcdKeyFile: p("apiserver-etcd-client.key"),
		ServingCertFile: p("apiserver.crt"), ServingKeyFile: p("apiserver.key"), ServingCAFile: p("ca.crt"),
		ServiceAccountKeyFile: p("sa.pub"), ServiceAccountSigningKeyFile: p("sa.key"),
		EncryptionConfigFile: filepath.Join(root, kittest.EncryptionConfig),
		Args: []string{
			"--client-ca-file", p("ca.crt"),
			"--requestheader-client-ca-file", p("front-proxy-ca.crt"),
			"--requestheader-allowed-names", "front-proxy-client",
			"--requestheader-username-headers", "X-Remote-User",
			"--requestheader-group-headers", "X-Remote-Group",
			"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
			"--proxy-client-cert-file", p("front-proxy-client.crt"),
			"--proxy-client-key-file", p("front-proxy-client.key"),
		},
	}
}

// destroy stops kube-apiserver and etcd and deletes etcd's data and the
// whole root: the PKI, the encryption config, the manifests.
func (s *site) destroy(t *testing.T) {
	t.Helper()
	s.api.Stop()
	s.etcd.Stop()
	for _, d := range []string{s.etcd.DataDir, s.root} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s after the disaster: %v", d, err)
		}
	}
}

// vault is what the site wrote in its namespace.
type vault struct {
	objects []kubeObject // the namespace first
	// token is a token of the ServiceAccount robot, issued by the
	// TokenRequest API before the disaster.
	token string
}

const robot = "robot"

// writeVault writes namespace vault with two Secrets, two ConfigMaps and
// the ServiceAccount robot, and has a token of robot issued.
func writeVault(t *testing.T, c *kubetest.Client) *vault {
	t.Helper()
	v := &vault{}
	v.create(t, c, kubetest.Namespaces, kubetest.NewNamespace(vaultNS), "")
	v.create(t, c, kubetest.Secrets, kubetest.NewSecret(vaultNS, "db", map[string][]byte{"password": []byte("hunter2"), "user": []byte("app")}), "data")
	v.create(t, c, kubetest.Secrets, kubetest.NewSecret(vaultNS, "tls", map[string][]byte{"key": bytes.Repeat([]byte("k"), 3000)}), "data")
	v.create(t, c, kubetest.ConfigMaps, kubetest.NewConfigMap(vaultNS, "app", map[string]string{"mode": "prod"}), "data")
	v.create(t, c, kubetest.ConfigMaps, kubetest.NewConfigMap(vaultNS, "flags", map[string]string{"beta": "true", "pad": strings.Repeat("x", 1500)}), "data")
	v.create(t, c, kubetest.ServiceAccounts, kubetest.NewServiceAccount(vaultNS, robot), "")
	tok, err := c.TokenRequest(t.Context(), vaultNS, robot, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	v.token = tok
	return v
}

// writeMore writes a Secret and a ConfigMap more into the namespace.
func (v *vault) writeMore(t *testing.T, c *kubetest.Client) {
	t.Helper()
	v.create(t, c, kubetest.Secrets, kubetest.NewSecret(vaultNS, "api", map[string][]byte{"token": []byte("s3cr3t-after-the-backup")}), "data")
	v.create(t, c, kubetest.ConfigMaps, kubetest.NewConfigMap(vaultNS, "late", map[string]string{"k": "v"}), "data")
}

func (v *vault) create(t *testing.T, c *kubetest.Client, r kubetest.Resource, obj kubetest.Object, field string) {
	t.Helper()
	got, err := c.Create(t.Context(), r, vaultNS, obj)
	if err != nil {
		t.Fatalf("create %s %s: %v", r.Plural, kubetest.Name(obj), err)
	}
	ko := kubeObject{r: r, ns: vaultNS, name: kubetest.Name(got), uid: kubetest.Meta(got, "uid"), field: field, want: got[field], createdRV: kubetest.Meta(got, "resourceVersion")}
	if r == kubetest.Namespaces {
		ko.ns = ""
	}
	if field == "" {
		ko.want = nil
	}
	v.objects = append(v.objects, ko)
}

func (v *vault) secrets() []kubeObject {
	var ss []kubeObject
	for _, o := range v.objects {
		if o.r == kubetest.Secrets {
			ss = append(ss, o)
		}
	}
	return ss
}

// aescbcPrefix begins every Secret kube-apiserver stored with the
// kubeadm tree's EncryptionConfiguration (provider aescbc, key key1).
const aescbcPrefix = "k8s:enc:aescbc:v1:key1:"

// checkEncryptedAtRest checks that etcd holds every Secret of v as
// aescbc ciphertext, no plaintext value in it.
func (s *site) checkEncryptedAtRest(t *testing.T, v *vault) {
	t.Helper()
	for _, o := range v.secrets() {
		key := "/registry/secrets/" + o.ns + "/" + o.name
		resp, err := s.cli.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Errorf("%s: %d keys in etcd, want 1", key, len(resp.Kvs))
			continue
		}
		raw := resp.Kvs[0].Value
		if !bytes.HasPrefix(raw, []byte(aescbcPrefix)) {
			t.Errorf("%s in etcd begins %q, want %q (encrypted at rest)", key, raw[:min(len(raw), 30)], aescbcPrefix)
		}
		if bytes.Contains(raw, []byte("hunter2")) || bytes.Contains(raw, []byte("s3cr3t")) {
			t.Errorf("%s in etcd holds a plaintext value", key)
		}
	}
}

// checkToken checks that c's server accepts v's token as the
// ServiceAccount robot, and refuses it with its signature changed (the
// check can fail: the token is verified, not merely parsed).
func checkToken(t *testing.T, c *kubetest.Client, v *vault) {
	t.Helper()
	ctx := t.Context()
	user, err := c.WithToken(v.token).WhoAmI(ctx)
	if want := "system:serviceaccount:" + vaultNS + ":" + robot; err != nil || user != want {
		t.Errorf("the token issued before the disaster authenticates as %q (%v), want %q", user, err, want)
	}
	forged := forgeSignature(v.token)
	if user, err := c.WithToken(forged).WhoAmI(ctx); !kubetest.IsUnauthorized(err) {
		t.Errorf("a token with a changed signature: user %q, %v; want 401", user, err)
	}
}

// forgeSignature changes the first character of a JWT's signature.
func forgeSignature(jwt string) string {
	i := strings.LastIndex(jwt, ".") + 1
	b := []byte(jwt)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// fileState is a file's mode and content.
type fileState struct {
	mode os.FileMode
	data []byte
}

// readTree reads the files (kit paths) below root.
func readTree(t *testing.T, root string, files []string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	for _, p := range files {
		host := filepath.Join(root, p)
		fi, err := os.Stat(host)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		m[p] = fileState{mode: fi.Mode().Perm(), data: b}
	}
	return m
}

// checkTree checks that every file of want is below root with its mode
// and content.
func checkTree(t *testing.T, root string, want map[string]fileState) {
	t.Helper()
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	got := readTree(t, root, paths)
	for p, w := range want {
		if g := got[p]; g.mode != w.mode || !bytes.Equal(g.data, w.data) {
			t.Errorf("%s restored with mode %v and %d bytes, want mode %v and its %d bytes", p, g.mode, len(g.data), w.mode, len(w.data))
		}
	}
}

// waitKitBackups polls `lifeboat list` until n backups name a kit, all
// the same one, and returns the newest one's database size and keys.
func waitKitBackups(t *testing.T, l *lifeboat, n int) (dbSize int64, keys int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var list struct {
			Backups []struct {
				ID       string
				Manifest struct {
					Kit       string
					DBSize    int64 `json:"db_size"`
					TotalKeys int   `json:"total_keys"`
				}
			}
		}
		if err := json.Unmarshal([]byte(l.run(t, "list", "-o", "json")), &list); err != nil {
			t.Fatal(err)
		}
		kits := map[string]bool{}
		for _, b := range list.Backups {
			if b.Manifest.Kit == "" {
				t.Fatalf("backup %s names no kit", b.ID)
			}
			kits[b.Manifest.Kit] = true
		}
		if len(kits) > 1 {
			t.Fatalf("the backups name %d kits, want one (the files did not change)", len(kits))
		}
		if len(list.Backups) >= n {
			return list.Backups[0].Manifest.DBSize, list.Backups[0].Manifest.TotalKeys
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backups with a kit in %s after a minute, want %d", len(list.Backups), l.store, n)
		}
		time.Sleep(200 * time.Millisecond) // polling the store against a deadline
	}
}

// newestRevision is the newest revision a point-in-time restore from l's
// store can reach: the end of its newest recoverable window.
func newestRevision(t *testing.T, l *lifeboat) int64 {
	t.Helper()
	ws := l.windows(t)
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].Recoverable && ws[i].Problem == "" {
			return ws[i].Through
		}
	}
	t.Fatalf("no recoverable window in %s: %+v", l.store, ws)
	return 0
}

// restoreArgsTLS are the arguments of a restore of one member named m0
// into dataDir whose peer URL is https (the restored etcd serves peers
// with peer.crt), and extra.
func restoreArgsTLS(t *testing.T, dataDir string, extra ...string) []string {
	peer := fmt.Sprintf("https://127.0.0.1:%d", freePort(t))
	args := append([]string{"restore"}, extra...)
	return append(args, "--data-dir", dataDir, "--name", "m0", "--initial-advertise-peer-urls", peer)
}
