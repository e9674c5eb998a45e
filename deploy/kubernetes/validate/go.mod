module github.com/lifeboat-dev/lifeboat/deploy/kubernetes/validate

go 1.26.0

require (
	github.com/blang/semver/v4 v4.0.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	sigs.k8s.io/kustomize/api v0.21.2 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
