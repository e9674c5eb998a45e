package seed

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestObjects(t *testing.T) {
	t.Parallel()
	const n, namespaces = 5000, 30
	objs := objects(42, n, namespaces)
	if len(objs) != n {
		t.Fatalf("len(objects) = %d, want %d", len(objs), n)
	}
	seen := map[string]bool{}
	for i, o := range objs {
		if seen[o.key] {
			t.Fatalf("duplicate key %s", o.key)
		}
		seen[o.key] = true
		parts := strings.Split(o.key, "/")
		switch {
		case i < namespaces:
			if o.resource.name != "namespaces" || len(parts) != 4 {
				t.Errorf("object %d = %s, want a namespace key first", i, o.key)
			}
		case o.resource.namespaced:
			if len(parts) != 5 || parts[3] != o.namespace || !seen["/registry/namespaces/"+o.namespace] {
				t.Errorf("key %s: want /registry/<resource>/<existing namespace>/<name>", o.key)
			}
		default:
			if len(parts) != 4 {
				t.Errorf("key %s: want /registry/<resource>/<name>", o.key)
			}
		}
		if parts[1] != "registry" || parts[2] != o.resource.name {
			t.Errorf("key %s does not start with /registry/%s/", o.key, o.resource.name)
		}
	}
	again := objects(42, n, namespaces)
	for i := range objs {
		if objs[i].key != again[i].key {
			t.Fatalf("objects not deterministic: key %d is %s, then %s", i, objs[i].key, again[i].key)
		}
	}
}

func TestValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		opts     Options
		minRatio float64
		maxRatio float64
	}{
		{name: "default", opts: Options{}, minRatio: 3, maxRatio: 6},
		{name: "small", opts: Options{MinValue: 100, MaxValue: 300}, minRatio: 2, maxRatio: 8},
		{name: "fixed size", opts: Options{MinValue: 2048, MaxValue: 2048}, minRatio: 3, maxRatio: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := tt.opts.WithDefaults()
			objs := objects(o.Seed, 2000, 20)
			g := newGenerator()
			var all bytes.Buffer
			for i := range objs {
				v := g.value(o, &objs[i], i, 0)
				if len(v) < o.MinValue || len(v) > o.MaxValue {
					t.Fatalf("value of %s has %d bytes, want %d..%d", objs[i].key, len(v), o.MinValue, o.MaxValue)
				}
				if i == 7 {
					v1 := append([]byte(nil), v...)
					if v2 := newGenerator().value(o, &objs[i], i, 0); !bytes.Equal(v1, v2) {
						t.Fatalf("value of %s differs between generators", objs[i].key)
					}
					if v3 := newGenerator().value(o, &objs[i], i, 1); bytes.Equal(v1, v3) {
						t.Fatalf("value of %s is the same for versions 0 and 1", objs[i].key)
					}
				}
				all.Write(v)
			}
			enc, err := zstd.NewWriter(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer enc.Close()
			compressed := enc.EncodeAll(all.Bytes(), nil)
			ratio := float64(all.Len()) / float64(len(compressed))
			t.Logf("%d bytes, zstd ratio %.2f", all.Len(), ratio)
			if ratio < tt.minRatio || ratio > tt.maxRatio {
				t.Errorf("zstd ratio = %.2f, want %.1f..%.1f", ratio, tt.minRatio, tt.maxRatio)
			}
		})
	}
}

func BenchmarkValue(b *testing.B) {
	o := Options{}.WithDefaults()
	objs := objects(1, 1000, 20)
	g := newGenerator()
	var n int64
	for i := 0; b.Loop(); i++ {
		n += int64(len(g.value(o, &objs[i%len(objs)], i, 0)))
	}
	b.SetBytes(n / int64(b.N))
}

func TestChanges(t *testing.T) {
	o := Options{Objects: 500, MinValue: 1024, MaxValue: 4096, Seed: 7}
	a, err := NewChanges(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewChanges(o)
	keys := map[string]bool{}
	for _, obj := range objects(7, 500, 20) {
		keys[obj.key] = true
	}
	dels := 0
	for i := 0; i < 5000; i++ {
		k1, v1, d1 := a.Next()
		k2, v2, d2 := b.Next()
		if k1 != k2 || string(v1) != string(v2) || d1 != d2 {
			t.Fatalf("write %d: streams of the same options differ", i)
		}
		if !keys[k1] {
			t.Fatalf("write %d: key %q is not one of the seeded objects", i, k1)
		}
		if d1 {
			dels++
			continue
		}
		if len(v1) < 1024 || len(v1) > 4096 {
			t.Fatalf("write %d: value of %d bytes, want 1024..4096", i, len(v1))
		}
	}
	if dels < 100 || dels > 400 {
		t.Fatalf("%d deletes in 5000 writes, want about 5%%", dels)
	}
	if _, err := NewChanges(Options{Objects: -1}); err == nil {
		t.Fatal("NewChanges accepted negative objects")
	}
}
