package kubetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// KubectlEnv names the kubectl binary; without it, kubectl beside the
// kube-apiserver binary (both built into .bin by scripts/build-kube.sh),
// then the PATH's.
const KubectlEnv = "KUBECTL_BIN"

// NeedKubectl returns the kubectl binary, or ends the test: Fatal under
// CI=true, Skip otherwise.
func NeedKubectl(t testing.TB) string {
	t.Helper()
	if b := os.Getenv(KubectlEnv); b != "" {
		return b
	}
	if api := FindBinary(t); api != "" {
		b := filepath.Join(filepath.Dir(api), "kubectl")
		if _, err := os.Stat(b); err == nil {
			return b
		}
	}
	if b, err := exec.LookPath("kubectl"); err == nil {
		return b
	}
	msg := "no kubectl: build it with `make kube-binaries` (scripts/build-kube.sh, into .bin beside kube-apiserver) or set " + KubectlEnv
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// WriteKubeconfig writes a kubeconfig (0600) for the server and its token
// to file, as a user of kubectl or client-go would have one.
func (s *Server) WriteKubeconfig(t testing.TB, file string) {
	t.Helper()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kubetest
  user:
    token: %s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: kubetest}
current-context: kubetest
`, s.URL, s.CAFile, s.Token)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}
