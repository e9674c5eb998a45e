package inspect

import (
	"bytes"
	gocipher "crypto/aes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"
)

// testEncryptionConfig is an EncryptionConfiguration as given to
// kube-apiserver, with one key per provider.
func testEncryptionConfig(cbc, gcm, sbox []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: %s
      - aesgcm:
          keys:
            - name: gcm1
              secret: %s
      - secretbox:
          keys:
            - name: box1
              secret: %s
      - kms:
          apiVersion: v2
          name: vault
          endpoint: unix:///var/run/kms.sock
      - identity: {}
`, b64(cbc), b64(gcm), b64(sbox))
}

// seal encrypts plaintext for etcd key as kube-apiserver does, with
// k8s.io/apiserver's own transformers and the prefixes its encryption
// config builds (k8s:enc:<provider>:v1:<key name>:).
func seal(t *testing.T, provider, keyName string, key []byte, etcdKey string, plain []byte) []byte {
	t.Helper()
	var tr value.Transformer
	switch provider {
	case "aescbc", "aesgcm":
		block, err := gocipher.NewCipher(key)
		if err != nil {
			t.Fatal(err)
		}
		if provider == "aescbc" {
			tr = aestransformer.NewCBCTransformer(block)
		} else if tr, err = aestransformer.NewGCMTransformer(block); err != nil {
			t.Fatal(err)
		}
	case "secretbox":
		var k [32]byte
		copy(k[:], key)
		tr = secretbox.NewSecretboxTransformer(k)
	}
	out, err := tr.TransformToStorage(t.Context(), plain, value.DefaultContext(etcdKey))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("k8s:enc:"+provider+":v1:"+keyName+":"), out...)
}

func TestDecryptAgainstAPIServer(t *testing.T) {
	cbc, gcm, sbox := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16), bytes.Repeat([]byte{3}, 32)
	keys, err := ParseEncryptionConfig("enc.yaml", []byte(testEncryptionConfig(cbc, gcm, sbox)))
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := ParseEncryptionConfig("wrong.yaml", []byte(testEncryptionConfig(bytes.Repeat([]byte{9}, 32), bytes.Repeat([]byte{9}, 16), bytes.Repeat([]byte{9}, 32))))
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Data: map[string][]byte{"password": []byte("hunter2")}}
	plain := encodeProtobuf(t, secret)
	const etcdKey = "/registry/secrets/shop/db"
	for _, tc := range []struct{ provider, key string }{{"aescbc", "key1"}, {"aesgcm", "gcm1"}, {"secretbox", "box1"}} {
		t.Run(tc.provider, func(t *testing.T) {
			k := map[string][]byte{"aescbc": cbc, "aesgcm": gcm, "secretbox": sbox}[tc.provider]
			stored := seal(t, tc.provider, tc.key, k, etcdKey, plain)
			if got := Sniff(stored); got != "encrypted:"+tc.provider+":"+tc.key {
				t.Errorf("Sniff = %q", got)
			}
			v := decodeValue(Entry{Key: etcdKey}, stored, keys)
			if v.Err != nil || v.Kind != "Secret" || !strings.Contains(string(v.JSON), base64.StdEncoding.EncodeToString([]byte("hunter2"))) {
				t.Errorf("decrypted: kind %q err %v json %s", v.Kind, v.Err, v.JSON)
			}
			if v.Encryption != tc.provider+":"+tc.key {
				t.Errorf("Encryption = %q", v.Encryption)
			}
			none := decodeValue(Entry{Key: etcdKey}, stored, nil)
			if !errors.Is(none.Err, ErrEncrypted) || !strings.Contains(none.Err.Error(), tc.provider) || !strings.Contains(none.Err.Error(), "--encryption-config") {
				t.Errorf("without a config: %v", none.Err)
			}
			bad := decodeValue(Entry{Key: etcdKey}, stored, wrong)
			if !errors.Is(bad.Err, ErrEncrypted) && bad.Err == nil {
				t.Errorf("with the wrong key: no error (%s)", bad.JSON)
			}
			if bad.Err != nil && !strings.Contains(bad.Err.Error(), "wrong key") {
				t.Errorf("with the wrong key: %v", bad.Err)
			}
			if tc.provider == "aesgcm" {
				// aesgcm authenticates the etcd key: a value moved to
				// another key does not decrypt.
				moved := decodeValue(Entry{Key: "/registry/secrets/shop/other"}, stored, keys)
				if moved.Err == nil {
					t.Error("an aesgcm value under another key decrypted")
				}
			}
		})
	}
	t.Run("kms", func(t *testing.T) {
		v := decodeValue(Entry{Key: etcdKey}, append([]byte("k8s:enc:kms:v2:vault:"), 0x0a, 0x03, 1, 2, 3), keys)
		if !errors.Is(v.Err, ErrEncrypted) || !strings.Contains(v.Err.Error(), "KMS provider vault") || !strings.Contains(v.Err.Error(), "cannot decrypt offline") {
			t.Errorf("kms: %v", v.Err)
		}
	})
}
