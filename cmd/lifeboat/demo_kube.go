package main

import (
	"bytes"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
)

// demoNamespace is the namespace the demo deletes and brings back. The
// seed creates it (with some 250 of its objects at the default
// --objects); demoKubeObjects gives it real objects too.
const demoNamespace = "payments-prod"

// demoDeployment is the deleted object the demo gets back with
// get --for-apply.
const demoDeployment = "/registry/deployments/" + demoNamespace + "/checkout"

// demoNamespaceKey is demoNamespace's own key.
const demoNamespaceKey = "/registry/namespaces/" + demoNamespace

// demoKubeObjects returns the namespace, a Deployment and a ConfigMap of
// demoNamespace as kube-apiserver stores them (protobuf in the k8s\0
// envelope, with the fields the server sets: uid, creationTimestamp,
// generation, managedFields, status), keyed by their etcd keys. The
// seed's values only look like objects; these decode, so that get shows
// a real object and --for-apply has server fields to drop.
func demoKubeObjects() (map[string][]byte, error) {
	return encodeKube(demoObjects())
}

// demoObjects are the objects demoKubeObjects encodes, by key.
func demoObjects() map[string]runtime.Object {
	cm := &corev1.ConfigMap{ObjectMeta: demoMeta("checkout-config", 2),
		Data: map[string]string{"PAYMENT_PROVIDER": "acme-pay", "CURRENCY": "EUR", "TIMEOUT": "5s"}}
	replicas := int32(3)
	labels := map[string]string{"app.kubernetes.io/name": "checkout"}
	dep := &appsv1.Deployment{ObjectMeta: demoMeta("checkout", 3),
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "checkout", Image: "registry.example.com/payments/checkout:2.14.1",
					Ports:   []corev1.ContainerPort{{ContainerPort: 8080, Name: "http"}},
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "checkout-config"}}}},
				}}},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3},
	}
	return map[string]runtime.Object{
		demoNamespaceKey: demoNamespaceObject(false),
		"/registry/configmaps/" + demoNamespace + "/checkout-config": cm,
		demoDeployment: dep,
	}
}

// demoTerminating is demoNamespace as kube-apiserver stores it once
// kubectl delete namespace asked for its deletion: a deletion timestamp,
// phase Terminating; the namespace controller then deletes its objects.
func demoTerminating() ([]byte, error) {
	b, err := encodeKube(map[string]runtime.Object{demoNamespaceKey: demoNamespaceObject(true)})
	return b[demoNamespaceKey], err
}

func demoNamespaceObject(terminating bool) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: demoMeta(demoNamespace, 1),
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	ns.Namespace = ""
	if terminating {
		t := metav1.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		ns.DeletionTimestamp, ns.Status.Phase = &t, corev1.NamespaceTerminating
	}
	return ns
}

// demoMeta is the metadata of the demo's object name in demoNamespace.
func demoMeta(name string, n int) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: demoNamespace, UID: types.UID(fmt.Sprintf("6f1c2a70-3b1e-4c55-9d2e-0a1b2c3d4e%02d", n)), Generation: 1,
		CreationTimestamp: metav1.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC),
		Labels:            map[string]string{"app.kubernetes.io/name": "checkout", "app.kubernetes.io/part-of": "payments"},
		ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1"}},
	}
}

// encodeKube encodes objects as kube-apiserver stores them.
func encodeKube(objs map[string]runtime.Object) (map[string][]byte, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("demo objects: %w", err)
		}
	}
	codec := protobuf.NewSerializer(s, s)
	out := make(map[string][]byte, len(objs))
	for key, obj := range objs {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil {
			return nil, fmt.Errorf("demo object %s: %w", key, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
		var b bytes.Buffer
		if err := codec.Encode(obj, &b); err != nil {
			return nil, fmt.Errorf("demo object %s: %w", key, err)
		}
		out[key] = b.Bytes()
	}
	return out, nil
}
