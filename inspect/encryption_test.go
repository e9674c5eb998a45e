package inspect

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sharedNameConfig is an EncryptionConfiguration whose two resources
// each have an aescbc key named key1, with different secrets: first is
// the configmaps' key, second the secrets' one.
func sharedNameConfig(first, second []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [configmaps]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: %s
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: %s
      - identity: {}
`, b64(first), b64(second))
}

// TestDecryptSharedKeyName: the same provider and key name under two
// resources keeps both secrets, and a value of each resource decrypts
// with its own.
func TestDecryptSharedKeyName(t *testing.T) {
	cmKey, secretKey := bytes.Repeat([]byte{4}, 32), bytes.Repeat([]byte{5}, 32)
	keys, err := ParseEncryptionConfig("enc.yaml", []byte(sharedNameConfig(cmKey, secretKey)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		etcdKey string
		key     []byte
		obj     *corev1.Secret
	}{
		{"/registry/configmaps/shop/web", cmKey, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}},
		{"/registry/secrets/shop/db", secretKey, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}}},
	} {
		t.Run(tc.etcdKey, func(t *testing.T) {
			stored := seal(t, "aescbc", "key1", tc.key, tc.etcdKey, encodeProtobuf(t, tc.obj))
			v := decodeValue(Entry{Key: tc.etcdKey}, stored, keys)
			if v.Err != nil || v.Kind != "Secret" || !strings.Contains(string(v.JSON), `"name":"`+tc.obj.Name+`"`) {
				t.Errorf("decrypted: kind %q err %v json %s", v.Kind, v.Err, v.JSON)
			}
		})
	}
}

// TestDecryptCBCWrongKeyPadding: a wrong aescbc key whose decryption
// happens to end in valid PKCS#7 padding (1 in 256) is not taken for the
// right one: the plaintext must decode as a Kubernetes object. Tried
// first, the right key is tried next; alone, the value is said encrypted
// with a wrong key.
func TestDecryptCBCWrongKeyPadding(t *testing.T) {
	right, wrong := bytes.Repeat([]byte{6}, 32), bytes.Repeat([]byte{7}, 32)
	const etcdKey = "/registry/secrets/shop/db"
	plain := encodeProtobuf(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Data: map[string][]byte{"password": []byte("hunter2")}})
	var stored []byte
	for i := 0; ; i++ {
		if i == 100_000 {
			t.Fatal("no ciphertext whose wrong-key decryption has valid padding in 100000 tries")
		}
		stored = seal(t, "aescbc", "key1", right, etcdKey, plain)
		e, err := parseEncrypted(stored)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decryptCBC(wrong, e.data); err == nil {
			break
		}
	}
	for name, cfg := range map[string]string{"wrong key first": sharedNameConfig(wrong, right), "wrong key last": sharedNameConfig(right, wrong)} {
		t.Run(name, func(t *testing.T) {
			keys, err := ParseEncryptionConfig("enc.yaml", []byte(cfg))
			if err != nil {
				t.Fatal(err)
			}
			v := decodeValue(Entry{Key: etcdKey}, stored, keys)
			if v.Err != nil || v.Kind != "Secret" || !strings.Contains(string(v.JSON), base64.StdEncoding.EncodeToString([]byte("hunter2"))) {
				t.Errorf("decrypted: kind %q err %v json %s", v.Kind, v.Err, v.JSON)
			}
		})
	}
	t.Run("wrong key alone", func(t *testing.T) {
		keys, err := ParseEncryptionConfig("wrong.yaml", []byte(sharedNameConfig(wrong, wrong)))
		if err != nil {
			t.Fatal(err)
		}
		v := decodeValue(Entry{Key: etcdKey}, stored, keys)
		if !errors.Is(v.Err, ErrEncrypted) || !strings.Contains(v.Err.Error(), "wrong key") || v.JSON != nil {
			t.Errorf("with only the wrong key: err %v, json %s", v.Err, v.JSON)
		}
	})
}
