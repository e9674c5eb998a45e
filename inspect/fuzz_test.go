package inspect

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzEncryptionConfig: any file parses or fails cleanly.
func FuzzEncryptionConfig(f *testing.F) {
	f.Add([]byte(testEncryptionConfig(bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16), bytes.Repeat([]byte{3}, 32))))
	f.Add([]byte("kind: EncryptionConfiguration\nresources: [{providers: [{aescbc: {keys: [{name: a, secret: '!!'}]}}]}]\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseEncryptionConfig("fuzz.yaml", b)
	})
}

// FuzzDecodeValue: any stored value decodes, decrypts or says why not,
// never panics.
func FuzzDecodeValue(f *testing.F) {
	keys, err := ParseEncryptionConfig("enc.yaml", []byte(testEncryptionConfig(bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16), bytes.Repeat([]byte{3}, 32))))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"k8s\x00\x0a\x02v1", "k8s:enc:aescbc:v1:key1:0123456789abcdef0123456789abcdef",
		"k8s:enc:aesgcm:v1:gcm1:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "k8s:enc:secretbox:v1:box1:", "k8s:enc:kms:v2:vault:", "k8s:enc:",
		`{"apiVersion":"v1","kind":"ConfigMap"}`, "[1,2]", "\x00\x01"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		Sniff(v)
		val := decodeValue(Entry{Key: "/registry/secrets/a/b"}, v, keys)
		Render(val, "yaml", &Apply{})
		decodeValue(Entry{Key: "/k"}, v, nil)
	})
}

// FuzzIndex: a damaged index file is an error, never a panic or a hang.
func FuzzIndex(f *testing.F) {
	var good bytes.Buffer
	good.WriteString(indexMagic)
	e := Entry{Key: "/registry/pods/a/b", ModRevision: 5, Size: 3, Encoding: "raw"}
	rec := appendEntry(nil, &e)
	good.Write(rec)
	off := []byte{byte(len(indexMagic)), 0, 0, 0, 0, 0, 0, 0}
	good.Write(off)
	footer := make([]byte, 24)
	footer[0] = 1
	footer[8] = 5
	footer[16] = byte(len(indexMagic) + len(rec))
	good.Write(footer)
	good.WriteString(shaTag("abc"))
	good.WriteString(indexMagic)
	f.Add(good.Bytes())
	f.Add([]byte(indexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "index")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		ix, err := openIndex(p, "abc")
		if err != nil {
			return
		}
		defer ix.close()
		ix.get("/registry/pods/a/b")
		ix.scan("/", func(*Entry) error { return nil })
	})
}
