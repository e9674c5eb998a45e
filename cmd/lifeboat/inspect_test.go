package main

import (
	"bytes"
	gocipher "crypto/aes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// kubeObject encodes obj as kube-apiserver stores it (protobuf in the
// k8s\0 envelope), with the official scheme.
func kubeObject(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	gvks, _, err := s.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	var b bytes.Buffer
	if err := protobuf.NewSerializer(s, s).Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sealCBC encrypts plain as kube-apiserver's aescbc provider does, with
// k8s.io/apiserver's own transformer.
func sealCBC(t testing.TB, keyName string, key []byte, plain []byte) []byte {
	t.Helper()
	block, err := gocipher.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := aestransformer.NewCBCTransformer(block).TransformToStorage(t.Context(), plain, value.DefaultContext(""))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("k8s:enc:aescbc:v1:"+keyName+":"), out...)
}

func meta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, UID: "0b7c5a1e-1111-2222-3333-444455556666",
		ResourceVersion: "12", CreationTimestamp: metav1.Unix(1764547200, 0), Generation: 3,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
		Labels:        map[string]string{"app": name}}
}

// ownedMeta is meta of an object owned by a ReplicaSet (uid 9f1d…):
// what get --for-apply must not carry over to a cluster where that uid
// is gone.
func ownedMeta(ns, name string) metav1.ObjectMeta {
	m := meta(ns, name)
	controller := true
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d4",
		UID: "9f1d2c3b-aaaa-bbbb-cccc-ddddeeeeffff", Controller: &controller}}
	return m
}

type inspectEnv struct {
	c     *etcdtest.Cluster
	cli   *clientv3.Client
	args  []string // store, cache, identity
	enc   string   // the EncryptionConfiguration file
	wrong string   // one with the wrong aescbc key
	dir   string
}

func writeEncryptionConfig(t *testing.T, path string, key []byte) {
	t.Helper()
	cfg := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: %s
      - identity: {}
`, base64.StdEncoding.EncodeToString(key))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newInspectEnv writes Kubernetes objects (protobuf), a CRD instance
// (JSON), a raw value, a tombstoned key, an aescbc-encrypted Secret and a
// KMS-encrypted one into a real etcd.
func newInspectEnv(t *testing.T) *inspectEnv {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	e := &inspectEnv{c: c, cli: c.Client(t), dir: t.TempDir()}
	key := bytes.Repeat([]byte{7}, 32)
	e.enc = filepath.Join(e.dir, "enc.yaml")
	writeEncryptionConfig(t, e.enc, key)
	e.wrong = filepath.Join(e.dir, "wrong.yaml")
	writeEncryptionConfig(t, e.wrong, bytes.Repeat([]byte{8}, 32))
	replicas := int32(2)
	secret := kubeObject(t, &corev1.Secret{ObjectMeta: meta("shop", "db"), Data: map[string][]byte{"password": []byte("hunter2")}})
	puts := []struct{ k, v string }{
		{"/registry/namespaces/shop", string(kubeObject(t, &corev1.Namespace{ObjectMeta: meta("", "shop"), Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}))},
		{"/registry/namespaces/other", string(kubeObject(t, &corev1.Namespace{ObjectMeta: meta("", "other")}))},
		{"/registry/configmaps/shop/web-config", string(kubeObject(t, &corev1.ConfigMap{ObjectMeta: meta("shop", "web-config"), Data: map[string]string{"color": "blue"}}))},
		{"/registry/configmaps/other/keep", string(kubeObject(t, &corev1.ConfigMap{ObjectMeta: meta("other", "keep"), Data: map[string]string{"a": "b"}}))},
		{"/registry/deployments/shop/web", string(kubeObject(t, &appsv1.Deployment{ObjectMeta: meta("shop", "web"),
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}}},
			Status: appsv1.DeploymentStatus{Replicas: 2}}))},
		{"/registry/pods/shop/web-7d4-x2v", string(kubeObject(t, &corev1.Pod{ObjectMeta: ownedMeta("shop", "web-7d4-x2v"),
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}}))},
		{"/registry/example.com/widgets/shop/w1", `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"shop","uid":"u-1","resourceVersion":"9"},"spec":{"size":3}}`},
		{"/registry/secrets/shop/db", string(sealCBC(t, "key1", key, secret))},
		{"/registry/secrets/shop/vault", "k8s:enc:kms:v2:vault:\x0a\x03\x01\x02\x03"},
		{"/raw/blob", "\x00\x01\x02binary"},
		{"/registry/configmaps/shop/gone", string(kubeObject(t, &corev1.ConfigMap{ObjectMeta: meta("shop", "gone")}))},
	}
	for _, p := range puts {
		if _, err := e.cli.Put(t.Context(), p.k, p.v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cli.Delete(t.Context(), "/registry/configmaps/shop/gone"); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestInspectCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newInspectEnv(t)
	id, _ := age.GenerateX25519Identity()
	other, _ := age.GenerateX25519Identity()
	idFile := writeFile(t, "id.txt", id.String()+"\n")
	otherFile := writeFile(t, "other.txt", other.String()+"\n")
	store := "file://" + filepath.Join(e.dir, "store")
	cache := filepath.Join(e.dir, "cache")
	base := []string{"--store", store, "--cluster", "prod", "--log-level", "error", "--spool-dir", filepath.Join(e.dir, "spool")}
	snap := func(t *testing.T) {
		t.Helper()
		code, out, errOut := runCLI(t, nil, append([]string{"snapshot", "--endpoints", e.c.Endpoints()[0], "--recipient", id.Recipient().String()}, base...)...)
		if code != 0 {
			t.Fatalf("snapshot exit %d\n%s%s", code, out, errOut)
		}
	}
	snap(t)
	cli := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, nil, append(append(args, base...), "--cache-dir", cache, "--identity-file", idFile)...)
	}

	t.Run("ls", func(t *testing.T) {
		code, out, errOut := cli(t, "ls", "latest", "/registry/")
		if code != 0 {
			t.Fatalf("ls exit %d\n%s%s", code, out, errOut)
		}
		if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("cache dir %v %v, want 0700", fi, err)
		}
		for _, want := range []string{"web-config", "deployments", "secrets", "encrypted:aescbc:key1", "encrypted:kms:vault", "json", "protobuf"} {
			if !strings.Contains(out, want) {
				t.Errorf("ls output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "gone") {
			t.Errorf("ls lists the deleted key:\n%s", out)
		}
		code, out, _ = cli(t, "ls", "latest", "/registry/configmaps/", "-o", "json")
		var rows []lsEntry
		if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil {
			t.Fatalf("ls -o json exit %d: %v\n%s", code, err, out)
		}
		var keys []string
		for _, r := range rows {
			keys = append(keys, r.Key)
		}
		if want := []string{"/registry/configmaps/other/keep", "/registry/configmaps/shop/web-config"}; !slices.Equal(keys, want) {
			t.Errorf("ls -o json keys %v, want %v", keys, want)
		}
		if rows[1].Resource != "configmaps" || rows[1].Namespace != "shop" || rows[1].Name != "web-config" || rows[1].ModRevision == 0 || rows[1].Encoding != "protobuf" {
			t.Errorf("row %+v", rows[1])
		}
	})

	t.Run("empty prefix", func(t *testing.T) {
		code, out, errOut := cli(t, "ls", "latest", "/registry/nothing/")
		if code != 0 || out != "" {
			t.Errorf("ls of an empty prefix: exit %d %q %s", code, out, errOut)
		}
		code, out, _ = cli(t, "ls", "latest", "/registry/nothing/", "-o", "json")
		if code != 0 || strings.TrimSpace(out) != "[]" {
			t.Errorf("ls -o json of an empty prefix: exit %d %q", code, out)
		}
	})

	t.Run("get decoded", func(t *testing.T) {
		code, out, errOut := cli(t, "get", "latest", "/registry/deployments/shop/web")
		if code != 0 {
			t.Fatalf("get exit %d\n%s%s", code, out, errOut)
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(out), &d); err != nil || d.Kind != "Deployment" || d.APIVersion != "apps/v1" ||
			d.Spec.Template.Spec.Containers[0].Image != "nginx:1.27" || d.UID == "" {
			t.Errorf("get yaml: %v\n%s", err, out)
		}
		code, out, _ = cli(t, "get", "latest", "/registry/example.com/widgets/shop/w1", "-o", "json")
		if code != 0 || !strings.Contains(out, `"kind": "Widget"`) || !strings.Contains(out, `"size": 3`) {
			t.Errorf("get of a JSON value: exit %d\n%s", code, out)
		}
		code, out, _ = cli(t, "get", "latest", "/raw/blob", "-o", "raw")
		if code != 0 || out != "\x00\x01\x02binary" {
			t.Errorf("get -o raw: exit %d %q", code, out)
		}
		code, out, _ = cli(t, "get", "latest", "/raw/blob")
		if code != 0 || !strings.Contains(out, "format: raw") || !strings.Contains(out, "size: 9") {
			t.Errorf("get of a raw value: exit %d\n%s", code, out)
		}
	})

	t.Run("for apply", func(t *testing.T) {
		code, out, errOut := cli(t, "get", "latest", "/registry/deployments/shop/web", "--for-apply")
		if code != 0 {
			t.Fatalf("get --for-apply exit %d\n%s%s", code, out, errOut)
		}
		for _, gone := range []string{"resourceVersion", "uid:", "creationTimestamp: \"20", "managedFields", "generation", "status:"} {
			if strings.Contains(out, gone) {
				t.Errorf("--for-apply keeps %q:\n%s", gone, out)
			}
		}
		if !strings.Contains(out, "name: web") || !strings.Contains(out, "app: web") {
			t.Errorf("--for-apply lost the object:\n%s", out)
		}
	})

	t.Run("for apply drops owner references", func(t *testing.T) {
		const key, owner = "/registry/pods/shop/web-7d4-x2v", "ReplicaSet web-7d4 (uid 9f1d2c3b-aaaa-bbbb-cccc-ddddeeeeffff)"
		code, out, errOut := cli(t, "get", "latest", key)
		if code != 0 || !strings.Contains(out, "ownerReferences") {
			t.Fatalf("get without --for-apply: exit %d, want the owner references kept\n%s%s", code, out, errOut)
		}
		for _, format := range []string{"yaml", "json"} {
			code, out, errOut := cli(t, "get", "latest", key, "--for-apply", "-o", format)
			if code != 0 {
				t.Fatalf("get --for-apply -o %s: exit %d\n%s%s", format, code, out, errOut)
			}
			if strings.Contains(out, "9f1d2c3b-aaaa") && format == "json" || strings.Contains(out, "\n  ownerReferences:") {
				t.Errorf("get --for-apply -o %s keeps the owner references:\n%s", format, out)
			}
			if !strings.Contains(errOut, key+": dropped metadata.ownerReferences: "+owner) || !strings.Contains(errOut, "--keep-owner-references") {
				t.Errorf("get --for-apply -o %s: stderr does not name the dropped owner:\n%s", format, errOut)
			}
			if format == "json" {
				var obj map[string]any
				if err := json.Unmarshal([]byte(out), &obj); err != nil || obj["kind"] != "Pod" {
					t.Errorf("get --for-apply -o json: not one object (%v):\n%s", err, out)
				}
			} else if !strings.Contains(out, "# dropped metadata.ownerReferences: "+owner) {
				t.Errorf("get --for-apply: no comment names the dropped owner:\n%s", out)
			}
		}
		code, out, errOut = cli(t, "get", "latest", "/registry/pods/shop/", "--prefix", "--for-apply")
		if code != 0 || strings.Contains(out, "\n  ownerReferences:") || !strings.Contains(errOut, key+": dropped metadata.ownerReferences: "+owner) {
			t.Errorf("get --prefix --for-apply: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "get", "latest", key, "--for-apply", "--keep-owner-references")
		if code != 0 || !strings.Contains(out, "\n  ownerReferences:") || !strings.Contains(out, "uid: 9f1d2c3b-aaaa-bbbb-cccc-ddddeeeeffff") ||
			strings.Contains(out, "resourceVersion") || strings.Contains(errOut, "dropped") {
			t.Errorf("get --for-apply --keep-owner-references: exit %d\n%s%s", code, out, errOut)
		}
		code, _, errOut = cli(t, "get", "latest", key, "--keep-owner-references")
		if code != 2 || !strings.Contains(errOut, "--for-apply") {
			t.Errorf("--keep-owner-references without --for-apply: exit %d %s", code, errOut)
		}
	})

	t.Run("encrypted at rest", func(t *testing.T) {
		code, out, errOut := cli(t, "get", "latest", "/registry/secrets/shop/db", "--encryption-config", e.enc)
		if code != 0 || !strings.Contains(out, "kind: Secret") || !strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("hunter2"))) {
			t.Errorf("get with the encryption config: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "get", "latest", "/registry/secrets/shop/db")
		if code != 1 || !strings.Contains(errOut, "encrypted at rest with aescbc key \"key1\"") || !strings.Contains(errOut, "--encryption-config") {
			t.Errorf("get without the config: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "get", "latest", "/registry/secrets/shop/db", "--encryption-config", e.wrong)
		if code != 1 || !strings.Contains(errOut, "wrong key") || strings.Contains(out, "hunter2") {
			t.Errorf("get with the wrong key: exit %d\n%s%s", code, out, errOut)
		}
		// The listing goes on past the KMS value, which says so.
		code, out, errOut = cli(t, "get", "latest", "/registry/secrets/", "--prefix", "--encryption-config", e.enc)
		if code != 0 || !strings.Contains(out, "name: db") || !strings.Contains(errOut, "/registry/secrets/shop/vault: encrypted at rest with KMS provider vault") ||
			!strings.Contains(errOut, "cannot decrypt offline") {
			t.Errorf("get --prefix with a KMS value: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("not found", func(t *testing.T) {
		for _, k := range []string{"/registry/configmaps/shop/nope", "/registry/configmaps/shop/gone"} {
			code, _, errOut := cli(t, "get", "latest", k)
			if code != 1 || !strings.Contains(errOut, k+": not found at revision ") {
				t.Errorf("get %s: exit %d %s", k, code, errOut)
			}
		}
	})

	t.Run("bad source", func(t *testing.T) {
		code, _, errOut := cli(t, "get", "yesterday", "/registry/x")
		if code != 2 || !strings.Contains(errOut, "not a backup id") {
			t.Errorf("bad source: exit %d %s", code, errOut)
		}
		code, _, errOut = cli(t, "ls", "20200101T000000Z-r1")
		if code != 1 {
			t.Errorf("unknown backup id: exit %d %s", code, errOut)
		}
	})

	t.Run("wrong identity", func(t *testing.T) {
		code, _, errOut := runCLI(t, nil, append([]string{"ls", "latest", "--cache-dir", filepath.Join(e.dir, "cache2"), "--identity-file", otherFile}, base...)...)
		if code != 2 || !strings.Contains(errOut, "identit") {
			t.Errorf("wrong identity: exit %d %s", code, errOut)
		}
	})

	t.Run("corrupt cached copy", func(t *testing.T) {
		dbs, _ := filepath.Glob(filepath.Join(cache, "prod", "*", "snapshot.db"))
		if len(dbs) != 1 {
			t.Fatalf("cached snapshots %v", dbs)
		}
		f, err := os.OpenFile(dbs[0], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		if _, err := f.WriteAt([]byte("garbage!"), fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		f.Close()
		code, out, errOut := runCLI(t, nil, []string{"get", "latest", "/registry/configmaps/shop/web-config", "--cache-dir", cache,
			"--identity-file", idFile, "--store", store, "--cluster", "prod", "--spool-dir", filepath.Join(e.dir, "spool")}...)
		if code != 0 || !strings.Contains(out, "color: blue") {
			t.Fatalf("get after corrupting the cache: exit %d\n%s%s", code, out, errOut)
		}
		if !strings.Contains(errOut, "fetched, checked") || !strings.Contains(errOut, "not usable") {
			t.Errorf("the corrupt copy was not re-fetched (or not said):\n%s", errOut)
		}
		// A second get is served from the cache, silently.
		code, _, errOut = cli(t, "get", "latest", "/registry/configmaps/shop/web-config")
		if code != 0 || errOut != "" {
			t.Errorf("get from the cache: exit %d %s", code, errOut)
		}
	})

	t.Run("diff around a namespace deletion", func(t *testing.T) {
		code, out, _ := cli(t, "ls", "latest", "-o", "json")
		var before []lsEntry
		if err := json.Unmarshal([]byte(out), &before); code != 0 || err != nil {
			t.Fatal(code, err)
		}
		var deleted []string
		for _, r := range before {
			if r.Namespace == "shop" || r.Key == "/registry/namespaces/shop" {
				deleted = append(deleted, r.Key)
				if _, err := e.cli.Delete(t.Context(), r.Key); err != nil {
					t.Fatal(err)
				}
			}
		}
		code, out, _ = cli(t, "ls", "latest", "-o", "json")
		var rows []lsEntry
		json.Unmarshal([]byte(out), &rows)
		older := ""
		l, _ := os.ReadDir(filepath.Join(e.dir, "store", "prod", "snapshots"))
		for _, f := range l {
			if strings.HasSuffix(f.Name(), ".json") {
				older = strings.TrimSuffix(f.Name(), ".json")
			}
		}
		snap(t)
		code, out, errOut := cli(t, "diff", older, "latest")
		if code != 0 {
			t.Fatalf("diff exit %d\n%s%s", code, out, errOut)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(line, "- ") {
				t.Errorf("diff line %q: want only deletions", line)
				continue
			}
			got = append(got, strings.Fields(line)[1])
		}
		if !slices.Equal(got, deleted) {
			t.Errorf("diff deleted %v, want %v", got, deleted)
		}
		if !strings.Contains(errOut, fmt.Sprintf("0 added, %d deleted, 0 changed", len(deleted))) {
			t.Errorf("diff summary: %s", errOut)
		}
		code, out, _ = cli(t, "diff", older, "latest", "/registry/configmaps/", "--values")
		if code != 0 || !strings.Contains(out, "-  color: blue") || !strings.Contains(out, "--- "+older) {
			t.Errorf("diff --values: exit %d\n%s", code, out)
		}

		// The cache is bounded: with room for less than one backup, each
		// open leaves only the backup in use (least recently used first).
		for _, src := range []string{older, "latest"} {
			if code, _, errOut := cli(t, "ls", src, "--cache-max-size", "1"); code != 0 {
				t.Fatalf("ls %s with a tiny cache: exit %d %s", src, code, errOut)
			}
		}
		entries, _ := filepath.Glob(filepath.Join(cache, "prod", "*"))
		if len(entries) != 1 || filepath.Base(entries[0]) == older {
			t.Errorf("cache entries with --cache-max-size 1: %v, want only the newest backup", entries)
		}
	})
}

// TestInspectS3: the first query of a backup in S3 (versitygw) fetches
// it into the cache; later ones read the cache only.
func TestInspectS3(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd and S3")
	}
	e := newInspectEnv(t)
	srv := s3test.Start(t)
	srv.CreateBucket(t, "backups", false)
	env := s3CLIEnv(t, srv)
	base := []string{"--store", "s3://backups/etcd", "--s3-endpoint", srv.Endpoint, "--s3-path-style", "--s3-region", srv.Region,
		"--cluster", "prod", "--log-level", "error", "--spool-dir", filepath.Join(e.dir, "spool")}
	if code, out, errOut := runCLI(t, env, append([]string{"snapshot", "--endpoints", e.c.Endpoints()[0]}, base...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s%s", code, out, errOut)
	}
	cache := filepath.Join(e.dir, "cache")
	code, out, errOut := runCLI(t, env, append([]string{"get", "latest", "/registry/configmaps/shop/web-config", "--cache-dir", cache}, base...)...)
	if code != 0 || !strings.Contains(out, "color: blue") || !strings.Contains(errOut, "fetched, checked") {
		t.Fatalf("first get from S3: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, env, append([]string{"get", "latest", "/registry/configmaps/shop/web-config", "--cache-dir", cache}, base...)...)
	if code != 0 || !strings.Contains(out, "color: blue") || errOut != "" {
		t.Errorf("second get: exit %d\n%s%s", code, out, errOut)
	}
}
