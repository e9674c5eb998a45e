package inspect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// protobufMagic starts every object kube-apiserver stores as protobuf.
var protobufMagic = []byte("k8s\x00")

// The scheme is built on first use, not at init: lifeboat agent links this
// package (one binary) but never decodes an object, so it never pays for
// registering the types.
var (
	schemeOnce sync.Once
	scheme     *runtime.Scheme
	pbCodec    *protobuf.Serializer
)

func kubeScheme() (*runtime.Scheme, *protobuf.Serializer) {
	schemeOnce.Do(func() {
		s := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{
			corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
			rbacv1.AddToScheme, networkingv1.AddToScheme, policyv1.AddToScheme,
			storagev1.AddToScheme, coordinationv1.AddToScheme, discoveryv1.AddToScheme,
			eventsv1.AddToScheme, autoscalingv1.AddToScheme, autoscalingv2.AddToScheme,
			admissionregistrationv1.AddToScheme, schedulingv1.AddToScheme, nodev1.AddToScheme,
			certificatesv1.AddToScheme, flowcontrolv1.AddToScheme, resourcev1.AddToScheme,
		} {
			utilruntime.Must(add(s))
		}
		scheme = s
		pbCodec = protobuf.NewSerializer(s, s)
	})
	return scheme, pbCodec
}

// Value is one stored value, decoded as far as lifeboat can.
type Value struct {
	Entry
	// Format is how the (decrypted) value is stored: "protobuf", "json" or "raw".
	Format string
	// Encryption names the provider and key when the value is encrypted
	// at rest ("aescbc:key1", "kms:my-kms"), empty when it is not.
	Encryption string
	// APIVersion and Kind of a Kubernetes object.
	APIVersion, Kind string
	// JSON is the object as JSON (protobuf decoded with the Kubernetes
	// scheme; JSON values as stored), nil when it could not be decoded.
	JSON []byte
	// Raw is the value as stored, or its plaintext when decrypted.
	Raw []byte
	// Err says why the value could not be decrypted (wraps ErrEncrypted)
	// or decoded. The listing goes on.
	Err error
}

// decodeValue decodes the stored value v of key.
func decodeValue(e Entry, v []byte, keys *Keys) Value {
	val := Value{Entry: e, Raw: v}
	if bytes.HasPrefix(v, encPrefix) {
		val.Encryption = providerName(Sniff(v))
		plain, err := keys.decrypt(e.Key, v)
		if err != nil {
			val.Format = "encrypted"
			val.Err = err
			return val
		}
		val.Raw = plain
		v = plain
	}
	switch {
	case bytes.HasPrefix(v, protobufMagic):
		val.Format = "protobuf"
		val.APIVersion, val.Kind, val.JSON, val.Err = decodeProtobuf(v)
	case looksJSON(v):
		val.Format = "json"
		val.JSON = v
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if json.Unmarshal(v, &tm) == nil {
			val.APIVersion, val.Kind = tm.APIVersion, tm.Kind
		}
	default:
		val.Format = "raw"
		if val.Encryption != "" {
			val.Err = fmt.Errorf("decrypted with %s, but the plaintext is neither a Kubernetes object nor JSON: wrong key?", val.Encryption)
		}
	}
	return val
}

func looksJSON(v []byte) bool {
	t := bytes.TrimLeft(v, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(v)
}

// ErrUnknownType marks a protobuf object whose type lifeboat's scheme does
// not hold (a type of an aggregated API, a newer version).
var ErrUnknownType = errors.New("type not in lifeboat's Kubernetes scheme")

func decodeProtobuf(v []byte) (apiVersion, kind string, js []byte, err error) {
	s, codec := kubeScheme()
	obj, gvk, err := codec.Decode(v, nil, nil)
	if err != nil {
		var u runtime.Unknown
		if uerr := u.Unmarshal(v[len(protobufMagic):]); uerr == nil && u.Kind != "" {
			gv, _ := schema.ParseGroupVersion(u.APIVersion)
			if !s.Recognizes(gv.WithKind(u.Kind)) {
				return u.APIVersion, u.Kind, nil, fmt.Errorf("%w: %s %s, %d bytes of protobuf", ErrUnknownType, u.APIVersion, u.Kind, len(u.Raw))
			}
			return u.APIVersion, u.Kind, nil, fmt.Errorf("decode %s %s: %w", u.APIVersion, u.Kind, err)
		}
		return "", "", nil, fmt.Errorf("decode protobuf object: %w", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	js, err = json.Marshal(obj)
	if err != nil {
		return "", "", nil, fmt.Errorf("encode %s as JSON: %w", gvk.Kind, err)
	}
	apiVersion, kind = gvk.ToAPIVersionAndKind()
	return apiVersion, kind, js, nil
}

// ForApply returns object JSON without the fields kube-apiserver sets
// (metadata.resourceVersion, uid, creationTimestamp, managedFields,
// generation, selfLink, deletionTimestamp, deletionGracePeriodSeconds, and
// status), so that `kubectl apply` recreates the object as it was.
//
// Unless keepOwners, it also drops metadata.ownerReferences and returns the
// owners it dropped: they name their owners by uid, and an object applied
// with an owner whose uid no longer exists (the owner was deleted, or
// recreated with a new uid) is deleted again by the garbage collector.
func ForApply(js []byte, keepOwners bool) ([]byte, []Owner, error) {
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, nil, fmt.Errorf("parse object: %w", err)
	}
	delete(obj, "status")
	var dropped []Owner
	if md, ok := obj["metadata"].(map[string]any); ok {
		for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields",
			"generation", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
			delete(md, f)
		}
		if refs, ok := md["ownerReferences"]; ok && !keepOwners {
			dropped = owners(refs)
			delete(md, "ownerReferences")
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, err
	}
	return out, dropped, nil
}

// Owner is one of an object's metadata.ownerReferences.
type Owner struct {
	APIVersion, Kind, Name, UID string
}

// String names the owner as "Kind name (uid U)".
func (o Owner) String() string {
	return fmt.Sprintf("%s %s (uid %s)", o.Kind, o.Name, o.UID)
}

// owners reads metadata.ownerReferences as decoded from JSON; an entry
// that is not an object is kept as an owner with empty fields, so that a
// drop is never silent.
func owners(refs any) []Owner {
	list, _ := refs.([]any)
	out := make([]Owner, 0, len(list))
	for _, r := range list {
		m, _ := r.(map[string]any)
		str := func(k string) string { s, _ := m[k].(string); return s }
		out = append(out, Owner{APIVersion: str("apiVersion"), Kind: str("kind"), Name: str("name"), UID: str("uid")})
	}
	return out
}
