package kubeobjects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Result counts what one Sync changed.
type Result struct {
	Created, Updated, Deleted, Unchanged int
}

// Sync makes the cluster's objects match st: an EtcdBackup per backup in
// st.Backups (created when missing, updated when it differs), none for a
// backup that is gone (only objects with this cluster's labels are
// deleted), and the EtcdRecoverability object. It goes on after a failed
// request and returns every error joined; what it did is in Result.
func (c *Client) Sync(ctx context.Context, st Status) (Result, error) {
	var res Result
	if c.err != nil {
		return res, c.err
	}
	api := c.dyn.Resource(Backups).Namespace(c.cfg.Namespace)
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: c.selector()})
	if err != nil {
		return res, fmt.Errorf("list etcdbackups in namespace %s: %w", c.cfg.Namespace, err)
	}
	have := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		have[list.Items[i].GetName()] = &list.Items[i]
	}
	var errs []error
	want := map[string]bool{}
	for _, b := range st.Backups {
		obj := c.backupObject(b)
		name := BackupName(c.cfg.Cluster, b.ID)
		want[name] = true
		errs = append(errs, c.put(ctx, api, have[name], obj, &res))
	}
	for name := range have {
		if want[name] {
			continue
		}
		err := api.Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete etcdbackup %s/%s: %w", c.cfg.Namespace, name, err))
			continue
		}
		res.Deleted++
	}
	errs = append(errs, c.putRecoverability(ctx, st, &res))
	return res, errors.Join(errs...)
}

// selector selects the objects this client owns.
func (c *Client) selector() string {
	return LabelManagedBy + "=" + ManagedBy + "," + LabelCluster + "=" + LabelValue(c.cfg.Cluster)
}

// resource is a namespaced or cluster resource's client.
type resource interface {
	Create(ctx context.Context, obj *unstructured.Unstructured, opts metav1.CreateOptions, subresources ...string) (*unstructured.Unstructured, error)
	Update(ctx context.Context, obj *unstructured.Unstructured, opts metav1.UpdateOptions, subresources ...string) (*unstructured.Unstructured, error)
}

// put creates obj when old is nil, or updates old to it when their spec,
// status or labels differ.
func (c *Client) put(ctx context.Context, api resource, old *unstructured.Unstructured, obj map[string]any, res *Result) error {
	u := &unstructured.Unstructured{Object: obj}
	if old == nil {
		if _, err := api.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		res.Created++
		return nil
	}
	if same(old.Object, obj) {
		res.Unchanged++
		return nil
	}
	u.SetResourceVersion(old.GetResourceVersion())
	if _, err := api.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	res.Updated++
	return nil
}

// putRecoverability writes the cluster's EtcdRecoverability object.
func (c *Client) putRecoverability(ctx context.Context, st Status, res *Result) error {
	api := c.dyn.Resource(Recoverability)
	obj := c.recoverabilityObject(st)
	old, err := api.Get(ctx, ObjectName(c.cfg.Cluster), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		old = nil
	case err != nil:
		return fmt.Errorf("get etcdrecoverability %s: %w", ObjectName(c.cfg.Cluster), err)
	}
	return c.put(ctx, api, old, obj, res)
}

// same reports whether stored has want's spec, status and labels (as JSON:
// the server's numbers decode as int64 or float64 either way).
func same(stored, want map[string]any) bool {
	for _, k := range []string{"spec", "status"} {
		if !sameJSON(stored[k], want[k]) {
			return false
		}
	}
	labels, _, _ := unstructured.NestedFieldNoCopy(stored, "metadata", "labels")
	wantLabels, _, _ := unstructured.NestedFieldNoCopy(want, "metadata", "labels")
	return sameJSON(labels, wantLabels)
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
