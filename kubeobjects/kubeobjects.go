package kubeobjects

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Group and Version are the API group and version of the objects.
const (
	Group   = "lifeboat.dev"
	Version = "v1alpha1"
)

// The resources this package writes.
var (
	Backups         = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "etcdbackups"}
	Recoverability  = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "etcdrecoverabilities"}
	eventsResource  = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	apiVersion      = Group + "/" + Version
	kindBackup      = "EtcdBackup"
	kindRecoverable = "EtcdRecoverability"
)

// Labels on every object this package writes; Sync deletes only objects
// that carry both, with this cluster's value.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "lifeboat"
	LabelCluster   = "lifeboat.dev/cluster"
)

// requestTimeout bounds one request to the API server.
const requestTimeout = 10 * time.Second

// Config says where the objects go.
type Config struct {
	// Kubeconfig is a kubeconfig file; "" uses the in-cluster service
	// account (KUBERNETES_SERVICE_HOST and the mounted token).
	Kubeconfig string
	// Namespace holds the EtcdBackup objects (and their events); required.
	Namespace string
	// Cluster is the cluster name inside the store: the EtcdRecoverability
	// object's name and the value of LabelCluster.
	Cluster string
	// Instance names this agent in the events it records (optional).
	Instance string
}

// Validate names the key that is wrong.
func (c Config) Validate() error {
	if c.Namespace == "" {
		return errors.New("kubernetes.namespace: empty (the namespace of the EtcdBackup objects)")
	}
	if c.Cluster == "" {
		return errors.New("cluster: empty")
	}
	return nil
}

// Client writes the objects of one cluster. It is safe for concurrent use.
type Client struct {
	dyn dynamic.Interface
	cfg Config
	// err, when set, is why the client cannot work (see Unusable): every
	// call returns it.
	err error
}

// Unusable returns a Client whose every call fails with err: for a
// caller that could not configure one (no in-cluster configuration, an
// unreadable kubeconfig) and must keep counting failures rather than stop.
func Unusable(err error) *Client { return &Client{err: err} }

// New returns a Client for cfg. It reads the kubeconfig (or the in-cluster
// configuration) but does not contact the API server.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration (kubernetes.kubeconfig %q): %w", cfg.Kubeconfig, err)
	}
	rc.Timeout = requestTimeout
	rc.UserAgent = "lifeboat"
	// One object per backup: a sync of a few hundred must not wait on
	// client-go's default of 5 requests a second.
	rc.QPS, rc.Burst = 50, 100
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{dyn: dyn, cfg: cfg}, nil
}
