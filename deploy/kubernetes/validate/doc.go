// Package validate tests lifeboat's Kubernetes manifests: every file decodes
// strictly into the Kubernetes API types and every kustomization renders.
package validate
