package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

const (
	// readyTimeout bounds the wait for /readyz: the server is ready in
	// 10–30 s on an idle 2-core machine, much later on a busy one.
	readyTimeout = 3 * time.Minute
	// stopTimeout is how long Stop waits after SIGTERM before SIGKILL:
	// kube-apiserver's graceful shutdown can hang.
	stopTimeout = 20 * time.Second
	// startAttempts is how often Start retries when the picked port was
	// taken between picking and binding.
	startAttempts = 3
	// BinaryEnv names the kube-apiserver binary; without it
	// .bin/kube-apiserver in the module root is used.
	BinaryEnv = "KUBE_APISERVER_BIN"
)

// FindBinary returns the kube-apiserver binary named by KUBE_APISERVER_BIN
// or, when that is unset, .bin/kube-apiserver in the module root if it
// exists, else "".
func FindBinary(t testing.TB) string {
	t.Helper()
	return etcdtest.FindBinary(t, BinaryEnv, "kube-apiserver")
}

// NeedBinary is FindBinary that ends the test when there is no binary:
// Fatal under CI=true, Skip otherwise, saying how to build it.
func NeedBinary(t testing.TB) string {
	t.Helper()
	b := FindBinary(t)
	if b == "" {
		msg := "no kube-apiserver binary .bin/kube-apiserver: build it with `make kube-apiserver` (scripts/build-kube.sh: about 15 CPU-minutes the first time, or make kube-binaries: all six Kubernetes commands in one build) or set " + BinaryEnv
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("kubetest: %s: %v", BinaryEnv, err)
	}
	return b
}

// Options configure Start.
type Options struct {
	// Binary is the kube-apiserver to run; "" is NeedBinary's.
	Binary string
	// EtcdServers are the etcd client URLs (--etcd-servers); required.
	EtcdServers []string
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile are the TLS files for etcd
	// (--etcd-cafile, --etcd-certfile, --etcd-keyfile), when it serves TLS.
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
	// EncryptionConfig, when not empty, is an EncryptionConfiguration
	// (YAML) for encryption at rest (--encryption-provider-config);
	// AESCBCConfig makes one.
	EncryptionConfig string
	// EncryptionConfigFile, when not empty, is a file holding one (a
	// kubeadm-like tree's, internal/test/kittest); not with
	// EncryptionConfig.
	EncryptionConfigFile string
	// ServingCertFile and ServingKeyFile, when set, are the certificate
	// and key the server serves with (a kubeadm PKI's apiserver.crt and
	// .key) instead of a generated self-signed pair, and ServingCAFile the
	// CA that signed them (its ca.crt), which clients then trust.
	ServingCertFile, ServingKeyFile, ServingCAFile string
	// ServiceAccountKeyFile and ServiceAccountSigningKeyFile, when set,
	// are the service-account key pair (sa.pub and sa.key) instead of a
	// generated one: tokens signed before a restore stay valid after it.
	ServiceAccountKeyFile, ServiceAccountSigningKeyFile string
	// ServiceClusterIPRange is --service-cluster-ip-range; "" is
	// 10.96.0.0/24 (only a configuration value: nothing is routed).
	ServiceClusterIPRange string
	// Args are further flags, appended last.
	Args []string
}

// Server is a running kube-apiserver.
type Server struct {
	// URL is its HTTPS address (https://127.0.0.1:PORT).
	URL string
	// Token is the bearer token of its one user, a member of system:masters.
	Token string
	// CAFile holds the certificate the server presents (PEM), or the CA
	// that signed it (Options.ServingCAFile).
	CAFile string
	// Binary is the executable it runs.
	Binary string

	dir    string
	tls    *tls.Config
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed
	out    *syncbuf.Buffer
}

// Start runs kube-apiserver as opts say, waits until /readyz answers ok
// and stops it at test cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = NeedBinary(t)
	}
	if len(opts.EtcdServers) == 0 {
		t.Fatal("kubetest: Options.EtcdServers is empty")
	}
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	var err error
	for range startAttempts {
		var s *Server
		begin := time.Now()
		s, err = start(ctx, t.TempDir(), opts)
		if err == nil {
			t.Logf("kubetest: kube-apiserver at %s ready in %.1fs", s.URL, time.Since(begin).Seconds())
			t.Cleanup(s.Stop)
			return s
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("kubetest: %v", err)
	return nil
}

func start(ctx context.Context, tmp string, opts Options) (*Server, error) {
	s, err := newServer(tmp, opts.Binary)
	if err != nil {
		return nil, err
	}
	args, err := s.prepare(opts)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(opts.Binary, args...)
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := etcdtest.StartChild(s.cmd, s.exited, &s.err); err != nil {
		return nil, fmt.Errorf("start %s: %w", opts.Binary, err)
	}
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// newServer makes the server's directory under tmp and picks its port
// (a free one now; Start tries again when another process takes it
// before the server binds it).
func newServer(tmp, binary string) (*Server, error) {
	dir := filepath.Join(tmp, "kube-apiserver")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return &Server{
		URL:    fmt.Sprintf("https://127.0.0.1:%d", port),
		Token:  randomHex(16),
		CAFile: filepath.Join(dir, "serving.crt"),
		Binary: binary,
		dir:    dir,
		exited: make(chan struct{}),
		out:    &syncbuf.Buffer{Max: 4 << 20},
	}, nil
}

// prepare writes the files the server reads (its serving certificate,
// service-account keys and token file, unless opts gives them) and
// returns its command line.
func (s *Server) prepare(opts Options) ([]string, error) {
	servingCert, servingKey, err := s.servingCert(opts)
	if err != nil {
		return nil, err
	}
	saPub, saKey := opts.ServiceAccountKeyFile, opts.ServiceAccountSigningKeyFile
	if saPub == "" {
		saPub, saKey = filepath.Join(s.dir, "sa.pub"), filepath.Join(s.dir, "sa.key")
		if err := writeKeyPair(saPub, saKey); err != nil {
			return nil, err
		}
	}
	tokens := filepath.Join(s.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(s.Token+`,kubetest,kubetest-uid,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write token file: %w", err)
	}
	ipRange := opts.ServiceClusterIPRange
	if ipRange == "" {
		ipRange = "10.96.0.0/24"
	}
	port := strings.TrimPrefix(s.URL, "https://127.0.0.1:")
	args := []string{
		"--etcd-servers", strings.Join(opts.EtcdServers, ","),
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", port,
		"--tls-cert-file", servingCert,
		"--tls-private-key-file", servingKey,
		"--cert-dir", filepath.Join(s.dir, "certs"),
		// The lease reconciler refuses a loopback advertise address.
		"--endpoint-reconciler-type", "none",
		"--authorization-mode", "AlwaysAllow",
		"--token-auth-file", tokens,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub,
		"--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", ipRange,
		"--profiling=false",
	}
	etcdArgs, err := s.etcdAndEncryptionArgs(opts)
	if err != nil {
		return nil, err
	}
	return append(append(args, etcdArgs...), opts.Args...), nil
}

// servingCert returns the server's certificate and key (written here
// unless opts gives them) and makes the client side trust it.
func (s *Server) servingCert(opts Options) (cert, key string, err error) {
	cert, key = s.CAFile, filepath.Join(s.dir, "serving.key")
	if opts.ServingCertFile != "" {
		cert, key, s.CAFile = opts.ServingCertFile, opts.ServingKeyFile, opts.ServingCAFile
	} else if err := writeServingCert(cert, key); err != nil {
		return "", "", err
	}
	certPEM, err := os.ReadFile(s.CAFile)
	if err != nil {
		return "", "", fmt.Errorf("read serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	s.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return cert, key, nil
}

// etcdAndEncryptionArgs are the flags for etcd's TLS and encryption at
// rest that opts asks for.
func (s *Server) etcdAndEncryptionArgs(opts Options) ([]string, error) {
	var args []string
	if opts.EtcdCAFile != "" {
		args = append(args, "--etcd-cafile", opts.EtcdCAFile)
	}
	if opts.EtcdCertFile != "" {
		args = append(args, "--etcd-certfile", opts.EtcdCertFile, "--etcd-keyfile", opts.EtcdKeyFile)
	}
	if opts.EncryptionConfigFile != "" {
		args = append(args, "--encryption-provider-config", opts.EncryptionConfigFile)
	} else if opts.EncryptionConfig != "" {
		f := filepath.Join(s.dir, "encryption.yaml")
		if err := os.WriteFile(f, []byte(opts.EncryptionConfig), 0o600); err != nil {
			return nil, fmt.Errorf("write encryption config: %w", err)
		}
		args = append(args, "--encryption-provider-config", f)
	}
	return args, nil
}

// waitReady polls /readyz with the token until it answers 200, the server
// exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: s.tls}}
	defer hc.CloseIdleConnections()
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+s.Token)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited: %v: %s", s.Binary, s.err, lastLines(s.out.String(), 10))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (/readyz: %s): %w: %s", s.Binary, last, ctx.Err(), lastLines(s.out.String(), 10))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the server (SIGTERM, SIGKILL after 20 s) and waits for it.
// It is idempotent.
func (s *Server) Stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Output returns the last of the server's log.
func (s *Server) Output() string { return s.out.String() }

// Client returns a client of the server with its token.
func (s *Server) Client() *Client {
	return &Client{URL: s.URL, Token: s.Token, HTTP: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: s.tls.Clone()},
	}}
}

// writeServingCert writes a self-signed certificate for 127.0.0.1 and
// localhost and its key.
func writeServingCert(certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kubetest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("create serving certificate: %w", err)
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(keyFile, "PRIVATE KEY", kd)
}

// writeKeyPair writes a service-account signing key and its public key.
func writeKeyPair(pubFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyFile, "PRIVATE KEY", kd); err != nil {
		return err
	}
	pd, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(pubFile, "PUBLIC KEY", pd)
}

func writePEM(file, typ string, der []byte) error {
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(file), err)
	}
	return nil
}

// AESCBCConfig returns an EncryptionConfiguration that encrypts Secrets
// with aescbc under the 32-byte key named keyName (values start with
// "k8s:enc:aescbc:v1:<keyName>:") and reads unencrypted ones (identity).
func AESCBCConfig(keyName string, key []byte) string {
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - name: %s
              secret: %s
      - identity: {}
`, keyName, base64Std(key))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
