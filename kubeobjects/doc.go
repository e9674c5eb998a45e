// Package kubeobjects mirrors a store's backups into the Kubernetes API, so
// that `kubectl get etcdbackups` shows them: one EtcdBackup object per
// retained backup (namespaced: age, revision, size, verified, last drill)
// and one cluster-scoped EtcdRecoverability object per cluster, named for
// the cluster, whose status holds the recoverable windows, the newest
// backup, the last drill and the problems. Their CustomResourceDefinitions
// ship with the Helm chart (deploy/helm/lifeboat/crds/lifeboat.dev.yaml).
//
// Sync makes the objects match a Status the caller read from the store:
// it creates the new, updates the changed and deletes the objects whose
// backup is gone, touching only the objects it owns (labelled with
// app.kubernetes.io/managed-by=lifeboat and the cluster's label). Event
// records a Kubernetes Event (type Warning) on a backup's object or on the
// cluster's status object.
//
// The objects are a mirror, never the truth: the store is. Nothing here
// reads the store, and a caller never lets an error of this package fail a
// backup or a drill (the agent logs it and counts it in
// lifeboat_kubernetes_sync_failures_total; the next sync catches up).
//
// The client is client-go's dynamic client over unstructured objects
// (no generated types, no informers); the configuration is a kubeconfig
// file or, when none is named, the pod's in-cluster service account.
package kubeobjects
