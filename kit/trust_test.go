package kit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/signing"
)

// TestUntrustedKit: with trusted keys, a kit manifest planted by someone
// with the store's credentials and the public recipient but without the
// signing key (a CA of their own) is never a kit: List keeps it apart,
// Latest is the signed one, Manifest refuses it by id.
func TestUntrustedKit(t *testing.T) {
	ctx := t.Context()
	st := stores(t)["dir"]
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := kittest.Identity(t, t.TempDir())

	realRoot := t.TempDir()
	kittest.Kubeadm(t, realRoot, now, now.Add(90*24*time.Hour))
	real, err := kit.Collect(realRoot, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	signer := kit.Repo{Store: st, Cluster: "prod", Signer: key}
	good, err := signer.Put(ctx, real, encryption(id), []string{"kubeadm"}, now, "test")
	if err != nil {
		t.Fatal(err)
	}
	// The attacker's kit: another CA, newer, encrypted to the real
	// recipient, unsigned.
	evilRoot := t.TempDir()
	kittest.Kubeadm(t, evilRoot, now, now.Add(90*24*time.Hour))
	evil, err := kit.Collect(evilRoot, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	planted, err := kit.Repo{Store: st, Cluster: "prod"}.Put(ctx, evil, encryption(id), []string{"kubeadm"}, now.Add(time.Hour), "attacker")
	if err != nil {
		t.Fatal(err)
	}
	if planted.Manifest.ID == good.Manifest.ID {
		t.Fatal("the planted kit has the real kit's id")
	}

	reader := kit.Repo{Store: st, Cluster: "prod", Trust: &signing.Trust{Keys: []signing.PublicKey{key.Public()}}}
	l, err := reader.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Kits) != 1 || l.Kits[0].ID != good.Manifest.ID || len(l.Untrusted) != 1 {
		t.Fatalf("listing: %d kits, %d untrusted; want the signed one and the planted one apart", len(l.Kits), len(l.Untrusted))
	}
	if latest, err := l.Latest(); err != nil || latest.ID != good.Manifest.ID {
		t.Errorf("latest: %v %v, want the signed kit", latest, err)
	}
	if _, err := reader.Manifest(ctx, planted.Manifest.ID); !errors.Is(err, signing.ErrUntrusted) || !errors.Is(err, signing.ErrUnsigned) {
		t.Errorf("planted kit by id: %v, want untrusted (not signed)", err)
	}
	if _, err := l.Find(planted.Manifest.ID[:12]); !errors.Is(err, signing.ErrUntrusted) {
		t.Errorf("Find of the planted kit: %v, want untrusted", err)
	}
	if _, err := reader.Load(ctx, good.Manifest, nil); !errors.Is(err, kit.ErrNoIdentity) {
		t.Errorf("signed kit: %v", err) // loads up to the identity check
	}
	// Without trust configured both are kits (lifeboat before signing).
	if l, err := (kit.Repo{Store: st, Cluster: "prod"}).List(ctx); err != nil || len(l.Kits) != 2 {
		t.Errorf("without trust: %v kits, %v", len(l.Kits), err)
	}
}
