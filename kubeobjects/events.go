package kubeobjects

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Reasons of the events this package records.
const (
	ReasonBackupFailed = "BackupFailed"
	ReasonDrillFailed  = "DrillFailed"
)

// eventNamespace is where the events of a cluster-scoped object go: the
// API server accepts them only in "default".
const eventNamespace = "default"

// maxMessage bounds an event's message (the API's limit is 1 KiB for
// events.k8s.io; core events take more, kubectl shows less).
const maxMessage = 1024

// Event records a Warning event with reason and message on backup id's
// EtcdBackup or, when id is "" or its object does not exist, on the
// cluster's EtcdRecoverability object (whose events live in the namespace
// default). at is when it happened.
func (c *Client) Event(ctx context.Context, id, reason, message string, at time.Time) error {
	if c.err != nil {
		return c.err
	}
	ref, ns, err := c.involved(ctx, id)
	if err != nil {
		return err
	}
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	ts := at.UTC().Format(time.RFC3339)
	ev := map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata": map[string]any{
			"name": ref["name"].(string) + "." + strconv.FormatInt(at.UnixNano(), 16), "namespace": ns,
			"labels": c.labels(),
		},
		"involvedObject": ref, "reason": reason, "message": message, "type": "Warning",
		"source":         map[string]any{"component": "lifeboat"},
		"firstTimestamp": ts, "lastTimestamp": ts, "count": int64(1),
		"reportingComponent": "lifeboat", "reportingInstance": c.cfg.Instance,
	}
	_, err = c.dyn.Resource(eventsResource).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: ev}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create event %s in namespace %s: %w", reason, ns, err)
	}
	return nil
}

// involved is the object an event is about and the event's namespace.
func (c *Client) involved(ctx context.Context, id string) (map[string]any, string, error) {
	if id != "" {
		o, err := c.dyn.Resource(Backups).Namespace(c.cfg.Namespace).Get(ctx, BackupName(c.cfg.Cluster, id), metav1.GetOptions{})
		if err == nil {
			return ref(o, kindBackup), c.cfg.Namespace, nil
		}
	}
	o, err := c.dyn.Resource(Recoverability).Get(ctx, ObjectName(c.cfg.Cluster), metav1.GetOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("get etcdrecoverability %s for an event: %w", ObjectName(c.cfg.Cluster), err)
	}
	return ref(o, kindRecoverable), eventNamespace, nil
}

func ref(o *unstructured.Unstructured, kind string) map[string]any {
	r := map[string]any{
		"apiVersion": apiVersion, "kind": kind, "name": o.GetName(), "uid": string(o.GetUID()),
		"resourceVersion": o.GetResourceVersion(),
	}
	if ns := o.GetNamespace(); ns != "" {
		r["namespace"] = ns
	}
	return r
}
