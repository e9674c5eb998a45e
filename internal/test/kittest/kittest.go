// Package kittest builds, for tests only, the files a recovery kit
// collects: a kubeadm-like control-plane tree (a PKI made with crypto/x509,
// a kube-apiserver static pod manifest naming an EncryptionConfiguration)
// or a k3s-like server directory, below a temporary root. It also makes
// age identities.
package kittest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"filippo.io/age"
)

// EncryptionConfig is where the kube-apiserver manifest of Kubeadm says
// the EncryptionConfiguration is.
const EncryptionConfig = "/etc/kubernetes/enc/encryption-config.yaml"

const kubeadmManifest = "/etc/kubernetes/manifests/kube-apiserver.yaml"

// Tree describes a tree Kubeadm made.
type Tree struct {
	Root string
	// Files are the kit paths (without Root) of every file written that a
	// kubeadm kit must hold.
	Files []string
	// EarliestExpiry is the soonest NotAfter among its certificates.
	EarliestExpiry time.Time
	// Pairs is how many certificates (or public keys) it holds with the
	// private key beside them (ca.crt and ca.key, sa.pub and sa.key).
	Pairs int
}

// Kubeadm writes a kubeadm-like tree below root: /etc/kubernetes/pki with
// the cluster CA, apiserver certificate, service-account key pair,
// front-proxy CA and client, etcd's CA, server, peer and healthcheck-client
// certificates, and the apiserver's etcd client certificate (ECDSA and RSA
// keys mixed, as kubeadm makes them), each leaf valid for 127.0.0.1 so that
// etcd and kube-apiserver can serve with them; the kube-apiserver
// static pod manifest naming EncryptionConfig with
// --encryption-provider-config; and that aescbc config. notAfter is the
// apiserver certificate's expiry (the earliest); the CAs get ten years
// after now.
func Kubeadm(t testing.TB, root string, now, notAfter time.Time) Tree {
	t.Helper()
	tr := Tree{Root: root, EarliestExpiry: notAfter.UTC().Truncate(time.Second)}
	pki := "/etc/kubernetes/pki"
	write := func(p string, mode os.FileMode, data []byte) {
		t.Helper()
		host := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(host, mode); err != nil {
			t.Fatal(err)
		}
		tr.Files = append(tr.Files, p)
	}
	caUntil := now.Add(10 * 365 * 24 * time.Hour)
	ca := newCert(t, "kubernetes", nil, caUntil, true, false)
	write(pki+"/ca.crt", 0o644, ca.certPEM)
	write(pki+"/ca.key", 0o600, ca.keyPEM)
	api := newCert(t, "kube-apiserver", ca, notAfter, false, false)
	write(pki+"/apiserver.crt", 0o644, api.certPEM)
	write(pki+"/apiserver.key", 0o600, api.keyPEM)
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write(pki+"/sa.key", 0o600, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}))
	write(pki+"/sa.pub", 0o644, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	fp := newCert(t, "front-proxy-ca", nil, caUntil, true, false)
	write(pki+"/front-proxy-ca.crt", 0o644, fp.certPEM)
	write(pki+"/front-proxy-ca.key", 0o600, fp.keyPEM)
	fpc := newCert(t, "front-proxy-client", fp, caUntil.Add(-time.Hour), false, true)
	write(pki+"/front-proxy-client.crt", 0o644, fpc.certPEM)
	write(pki+"/front-proxy-client.key", 0o600, fpc.keyPEM)
	eca := newCert(t, "etcd-ca", nil, caUntil, true, false)
	write(pki+"/etcd/ca.crt", 0o644, eca.certPEM)
	write(pki+"/etcd/ca.key", 0o600, eca.keyPEM)
	for _, n := range []string{"server", "peer", "healthcheck-client"} {
		c := newCert(t, n, eca, caUntil.Add(-2*time.Hour), false, false)
		write(pki+"/etcd/"+n+".crt", 0o644, c.certPEM)
		write(pki+"/etcd/"+n+".key", 0o600, c.keyPEM)
	}
	ec := newCert(t, "kube-apiserver-etcd-client", eca, caUntil.Add(-3*time.Hour), false, false)
	write(pki+"/apiserver-etcd-client.crt", 0o644, ec.certPEM)
	write(pki+"/apiserver-etcd-client.key", 0o600, ec.keyPEM)
	tr.Pairs = 10
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	write(EncryptionConfig, 0o600, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: `+base64.StdEncoding.EncodeToString(secret)+`
      - identity: {}
`))
	write(kubeadmManifest, 0o600, []byte(`apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - name: kube-apiserver
    image: registry.k8s.io/kube-apiserver:v1.37.2
    command:
    - kube-apiserver
    - --advertise-address=10.0.0.11
    - --client-ca-file=/etc/kubernetes/pki/ca.crt
    - --encryption-provider-config=`+EncryptionConfig+`
    - --etcd-servers=https://127.0.0.1:2379
`))
	tr.Files = slices.DeleteFunc(tr.Files, func(p string) bool { return p == kubeadmManifest }) // not part of the kit
	return tr
}

// K3s writes a k3s-like server directory below root: the token, tls
// with a CA pair, cred with a passwd file.
func K3s(t testing.TB, root string, now time.Time) Tree {
	t.Helper()
	base := filepath.Join(root, "var/lib/rancher/k3s/server")
	ca := newCert(t, "k3s-server-ca", nil, now.Add(365*24*time.Hour), true, false)
	files := map[string][]byte{
		"token":             []byte("K10abc::server:0123456789abcdef\n"),
		"tls/server-ca.crt": ca.certPEM,
		"tls/server-ca.key": ca.keyPEM,
		"cred/passwd":       []byte("secret,node,node,k3s:agent\n"),
		"db/state.db":       []byte("not in the kit"),
	}
	tr := Tree{Root: root, EarliestExpiry: ca.cert.NotAfter}
	for p, b := range files {
		host := filepath.Join(base, p)
		if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if p != "db/state.db" {
			tr.Files = append(tr.Files, "/var/lib/rancher/k3s/server/"+p)
		}
	}
	return tr
}

// Identity returns a new age identity and writes it to a file in dir.
func Identity(t testing.TB, dir string) (*age.X25519Identity, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "identity-"+id.Recipient().String()[4:12]+".txt")
	if err := os.WriteFile(f, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id, f
}

type certKey struct {
	cert    *x509.Certificate
	key     any
	certPEM []byte
	keyPEM  []byte
}

// newCert makes a certificate for cn signed by parent (self-signed when
// nil); leaves are valid for 127.0.0.1 and localhost, for server and
// client authentication, so that a restored etcd can serve with them.
func newCert(t testing.TB, cn string, parent *certKey, notAfter time.Time, isCA, rsaKey bool) *certKey {
	t.Helper()
	var (
		key    any
		pub    any
		keyPEM []byte
	)
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		key, pub = k, &k.PublicKey
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		key, pub = k, &k.PublicKey
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore(notAfter),
		NotAfter:              notAfter.UTC().Truncate(time.Second),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  isCA,
	}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost", cn}
	}
	signer, signerCert := key, tmpl
	if parent != nil {
		signer, signerCert = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, pub, signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &certKey{cert: c, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}
}

// notBefore is an hour ago, or a day before notAfter when that is earlier
// (tests at a fixed time in the past).
func notBefore(notAfter time.Time) time.Time {
	nb := time.Now().Add(-time.Hour)
	if !nb.Before(notAfter) {
		nb = notAfter.Add(-24 * time.Hour)
	}
	return nb
}
