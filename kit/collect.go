package kit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Presets name the files a kind of control plane needs restored on new
// hosts, as kit.paths entries.
const (
	PresetKubeadm = "kubeadm"
	PresetK3s     = "k3s"
)

// Where the presets find their files (below the collection root).
const (
	KubeadmPKI       = "/etc/kubernetes/pki"
	KubeadmAPIServer = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	K3sServer        = "/var/lib/rancher/k3s/server"
)

// ErrUnknownPath is wrapped when a kit.paths entry is neither a preset nor
// an absolute path.
var ErrUnknownPath = errors.New("not a preset (kubeadm, k3s) or an absolute path")

// ValidatePaths checks kit.paths entries without reading any file.
func ValidatePaths(paths []string) error {
	for _, p := range paths {
		if p == PresetKubeadm || p == PresetK3s {
			continue
		}
		if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
			return fmt.Errorf("%q: %w", p, ErrUnknownPath)
		}
	}
	return nil
}

// Collect reads the files that paths name (presets, or absolute files and
// directories, taken whole) below root ("/" on a real host) into a kit.
// Each entry keeps its path without root, its permission bits and owner.
// A named file or directory that is missing is an error; so is a device,
// socket or pipe, and a symlink inside a directory whose target leaves
// root. A symlink named directly is followed.
func Collect(root string, paths []string) (*Kit, error) {
	if err := ValidatePaths(paths); err != nil {
		return nil, fmt.Errorf("kit paths: %w", err)
	}
	if len(paths) == 0 {
		return nil, errors.New("kit paths: none given")
	}
	c := &collector{root: filepath.Clean(root), entries: map[string]Entry{}}
	for _, p := range paths {
		var err error
		switch p {
		case PresetKubeadm:
			err = c.kubeadm()
		case PresetK3s:
			err = c.k3s()
		default:
			err = c.add(path.Clean(p))
		}
		if err != nil {
			return nil, err
		}
	}
	k := &Kit{}
	for _, e := range c.entries {
		k.Entries = append(k.Entries, e)
	}
	slices.SortFunc(k.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	if err := k.validate(); err != nil {
		return nil, err
	}
	return k, nil
}

type collector struct {
	root    string
	entries map[string]Entry
	bytes   int64
}

func (c *collector) host(p string) string { return filepath.Join(c.root, filepath.FromSlash(p)) }

// kubeadm adds /etc/kubernetes/pki and the EncryptionConfiguration the
// kube-apiserver manifest names with --encryption-provider-config.
func (c *collector) kubeadm() error {
	if err := c.add(KubeadmPKI); err != nil {
		return fmt.Errorf("kit preset kubeadm: %w", err)
	}
	b, err := os.ReadFile(c.host(KubeadmAPIServer))
	if err != nil {
		return fmt.Errorf("kit preset kubeadm: read the kube-apiserver manifest (is this a kubeadm control-plane node?): %w", err)
	}
	enc, err := EncryptionConfigPath(b)
	if err != nil {
		return fmt.Errorf("kit preset kubeadm: %s: %w", KubeadmAPIServer, err)
	}
	if enc == "" {
		return nil // no encryption at rest: nothing more to keep
	}
	if err := c.add(enc); err != nil {
		return fmt.Errorf("kit preset kubeadm: the encryption config %s names: %w", KubeadmAPIServer, err)
	}
	return nil
}

// k3s adds the server token, server/tls and server/cred.
func (c *collector) k3s() error {
	for _, p := range []string{K3sServer + "/token", K3sServer + "/tls", K3sServer + "/cred"} {
		if err := c.add(p); err != nil {
			return fmt.Errorf("kit preset k3s: %w", err)
		}
	}
	return nil
}

// EncryptionConfigPath returns the path the kube-apiserver static pod
// manifest b passes to --encryption-provider-config ("" when none).
func EncryptionConfigPath(b []byte) (string, error) {
	var pod struct {
		Spec struct {
			Containers []struct {
				Name    string   `yaml:"name"`
				Command []string `yaml:"command"`
				Args    []string `yaml:"args"`
			} `yaml:"containers"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return "", fmt.Errorf("parse the pod manifest: %w", err)
	}
	const flag = "--encryption-provider-config"
	for _, ct := range pod.Spec.Containers {
		argv := append(slices.Clone(ct.Command), ct.Args...)
		for i, a := range argv {
			var v string
			switch {
			case strings.HasPrefix(a, flag+"="):
				v = strings.TrimPrefix(a, flag+"=")
			case a == flag && i+1 < len(argv):
				v = argv[i+1]
			default:
				continue
			}
			if !strings.HasPrefix(v, "/") {
				return "", fmt.Errorf("%s %q is not an absolute path", flag, v)
			}
			return path.Clean(v), nil
		}
	}
	return "", nil
}

// add adds the file or directory tree at p (a kit path).
func (c *collector) add(p string) error {
	fi, err := os.Stat(c.host(p)) // a symlink named directly is followed
	if err != nil {
		return fmt.Errorf("kit path %s: %w", p, err)
	}
	return c.walk(p, fi)
}

func (c *collector) walk(p string, fi fs.FileInfo) error {
	if _, done := c.entries[p]; done {
		return nil
	}
	e := Entry{Path: p, Mode: fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
	e.UID, e.GID = owner(fi)
	hp := c.host(p)
	switch {
	case fi.Mode().IsRegular():
		if fi.Size() > MaxFileBytes || c.bytes+fi.Size() > MaxKitBytes {
			return fmt.Errorf("kit path %s: %d bytes: a kit holds files up to %d bytes, %d in all", p, fi.Size(), MaxFileBytes, MaxKitBytes)
		}
		data, err := readFile(hp)
		if err != nil {
			return fmt.Errorf("kit path %s: %w", p, err)
		}
		e.Type, e.Data, e.Size = TypeFile, data, int64(len(data))
		c.bytes += e.Size
	case fi.IsDir():
		e.Type = TypeDir
		c.entries[p] = e
		des, err := os.ReadDir(hp)
		if err != nil {
			return fmt.Errorf("kit path %s: %w", p, err)
		}
		for _, de := range des {
			cp := path.Join(p, de.Name())
			cfi, err := os.Lstat(c.host(cp))
			if err != nil {
				return fmt.Errorf("kit path %s: %w", cp, err)
			}
			if err := c.walk(cp, cfi); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(hp)
		if err != nil {
			return fmt.Errorf("kit path %s: %w", p, err)
		}
		if strings.HasPrefix(target, "/") {
			// Absolute targets are kept relative to the link, so that
			// they point into the restored tree, not the host's.
			rel, err := filepath.Rel(path.Dir(p), path.Clean(target))
			if err != nil {
				return fmt.Errorf("kit path %s: symlink to %s: %w", p, target, err)
			}
			target = filepath.ToSlash(rel)
		}
		if err := checkLink(p, target); err != nil {
			return fmt.Errorf("kit path %s: %w", p, err)
		}
		e.Type, e.Link = TypeSymlink, target
	default:
		return fmt.Errorf("kit path %s: %s is not a file, directory or symlink", p, fi.Mode().Type())
	}
	c.entries[p] = e
	return nil
}

// readFile reads at most MaxFileBytes of a file (it may grow meanwhile).
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	return b, nil
}
