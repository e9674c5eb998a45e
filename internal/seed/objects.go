package seed

import (
	"fmt"
	"math/rand/v2"
)

// object is one key and what its value describes.
type object struct {
	key       string
	resource  resource
	namespace string // empty for cluster-scoped resources
	name      string
}

// resource is a Kubernetes resource type as stored under /registry.
type resource struct {
	name       string // the path segment, e.g. "pods"
	kind       string
	apiVersion string
	namespaced bool
	weight     int // relative frequency
	// secretLike resources carry more opaque (random) data.
	secretLike bool
}

// resources are the non-namespace resources objects are drawn from, with
// rough frequencies of a busy cluster.
var resources = []resource{
	{"pods", "Pod", "v1", true, 24, false},
	{"events", "Event", "v1", true, 18, false},
	{"replicasets", "ReplicaSet", "apps/v1", true, 10, false},
	{"configmaps", "ConfigMap", "v1", true, 8, false},
	{"secrets", "Secret", "v1", true, 7, true},
	{"endpointslices", "EndpointSlice", "discovery.k8s.io/v1", true, 6, false},
	{"services", "Service", "v1", true, 6, false},
	{"deployments", "Deployment", "apps/v1", true, 6, false},
	{"serviceaccounts", "ServiceAccount", "v1", true, 5, false},
	{"leases", "Lease", "coordination.k8s.io/v1", true, 3, false},
	{"nodes", "Node", "v1", false, 2, false},
	{"clusterroles", "ClusterRole", "rbac.authorization.k8s.io/v1", false, 3, false},
	{"clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io/v1", false, 2, false},
}

var namespaceResource = resource{"namespaces", "Namespace", "v1", false, 0, false}

var (
	apps = []string{
		"nginx", "redis", "api", "web", "worker", "postgres", "kafka", "prometheus", "grafana",
		"coredns", "ingress-nginx", "cert-manager", "payments", "billing", "search", "auth",
		"frontend", "backend", "cache", "scheduler", "notifier", "gateway", "metrics-server",
		"fluent-bit", "loki", "tempo", "vault", "keycloak", "rabbitmq", "elasticsearch",
	}
	teams = []string{"platform", "payments", "search", "data", "identity", "growth", "infra", "ml", "web", "mobile"}
	envs  = []string{"prod", "staging", "dev", "qa", "sandbox"}
)

const alnum = "bcdfghjklmnpqrstvwxz2456789" // the alphabet of Kubernetes' generated names

func randName(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[r.IntN(len(alnum))]
	}
	return string(b)
}

// namespaceNames returns n distinct namespace names, the well-known ones
// first.
func namespaceNames(n int) []string {
	names := []string{"default", "kube-system", "kube-public", "kube-node-lease"}
	for _, t := range teams {
		for _, e := range envs {
			names = append(names, t+"-"+e)
		}
	}
	for i := len(names); len(names) < n; i++ {
		names = append(names, fmt.Sprintf("tenant-%d", i))
	}
	return names[:n]
}

// objects returns n distinct objects for seed: the namespaces first (indexes
// 0..namespaces-1), then objects drawn from resources.
func objects(seed int64, n, namespaces int) []object {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6b657973))
	out := make([]object, 0, n)
	nss := namespaceNames(namespaces)
	for _, ns := range nss {
		out = append(out, object{key: "/registry/namespaces/" + ns, resource: namespaceResource, name: ns})
	}
	total := 0
	for _, res := range resources {
		total += res.weight
	}
	seen := make(map[string]struct{}, n)
	for len(out) < n {
		pick := r.IntN(total)
		var res resource
		for _, res = range resources {
			if pick < res.weight {
				break
			}
			pick -= res.weight
		}
		app := apps[r.IntN(len(apps))]
		var name string
		switch res.name {
		case "pods":
			name = app + "-" + randName(r, 10) + "-" + randName(r, 5)
		case "replicasets":
			name = app + "-" + randName(r, 10)
		case "events":
			name = app + "-" + randName(r, 5) + "." + fmt.Sprintf("%016x", r.Uint64()>>1)
		case "endpointslices":
			name = app + "-" + randName(r, 5)
		case "nodes":
			name = fmt.Sprintf("node-%s-%03d", envs[r.IntN(len(envs))], r.IntN(1000))
		case "clusterroles", "clusterrolebindings":
			name = "system:" + app + ":" + randName(r, 4)
		case "secrets":
			name = app + "-token-" + randName(r, 5)
		default:
			name = app + "-" + randName(r, 4)
		}
		ns := ""
		key := "/registry/" + res.name + "/" + name
		if res.namespaced {
			ns = nss[r.IntN(len(nss))]
			key = "/registry/" + res.name + "/" + ns + "/" + name
		}
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		out = append(out, object{key: key, resource: res, namespace: ns, name: name})
	}
	return out
}
