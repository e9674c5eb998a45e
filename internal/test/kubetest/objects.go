package kubetest

import "strings"

// NewNamespace returns a namespace named name.
func NewNamespace(name string) Object {
	return Object{"apiVersion": "v1", "kind": "Namespace", "metadata": Object{"name": name}}
}

// NewConfigMap returns a ConfigMap ns/name holding data.
func NewConfigMap(ns, name string, data map[string]string) Object {
	return Object{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(ns, name), "data": data}
}

// NewSecret returns an Opaque Secret ns/name holding data.
func NewSecret(ns, name string, data map[string][]byte) Object {
	// encoding/json writes []byte as base64, as the API wants.
	return Object{"apiVersion": "v1", "kind": "Secret", "metadata": meta(ns, name), "type": "Opaque", "data": data}
}

// NewServiceAccount returns a ServiceAccount ns/name.
func NewServiceAccount(ns, name string) Object {
	return Object{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(ns, name)}
}

// NewDeployment returns a Deployment ns/name of replicas pods of one
// container running image (nothing runs it: there is no scheduler).
func NewDeployment(ns, name, image string, replicas int) Object {
	labels := Object{"app": name}
	return Object{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(ns, name),
		"spec": Object{
			"replicas": replicas,
			"selector": Object{"matchLabels": labels},
			"template": Object{
				"metadata": Object{"labels": labels},
				"spec":     Object{"containers": []Object{{"name": "app", "image": image}}},
			},
		},
	}
}

// NewCRD returns a namespaced CustomResourceDefinition of kind in group,
// served and stored as version v1, whose objects may hold any fields; its
// name is plural.group. CRDResource(group, plural) is its Resource.
func NewCRD(group, kind, plural string) Object {
	return Object{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": Object{"name": plural + "." + group},
		"spec": Object{
			"group": group,
			"scope": "Namespaced",
			"names": Object{"kind": kind, "listKind": kind + "List", "plural": plural, "singular": strings.ToLower(kind)},
			"versions": []Object{{
				"name": "v1", "served": true, "storage": true,
				"schema": Object{"openAPIV3Schema": Object{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}
}

// CRDResource is the Resource of the objects of a CRD made by NewCRD.
func CRDResource(group, plural string) Resource {
	return Resource{APIVersion: group + "/v1", Plural: plural, Namespaced: true}
}

// NewCustom returns an object ns/name of a NewCRD kind with spec.
func NewCustom(group, kind, ns, name string, spec Object) Object {
	return Object{"apiVersion": group + "/v1", "kind": kind, "metadata": meta(ns, name), "spec": spec}
}

func meta(ns, name string) Object { return Object{"namespace": ns, "name": name} }
