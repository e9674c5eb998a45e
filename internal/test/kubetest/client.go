package kubetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Object is a Kubernetes object as JSON decodes it.
type Object = map[string]any

// Resource names a kind of object in the API: its group/version, its
// plural (the path segment) and whether it lives in a namespace.
type Resource struct {
	APIVersion string // "v1", "apps/v1", "stable.example.com/v1"
	Plural     string // "configmaps"
	Namespaced bool
}

// The resources the tests use; CRDResource returns a CRD's.
var (
	Namespaces  = Resource{APIVersion: "v1", Plural: "namespaces"}
	ConfigMaps  = Resource{APIVersion: "v1", Plural: "configmaps", Namespaced: true}
	Secrets     = Resource{APIVersion: "v1", Plural: "secrets", Namespaced: true}
	Deployments = Resource{APIVersion: "apps/v1", Plural: "deployments", Namespaced: true}
	CRDs        = Resource{APIVersion: "apiextensions.k8s.io/v1", Plural: "customresourcedefinitions"}
	// ServiceAccounts are namespaced; TokenRequest issues their tokens.
	ServiceAccounts = Resource{APIVersion: "v1", Plural: "serviceaccounts", Namespaced: true}
)

// Path returns the API path of the object name in namespace ns, or of the
// collection when name is "" (ns is ignored for cluster objects; "" for a
// namespaced resource is the collection across namespaces).
func (r Resource) Path(ns, name string) string {
	p := "/apis/" + r.APIVersion
	if !strings.Contains(r.APIVersion, "/") {
		p = "/api/" + r.APIVersion
	}
	if r.Namespaced && ns != "" {
		p += "/namespaces/" + url.PathEscape(ns)
	}
	p += "/" + r.Plural
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// StatusError is an answer of the API server other than 2xx.
type StatusError struct {
	Method, Path string
	Code         int
	Body         string // the server's Status, trimmed
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, http.StatusText(e.Code), e.Body)
}

// IsNotFound reports whether err is a 404 of the API server.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// IsConflict reports whether err is a 409 (already exists, or a stale
// resourceVersion).
func IsConflict(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusConflict
}

// Client talks to a Server with JSON over HTTPS and its bearer token.
type Client struct {
	URL   string
	Token string
	HTTP  *http.Client
}

// retries is how often Do resends a request the server refused with 429
// and a Retry-After header (as client-go does): right after start, or
// after a CRD is created, a resource answers "storage is (re)initializing"
// until its watch cache is filled.
const retries = 10

// Do sends method to path (with query, may be nil) with body as JSON (nil:
// none) and decodes a 2xx answer into out (nil: discarded). A 429 with
// Retry-After is retried (up to 10 times, at most a second apart).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		raw = b
	}
	u := c.URL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	for attempt := 0; ; attempt++ {
		b, retryAfter, err := c.do(ctx, method, path, u, raw)
		if retryAfter && attempt < retries {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Second):
			}
			continue
		}
		if err != nil {
			return err
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
			}
		}
		return nil
	}
}

// do sends one request and returns the body of a 2xx answer, or an error
// and whether the server asked to retry (429 with Retry-After).
func (c *Client) do(ctx context.Context, method, path, u string, body []byte) ([]byte, bool, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(b))
		var st struct{ Message string }
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		retry := resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != ""
		return nil, retry, &StatusError{Method: method, Path: path, Code: resp.StatusCode, Body: msg}
	}
	return b, false, nil
}

// Create posts obj into r's collection in namespace ns and returns the
// object as stored.
func (c *Client) Create(ctx context.Context, r Resource, ns string, obj Object) (Object, error) {
	var got Object
	err := c.Do(ctx, http.MethodPost, r.Path(ns, ""), nil, obj, &got)
	return got, err
}

// Update puts obj (with the resourceVersion it was read at) in place of
// the stored one and returns it as stored.
func (c *Client) Update(ctx context.Context, r Resource, obj Object) (Object, error) {
	var got Object
	err := c.Do(ctx, http.MethodPut, r.Path(NamespaceOf(obj), Name(obj)), nil, obj, &got)
	return got, err
}

// Get reads one object (a quorum read from etcd).
func (c *Client) Get(ctx context.Context, r Resource, ns, name string) (Object, error) {
	var got Object
	err := c.Do(ctx, http.MethodGet, r.Path(ns, name), nil, nil, &got)
	return got, err
}

// List lists r in namespace ns ("" for all or for cluster objects). With
// cached, the list is served from the API server's watch cache
// (resourceVersion=0) instead of a quorum read from etcd.
func (c *Client) List(ctx context.Context, r Resource, ns string, cached bool) ([]Object, error) {
	var q url.Values
	if cached {
		q = url.Values{"resourceVersion": {"0"}}
	}
	var list struct{ Items []Object }
	if err := c.Do(ctx, http.MethodGet, r.Path(ns, ""), q, nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Delete deletes one object (in the foreground of nothing: objects the
// tests make have no dependents).
func (c *Client) Delete(ctx context.Context, r Resource, ns, name string) error {
	return c.Do(ctx, http.MethodDelete, r.Path(ns, name), nil, nil, nil)
}

// DeleteNamespace deletes namespace ns as `kubectl delete namespace` and
// the namespace controller would together: the namespace is marked for
// deletion, every object of contents in it is deleted, its finalizer is
// removed and the namespace is gone. kube-controller-manager does not run
// in these tests, so without the last steps the namespace would stay
// Terminating with its objects.
func (c *Client) DeleteNamespace(ctx context.Context, ns string, contents ...Resource) error {
	if err := c.Delete(ctx, Namespaces, "", ns); err != nil {
		return err
	}
	for _, r := range contents {
		items, err := c.List(ctx, r, ns, false)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := c.Delete(ctx, r, ns, Name(it)); err != nil && !IsNotFound(err) {
				return err
			}
		}
	}
	nsObj, err := c.Get(ctx, Namespaces, "", ns)
	if err != nil {
		return err
	}
	if spec, ok := nsObj["spec"].(map[string]any); ok {
		delete(spec, "finalizers")
	}
	if err := c.Do(ctx, http.MethodPut, Namespaces.Path("", ns)+"/finalize", nil, nsObj, nil); err != nil {
		return err
	}
	return c.Poll(ctx, func() (bool, error) {
		_, err := c.Get(ctx, Namespaces, "", ns)
		if IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// WaitCRD waits until the CRD named name is Established and its resource
// r answers a list (the API server serves it and its watch cache is
// ready), then returns nil.
func (c *Client) WaitCRD(ctx context.Context, name string, r Resource) error {
	return c.Poll(ctx, func() (bool, error) {
		crd, err := c.Get(ctx, CRDs, "", name)
		if err != nil {
			return false, err
		}
		established := false
		status, _ := crd["status"].(map[string]any)
		conds, _ := status["conditions"].([]any)
		for _, cd := range conds {
			m, _ := cd.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		// Right after Established the resource may answer 404 (not yet
		// routed) or 429 "storage is (re)initializing" (its watch cache
		// is filling): not yet served.
		_, err = c.List(ctx, r, "", false)
		var se *StatusError
		if errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusTooManyRequests) {
			return false, nil
		}
		return err == nil, err
	})
}

// Poll calls done every 100 ms until it returns true or an error, or ctx
// ends (at most a minute from now).
func (c *Client) Poll(ctx context.Context, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: condition not met: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TokenRequest issues a token of the service account ns/name valid for
// ttl (the TokenRequest API, as the kubelet asks for a pod's token): a
// JWT the server signs with its service-account signing key, stored
// nowhere.
func (c *Client) TokenRequest(ctx context.Context, ns, name string, ttl time.Duration) (string, error) {
	req := Object{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"spec": Object{"expirationSeconds": int64(ttl / time.Second)}}
	var got struct {
		Status struct{ Token string }
	}
	if err := c.Do(ctx, http.MethodPost, ServiceAccounts.Path(ns, name)+"/token", nil, req, &got); err != nil {
		return "", err
	}
	if got.Status.Token == "" {
		return "", fmt.Errorf("token request for %s/%s: no token in the answer", ns, name)
	}
	return got.Status.Token, nil
}

// WithToken returns a client of the same server that authenticates with
// token instead.
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.Token = token
	return &cc
}

// WhoAmI returns the user name the server authenticates c's token as (a
// SelfSubjectReview); a token it does not accept is a 401 StatusError.
func (c *Client) WhoAmI(ctx context.Context) (string, error) {
	var got struct {
		Status struct {
			UserInfo struct{ Username string }
		}
	}
	req := Object{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
	if err := c.Do(ctx, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", nil, req, &got); err != nil {
		return "", err
	}
	return got.Status.UserInfo.Username, nil
}

// IsUnauthorized reports whether err is a 401 of the API server (a token
// it does not accept).
func IsUnauthorized(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusUnauthorized
}

// Name returns obj's metadata.name.
func Name(obj Object) string { return Meta(obj, "name") }

// NamespaceOf returns obj's metadata.namespace.
func NamespaceOf(obj Object) string { return Meta(obj, "namespace") }

// Meta returns the string field key of obj's metadata ("" if absent).
func Meta(obj Object, key string) string {
	m, _ := obj["metadata"].(map[string]any)
	s, _ := m[key].(string)
	return s
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
