package inspect

import (
	"sync"
	"testing"
)

// BenchmarkScheme: building the Kubernetes scheme, once per process that
// decodes a protobuf object.
func BenchmarkScheme(b *testing.B) {
	for b.Loop() {
		schemeOnce = sync.Once{}
		kubeScheme()
	}
}
