// Command image builds lifeboat's container image without a Docker engine
// and without a base image: from root filesystems laid out by
// scripts/image-rootfs.sh, one per platform, it writes an OCI image index
// (one image per platform) as an OCI image layout directory and as a tar of
// that layout (docker load, podman load). Every image has two layers: the
// files every platform shares (CA certificates, zones, /etc/passwd and the
// directories) and the binary. Everything in it is fixed by its inputs:
// file times are -created, owners are root except the state directories
// (65532), entries are sorted, so the same inputs give the same digest.
//
// It is a module of its own (go-containerregistry stays out of lifeboat's
// go.mod); make image runs it: see scripts/build-image.sh.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// uid and gid of the runtime user, and the paths it owns.
const nonroot = 65532

var nonrootPaths = []string{"var/lib/lifeboat", "home/nonroot"}

// binaryPath is the file that goes into the second layer.
const binaryPath = "lifeboat"

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// buildFlags are the flags of a build (run without "push").
type buildFlags struct {
	platforms multiFlag
	labels    map[string]string
	layoutDir string
	tarFile   string
	tag       string
	when      time.Time
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "push" {
		return push(args[1:])
	}
	f, err := parseBuildFlags(args)
	if err != nil {
		return err
	}
	idx, single, err := buildIndex(f)
	if err != nil {
		return err
	}
	tarIndex, err := writeLayout(f, idx, single)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := writeTar(f.layoutDir, f.tarFile, f.tag, single[0].img, f.when, tarIndex); err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

func parseBuildFlags(args []string) (*buildFlags, error) {
	fl := flag.NewFlagSet("image", flag.ContinueOnError)
	var f buildFlags
	var labels multiFlag
	fl.Var(&f.platforms, "platform", "OS/ARCH=ROOTFS, repeatable (linux/amd64=.bin/src/image/amd64)")
	fl.Var(&labels, "label", "KEY=VALUE for the image configs and the index, repeatable")
	fl.StringVar(&f.layoutDir, "layout", "", "the OCI image layout to write (replaced)")
	fl.StringVar(&f.tarFile, "tar", "", "the tar of the layout to write")
	fl.StringVar(&f.tag, "tag", "lifeboat:dev", "the name docker load and podman load give it")
	created := fl.Int64("created", 0, "creation time and file times, Unix seconds (SOURCE_DATE_EPOCH)")
	if err := fl.Parse(args); err != nil {
		return nil, err
	}
	if len(f.platforms) == 0 || f.layoutDir == "" || f.tarFile == "" {
		return nil, errors.New("need -platform, -layout and -tar")
	}
	f.when = time.Unix(*created, 0).UTC()
	f.labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want KEY=VALUE", l)
		}
		f.labels[k] = v
	}
	return &f, nil
}

// buildIndex builds each platform's image and the index of them all.
func buildIndex(f *buildFlags) (v1.ImageIndex, []platformImage, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var single []platformImage
	for _, p := range f.platforms {
		plat, root, ok := strings.Cut(p, "=")
		osName, arch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 {
			return nil, nil, fmt.Errorf("platform %q: want OS/ARCH=ROOTFS", p)
		}
		img, err := buildImage(root, osName, arch, f.when, f.labels)
		if err != nil {
			return nil, nil, fmt.Errorf("build %s: %w", plat, err)
		}
		single = append(single, platformImage{v1.Platform{OS: osName, Architecture: arch}, img})
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
		})
	}
	return mutate.Annotations(idx, f.labels).(v1.ImageIndex), single, nil
}

// writeLayout replaces the layout directory with the index, named for
// containerd, and each platform's image tagged beside it; it returns the
// index.json that names the index alone (the tar's: docker load, podman
// load and ctr import take that one).
func writeLayout(f *buildFlags, idx v1.ImageIndex, single []platformImage) ([]byte, error) {
	if err := os.RemoveAll(f.layoutDir); err != nil {
		return nil, err
	}
	lp, err := layout.Write(f.layoutDir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("write layout %s: %w", f.layoutDir, err)
	}
	ref := f.tag
	if !strings.Contains(ref, "/") {
		ref = "docker.io/library/" + ref
	}
	_, version, _ := strings.Cut(f.tag, ":")
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": version,
	})); err != nil {
		return nil, fmt.Errorf("write layout %s: %w", f.layoutDir, err)
	}
	tarIndex, err := os.ReadFile(filepath.Join(f.layoutDir, "index.json"))
	if err != nil {
		return nil, err
	}
	if err := tagPlatforms(lp, version, single); err != nil {
		return nil, fmt.Errorf("write layout %s: %w", f.layoutDir, err)
	}
	return tarIndex, nil
}

// platformImage is one platform's image of the index.
type platformImage struct {
	platform v1.Platform
	img      v1.Image
}

// tagPlatforms adds each platform's manifest to the layout's index.json
// beside the index, tagged VERSION-ARCH: tools that unpack one image of
// a layout by tag (umoci unpack --image LAYOUT:TAG) need a tag that
// names a single manifest, not an index.
func tagPlatforms(lp layout.Path, version string, imgs []platformImage) error {
	for _, p := range imgs {
		if err := lp.AppendImage(p.img, layout.WithPlatform(p.platform), layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": version + "-" + p.platform.Architecture,
		})); err != nil {
			return err
		}
	}
	return nil
}

// push copies the index tagged REF in a layout to a registry: push
// [-insecure] LAYOUT REF DEST (make push). crane push takes a layout of
// one entry only; this one has the index and its single-platform tags.
func push(args []string) error {
	fl := flag.NewFlagSet("image push", flag.ContinueOnError)
	insecure := fl.Bool("insecure", false, "plain HTTP to the registry")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 3 {
		return errors.New("usage: push [-insecure] LAYOUT TAG REGISTRY/REPOSITORY:TAG")
	}
	dir, tag, dest := fl.Arg(0), fl.Arg(1), fl.Arg(2)
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(dest, opts...)
	if err != nil {
		return err
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] != tag || !d.MediaType.IsIndex() {
			continue
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", dest, err)
		}
		fmt.Println(d.Digest)
		return nil
	}
	return fmt.Errorf("%s has no index tagged %s", dir, tag)
}

// buildImage makes the image of one platform from its root filesystem.
func buildImage(root, osName, arch string, when time.Time, labels map[string]string) (v1.Image, error) {
	base, bin, err := layerTars(root, when)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range []struct {
		data []byte
		by   string
	}{
		{base, "scripts/image-rootfs.sh: CA certificates, zoneinfo, /etc/passwd (nonroot 65532), directories"},
		{bin, "lifeboat: CGO_ENABLED=0 go build -trimpath"},
	} {
		data := l.data
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			History:   v1.History{Created: v1.Time{Time: when}, CreatedBy: l.by},
			MediaType: types.OCILayer,
		})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = osName, arch
	cf.Created = v1.Time{Time: when}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{"/" + binaryPath},
		Cmd:        []string{"agent", "--config", "/etc/lifeboat/config.yaml"},
		WorkingDir: "/var/lib/lifeboat",
		Env:        []string{"PATH=/"},
		// agent.listen defaults to 127.0.0.1:9469; in a container set
		// LIFEBOAT_AGENT_LISTEN=0.0.0.0:9469.
		ExposedPorts: map[string]struct{}{"9469/tcp": {}},
		Labels:       labels,
	}
	return mutate.ConfigFile(img, cf)
}

// layerTars returns the shared layer (everything but the binary) and the
// binary's layer of root, as uncompressed tars.
func layerTars(root string, when time.Time) (base, bin []byte, err error) {
	var paths []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		paths = append(paths, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(paths)
	var bb, binb bytes.Buffer
	bw, binw := tar.NewWriter(&bb), tar.NewWriter(&binb)
	found := false
	for _, rel := range paths {
		w := bw
		if rel == binaryPath {
			w, found = binw, true
		}
		if err := addFile(w, filepath.Join(root, filepath.FromSlash(rel)), rel, when); err != nil {
			return nil, nil, err
		}
	}
	if !found {
		return nil, nil, fmt.Errorf("%s: no /%s", root, binaryPath)
	}
	if err := bw.Close(); err != nil {
		return nil, nil, err
	}
	if err := binw.Close(); err != nil {
		return nil, nil, err
	}
	return bb.Bytes(), binb.Bytes(), nil
}

// addFile writes one entry: its mode and content or link target from the
// file system, everything else fixed.
func addFile(w *tar.Writer, file, rel string, when time.Time) error {
	fi, err := os.Lstat(file)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(file); err != nil {
			return err
		}
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = rel
	if fi.IsDir() {
		h.Name += "/"
	}
	h.Format = tar.FormatPAX
	h.ModTime, h.AccessTime, h.ChangeTime = when, time.Time{}, time.Time{}
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	for _, p := range nonrootPaths {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			h.Uid, h.Gid = nonroot, nonroot
		}
	}
	h.PAXRecords = nil
	h.Xattrs = nil //nolint:staticcheck // cleared so no host xattr leaks in
	if err := w.WriteHeader(h); err != nil {
		return fmt.Errorf("tar %s: %w", rel, err)
	}
	if fi.Mode().IsRegular() {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("tar %s: %w", rel, err)
		}
	}
	return nil
}

// writeTar writes the layout as a tar (an OCI archive; index.json is
// index, the layout's before the single-platform tags) with a Docker
// manifest.json naming the first platform's image, for docker load
// versions that do not read index.json.
func writeTar(layoutDir, tarFile, tag string, first v1.Image, when time.Time, index []byte) error {
	cfgName, err := first.ConfigName()
	if err != nil {
		return err
	}
	layers, err := first.Layers()
	if err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		layerPaths = append(layerPaths, path.Join("blobs", d.Algorithm, d.Hex))
	}
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   path.Join("blobs", cfgName.Algorithm, cfgName.Hex),
		"RepoTags": []string{tag},
		"Layers":   layerPaths,
	}})
	if err != nil {
		return err
	}
	var files []string
	err = filepath.WalkDir(layoutDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, err := filepath.Rel(layoutDir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		return err
	}
	slices.Sort(files)
	tmp := tarFile + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(out)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: when, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(layoutDir, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		if f == "index.json" {
			data = index
		}
		if err := add(f, data); err != nil {
			return fmt.Errorf("write %s: %w", tarFile, err)
		}
	}
	if err := add("manifest.json", manifest); err != nil {
		return fmt.Errorf("write %s: %w", tarFile, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tarFile, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tarFile, err)
	}
	return os.Rename(tmp, tarFile)
}
