package seed

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
)

// generator builds values; one per goroutine (it reuses buffers).
type generator struct {
	buf []byte
	raw []byte
}

func newGenerator() *generator {
	return &generator{}
}

// randomShare is the probability that a filler block is opaque random data
// (base64, as in Secrets and binary fields) rather than structured text. It
// sets the compression ratio: about 4 with zstd on a whole database.
const randomShare = 0.25

// value returns the value of version of objs[idx]. It depends only on the
// seed, idx, version and the object, so concurrent writers produce the same
// data as a single one. The slice is valid until the next call.
func (g *generator) value(o Options, obj *object, idx, version int) []byte {
	r := rand.New(rand.NewPCG(uint64(o.Seed)^0x76616c7565, uint64(idx)<<16|uint64(version)))
	size := o.MinValue
	if o.MaxValue > o.MinValue {
		size += r.IntN(o.MaxValue - o.MinValue + 1)
	}
	share := randomShare
	if obj.resource.secretLike {
		share = 0.6
	}
	b := g.buf[:0]
	// Kubernetes stores most objects as protobuf behind this magic prefix.
	b = append(b, "k8s\x00"...)
	b = fmt.Appendf(b, `{"kind":%q,"apiVersion":%q,"metadata":{"name":%q,`, obj.resource.kind, obj.resource.apiVersion, obj.name)
	if obj.namespace != "" {
		b = fmt.Appendf(b, `"namespace":%q,`, obj.namespace)
	}
	b = fmt.Appendf(b, `"uid":"%08x-%04x-%04x-%04x-%012x","resourceVersion":"%d","generation":%d,`,
		r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff,
		1000+idx*3+version, version+1)
	app := apps[r.IntN(len(apps))]
	b = fmt.Appendf(b, `"creationTimestamp":%q,"labels":{"app.kubernetes.io/name":%q,"app.kubernetes.io/part-of":%q,"pod-template-hash":%q}},"managedFields":[`,
		timestamp(r), app, teams[r.IntN(len(teams))], randName(r, 10))
	for len(b) < size {
		if r.Float64() < share {
			b = g.opaque(b, r)
		} else {
			b = g.field(b, r)
		}
	}
	b = b[:size]
	g.buf = b
	return b
}

func timestamp(r *rand.Rand) string {
	return fmt.Sprintf("2026-%02d-%02dT%02d:%02d:%02dZ", 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60))
}

var (
	managers   = []string{"kube-controller-manager", "kubelet", "kubectl-client-side-apply", "helm", "argocd-controller", "kube-scheduler"}
	operations = []string{"Update", "Apply"}
	envNames   = []string{"LOG_LEVEL", "GOMAXPROCS", "DATABASE_URL", "REDIS_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT", "POD_NAME", "POD_NAMESPACE", "HTTP_PORT"}
)

// field appends a managedFields-like entry: structured, repetitive text with
// a few varying values.
func (g *generator) field(b []byte, r *rand.Rand) []byte {
	app := apps[r.IntN(len(apps))]
	b = fmt.Appendf(b, `{"manager":%q,"operation":%q,"time":%q,"fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:containers":{"k:{\"name\":\"%s\"}":{".":{},"f:image":"registry.k8s.io/%s:v1.%d.%d","f:imagePullPolicy":{},"f:env":{"k:{\"name\":\"%s\"}":{"f:value":"%d"}},"f:resources":{"f:limits":{"f:cpu":"%dm","f:memory":"%dMi"}}}}}}},`,
		managers[r.IntN(len(managers))], operations[r.IntN(len(operations))], timestamp(r),
		app, app, r.IntN(40), r.IntN(10), envNames[r.IntN(len(envNames))], r.IntN(100000),
		100*(1+r.IntN(20)), 64*(1+r.IntN(32)))
	return b
}

// opaque appends a data entry holding base64 random bytes.
func (g *generator) opaque(b []byte, r *rand.Rand) []byte {
	n := 48 + r.IntN(200)
	if cap(g.raw) < n {
		g.raw = make([]byte, 256)
	}
	raw := g.raw[:n]
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			raw[i+j] = byte(v >> (8 * j))
		}
	}
	b = append(b, `{"data":{"`...)
	b = append(b, envNames[r.IntN(len(envNames))]...)
	b = append(b, `":"`...)
	b = base64.StdEncoding.AppendEncode(b, raw)
	b = append(b, `"}},`...)
	return b
}
