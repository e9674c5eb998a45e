// Command kube-images builds the container images of the kubeadm node of
// the tests (internal/test/kubeadmtest) without a Docker engine and without
// a registry: each image is one layer holding one static binary (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler at
// /usr/local/bin/NAME, on the PATH the static pods' commands use; pause at
// /pause, its entrypoint) and /tmp. All of them go into one Docker archive
// that `ctr -n k8s.io images import` reads, each under the name kubeadm
// asks for (`kubeadm config images list`). File times and the creation time
// are -created, owners root: the same binaries give the same digests.
//
// It is a module of its own (go-containerregistry stays out of lifeboat's
// go.mod); scripts/build-kube-images.sh runs it.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kube-images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("kube-images", flag.ContinueOnError)
	var images multiFlag
	fl.Var(&images, "image", "REF=BINARY, repeatable (lifeboat.local/etcd:v3.7.3=.bin/etcd); pause images get the binary as /pause")
	out := fl.String("o", "", "the Docker archive to write (replaced)")
	created := fl.Int64("created", 0, "creation time and file times, Unix seconds")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if len(images) == 0 || *out == "" {
		return errors.New("need -image and -o")
	}
	when := time.Unix(*created, 0).UTC()
	refs := map[name.Reference]v1.Image{}
	for _, spec := range images {
		ref, bin, ok := strings.Cut(spec, "=")
		if !ok || bin == "" {
			return fmt.Errorf("-image %q: want REF=BINARY", spec)
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("-image %q: %w", spec, err)
		}
		img, err := buildImage(tag, bin, when)
		if err != nil {
			return fmt.Errorf("image %s from %s: %w", ref, bin, err)
		}
		refs[tag] = img
	}
	tmp := *out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return os.Rename(tmp, *out)
}

// buildImage is one image of tag: the binary at /pause (a pause image) or
// /usr/local/bin/NAME (NAME: the repository's last element).
func buildImage(tag name.Tag, bin string, when time.Time) (v1.Image, error) {
	base := path.Base(tag.RepositoryStr())
	target := "usr/local/bin/" + base
	if base == "pause" {
		target = "pause"
	}
	data, err := layerTar(bin, target, when)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: when}, CreatedBy: "scripts/kube-images: " + path.Base(bin)},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: when}
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + target},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
	}
	return mutate.ConfigFile(img, cf)
}

// layerTar is an uncompressed tar of the directories, /tmp and the binary
// at target.
func layerTar(bin, target string, when time.Time) ([]byte, error) {
	content, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	dirs := []string{"tmp/"}
	for d := path.Dir(target); d != "."; d = path.Dir(d) {
		dirs = append(dirs, d+"/")
	}
	for i := len(dirs) - 1; i >= 0; i-- { // parents first
		mode := int64(0o755)
		if dirs[i] == "tmp/" {
			mode = 0o1777
		}
		if err := w.WriteHeader(&tar.Header{Name: dirs[i], Typeflag: tar.TypeDir, Mode: mode, ModTime: when, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := w.WriteHeader(&tar.Header{Name: target, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(content)), ModTime: when, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := w.Write(content); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
