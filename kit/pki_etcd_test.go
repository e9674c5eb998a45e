package kit_test

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/kit"
)

// TestRestoredPKIServesEtcd: the kubeadm PKI a kit lays out on a "new
// host" is usable as it lands: a real etcd serves TLS (client and peer)
// with the restored etcd server and peer certificates, and a client with
// the restored CA and healthcheck-client certificate talks to it.
func TestRestoredPKIServesEtcd(t *testing.T) {
	src := t.TempDir()
	kittest.Kubeadm(t, src, time.Now(), time.Now().Add(48*time.Hour))
	k, err := kit.Collect(src, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	if _, err := kit.Restore(host, k, kit.RestoreOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(host, "etc/kubernetes/pki/etcd")
	tls := func(name string) transport.TLSInfo {
		return transport.TLSInfo{CertFile: filepath.Join(pki, name+".crt"), KeyFile: filepath.Join(pki, name+".key"),
			TrustedCAFile: filepath.Join(pki, "ca.crt"), ClientCertAuth: true}
	}
	var ports [2]int
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close() // held only while picking: etcd binds it next
	}
	cu, _ := url.Parse(fmt.Sprintf("https://127.0.0.1:%d", ports[0]))
	pu, _ := url.Parse(fmt.Sprintf("https://127.0.0.1:%d", ports[1]))
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "cp1", filepath.Join(host, "var/lib/etcd")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = "cp1=" + pu.String()
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = tls("server"), tls("peer")
	cfg.Logger, cfg.LogLevel = "zap", "error"
	cfg.UnsafeNoFsync = true
	e, err := startEtcd(t, cfg)
	if err != nil {
		t.Fatalf("etcd with the restored certificates: %v", err)
	}
	defer e.Close()
	ctls, err := transport.TLSInfo{CertFile: filepath.Join(pki, "healthcheck-client.crt"), KeyFile: filepath.Join(pki, "healthcheck-client.key"),
		TrustedCAFile: filepath.Join(pki, "ca.crt")}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, TLS: ctls, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(t.Context(), "/registry/namespaces/default", "v"); err != nil {
		t.Fatalf("put over TLS with the restored client certificate: %v", err)
	}
}

func startEtcd(t *testing.T, cfg *embed.Config) (*embed.Etcd, error) {
	t.Helper()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("not ready in 60s")
	}
}
