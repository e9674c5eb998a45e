package inspect

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// encodeProtobuf encodes obj as kube-apiserver stores it: the k8s\0
// envelope, with the Kubernetes scheme's protobuf serializer.
func encodeProtobuf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	s, codec := kubeScheme()
	gvks, _, err := s.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	var b bytes.Buffer
	if err := codec.Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
