package etcdtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pki is a certificate authority that can sign leaf certificates.
type pki struct {
	cert   *x509.Certificate
	key    crypto.Signer
	caFile string
}

// certValidity is long enough for any test run and independent of the clock
// skew of the machine (NotBefore is backdated).
const certValidity = 24 * time.Hour

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// newCA creates a self-signed ECDSA P-256 CA and writes its certificate to
// dir/name-ca.pem.
func newCA(dir, name string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ca key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("generate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name + " test CA", Organization: []string{"lifeboat etcdtest"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse ca certificate: %w", err)
	}
	caFile := filepath.Join(dir, name+"-ca.pem")
	if err := writePEM(caFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return &pki{cert: cert, key: key, caFile: caFile}, nil
}

// leaf signs a certificate for 127.0.0.1 and localhost with the given
// extended key usages and writes it and its key to dir/name.pem and
// dir/name-key.pem.
func (p *pki) leaf(dir, name, commonName string, usages ...x509.ExtKeyUsage) (certFile, keyFile string, err error) {
	return p.leafFor(dir, name, commonName, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, usages...)
}

// leafFor is leaf for the addresses ips (and localhost).
func (p *pki) leafFor(dir, name, commonName string, ips []net.IP, usages ...x509.ExtKeyUsage) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate key for %s: %w", name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return "", "", fmt.Errorf("generate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"lifeboat etcdtest"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     []string{"localhost"},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		return "", "", fmt.Errorf("create certificate %s: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("marshal key for %s: %w", name, err)
	}
	certFile = filepath.Join(dir, name+".pem")
	keyFile = filepath.Join(dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// clientCommonName is the CN of generated client certificates. It is
// deliberately not an etcd user: with auth enabled, etcd would otherwise
// accept the certificate's CN as the user name and a client without a
// password would be let in.
const clientCommonName = "lifeboat-etcdtest-client"

// OtherCA creates an unrelated CA and a client certificate signed by it, in a
// temp dir, for "wrong CA / wrong certificate" tests. The returned caFile
// does not trust the clusters Start creates, and the certificate is not
// trusted by them.
func OtherCA(t testing.TB) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := newCA(dir, "other")
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	certFile, keyFile, err = ca.leaf(dir, "other-client", clientCommonName,
		x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return ca.caFile, certFile, keyFile
}

// SignMember signs, with the CA in caCertFile and caKeyFile (PEM; the key
// PKCS#1, PKCS#8 or EC, as kubeadm's etcd CA is), a certificate an etcd
// member serves and dials its peers with (server and client use) for
// the addresses ips and 127.0.0.1, written to dir/name.pem and
// dir/name-key.pem.
func SignMember(t testing.TB, caCertFile, caKeyFile, dir, name string, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	ca, err := loadCA(caCertFile, caKeyFile)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	certFile, keyFile, err = ca.leafFor(dir, name, name, append(ips, net.IPv4(127, 0, 0, 1)), x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return certFile, keyFile
}

// loadCA reads a CA's certificate and key.
func loadCA(certFile, keyFile string) (*pki, error) {
	block, err := readPEM(certFile)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	kb, err := readPEM(keyFile)
	if err != nil {
		return nil, err
	}
	var key crypto.Signer
	if k, err := x509.ParsePKCS1PrivateKey(kb.Bytes); err == nil {
		key = k
	} else if k, err := x509.ParseECPrivateKey(kb.Bytes); err == nil {
		key = k
	} else if k, err := x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s: a %T cannot sign", keyFile, k)
		}
		key = s
	} else {
		return nil, fmt.Errorf("%s: not a PKCS#1, EC or PKCS#8 private key", keyFile)
	}
	return &pki{cert: cert, key: key, caFile: certFile}, nil
}

func readPEM(file string) (*pem.Block, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", file)
	}
	return block, nil
}
