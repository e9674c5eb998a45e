package kit

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// Entry types.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
)

// Limits of a kit: a kubeadm PKI is about 30 files of a few KiB. They bound
// what Parse reads from an untrusted object.
const (
	MaxEntries   = 10000
	MaxFileBytes = 16 << 20
	MaxKitBytes  = 64 << 20
)

// Entry is one file, directory or symbolic link of a kit.
type Entry struct {
	// Path is the original absolute path, slash separated and clean
	// ("/etc/kubernetes/pki/ca.crt"), without the collection root.
	Path string `json:"path"`
	// Type is TypeFile, TypeDir or TypeSymlink.
	Type string `json:"type"`
	// Mode holds the permission bits (and setuid, setgid, sticky).
	Mode fs.FileMode `json:"mode"`
	// UID and GID are the owner as numbers.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Size is the length of Data (files).
	Size int64 `json:"size"`
	// Link is a symlink's target, relative and inside the kit.
	Link string `json:"link,omitempty"`
	// Data is a file's content; never in a manifest.
	Data []byte `json:"-"`
}

// Kit is a parsed kit: entries sorted by path.
type Kit struct {
	Entries []Entry
}

// ErrBadKit is wrapped by every error about a kit's content (an archive
// that does not parse, an entry that is not allowed, a checksum mismatch).
var ErrBadKit = errors.New("bad recovery kit")

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadKit, fmt.Sprintf(format, a...))
}

// Archive returns the kit's canonical archive: a tar stream of its entries
// in path order, each header with name (the path without its leading
// slash), type, mode, uid, gid, size and link only. Its sha256 is the kit's
// id (ID).
func (k *Kit) Archive() ([]byte, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range k.Entries {
		h := &tar.Header{
			Name:    strings.TrimPrefix(e.Path, "/"),
			Mode:    int64(tarMode(e.Mode)),
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: time.Unix(0, 0),
			Format:  tar.FormatPAX,
		}
		switch e.Type {
		case TypeFile:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		case TypeDir:
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		case TypeSymlink:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("archive %s: %w", e.Path, err)
		}
		if e.Type == TypeFile {
			if _, err := tw.Write(e.Data); err != nil {
				return nil, fmt.Errorf("archive %s: %w", e.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return buf.Bytes(), nil
}

// tarMode is the Unix permission word of m as tar stores it.
func tarMode(m fs.FileMode) uint32 {
	v := uint32(m & fs.ModePerm)
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

func fileMode(v int64) fs.FileMode {
	m := fs.FileMode(v) & fs.ModePerm
	if v&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// ID returns the hex sha256 of an archive: its content digest
// (Manifest.ContentSHA256), and the id of a kit stored before ids covered
// the recipients. A kit stored now has the id IDFor(ID(archive), keys).
func ID(archive []byte) string {
	s := sha256.Sum256(archive)
	return hex.EncodeToString(s[:])
}

// IDFor returns the id of a kit whose archive has the content digest
// content, encrypted to the recipient keys: the hex sha256 over the
// digest and the recipient set (sorted, without duplicates). The same
// files for the same recipients give the same id (a kit stored once
// however many backups name it); new recipients give a new kit, encrypted
// to them alone.
func IDFor(content string, recipients []string) string {
	h := sha256.New()
	h.Write([]byte("lifeboat kit id 2\n" + content + "\n"))
	for _, r := range RecipientSet(recipients) {
		h.Write([]byte(r + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RecipientSet returns the recipient keys sorted, without duplicates.
func RecipientSet(keys []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(keys)))
}

// ValidID reports whether id has the shape of a kit id (64 lower-case hex).
func ValidID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Parse reads a kit archive, untrusted: errors wrap ErrBadKit. It accepts
// exactly what Archive writes (and what validate allows): regular files,
// directories and symlinks with clean relative names, in path order
// without duplicates, within the limits above.
func Parse(archive []byte) (*Kit, error) {
	if len(archive) > MaxKitBytes {
		return nil, bad("archive of %d bytes is larger than %d", len(archive), MaxKitBytes)
	}
	tr := tar.NewReader(bytes.NewReader(archive))
	k := &Kit{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, bad("archive: %v", err)
		}
		if len(k.Entries) >= MaxEntries {
			return nil, bad("more than %d entries", MaxEntries)
		}
		e := Entry{
			Path: "/" + strings.TrimSuffix(h.Name, "/"),
			Mode: fileMode(h.Mode),
			UID:  h.Uid,
			GID:  h.Gid,
		}
		if h.Mode < 0 || h.Mode > 0o7777 {
			return nil, bad("%q: mode %o", h.Name, h.Mode)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			e.Type = TypeFile
			if h.Size < 0 || h.Size > MaxFileBytes {
				return nil, bad("%q: size %d", h.Name, h.Size)
			}
			data, err := io.ReadAll(io.LimitReader(tr, h.Size+1))
			if err != nil {
				return nil, bad("%q: %v", h.Name, err)
			}
			if int64(len(data)) != h.Size {
				return nil, bad("%q: %d bytes, header says %d", h.Name, len(data), h.Size)
			}
			e.Data, e.Size = data, h.Size
		case tar.TypeDir:
			e.Type = TypeDir
		case tar.TypeSymlink:
			e.Type, e.Link = TypeSymlink, h.Linkname
		default:
			return nil, bad("%q: type %q is not a file, directory or symlink", h.Name, h.Typeflag)
		}
		k.Entries = append(k.Entries, e)
	}
	if err := k.validate(); err != nil {
		return nil, err
	}
	return k, nil
}

// validate checks what Parse and Archive both require: clean absolute
// paths, sorted, unique, no entry under a symlink, symlink targets
// relative and inside the kit, sizes within the limits.
func (k *Kit) validate() error {
	if len(k.Entries) > MaxEntries {
		return bad("more than %d entries", MaxEntries)
	}
	var total int64
	links := map[string]bool{}
	for i, e := range k.Entries {
		if err := checkPath(e.Path); err != nil {
			return err
		}
		if i > 0 && k.Entries[i-1].Path >= e.Path {
			return bad("%q: entries not in path order or duplicated", e.Path)
		}
		if e.UID < 0 || e.GID < 0 {
			return bad("%q: negative owner", e.Path)
		}
		for p := path.Dir(e.Path); p != "/"; p = path.Dir(p) {
			if links[p] {
				return bad("%q: under the symlink %q", e.Path, p)
			}
		}
		switch e.Type {
		case TypeFile:
			if int64(len(e.Data)) > MaxFileBytes {
				return bad("%q: %d bytes", e.Path, len(e.Data))
			}
			total += int64(len(e.Data))
		case TypeDir:
		case TypeSymlink:
			if err := checkLink(e.Path, e.Link); err != nil {
				return err
			}
			links[e.Path] = true
		default:
			return bad("%q: type %q", e.Path, e.Type)
		}
	}
	if total > MaxKitBytes {
		return bad("%d bytes of files, more than %d", total, MaxKitBytes)
	}
	return nil
}

// checkPath requires an absolute, clean, slash-separated path other than
// "/" without NUL or backslash.
func checkPath(p string) error {
	switch {
	case p == "/" || !strings.HasPrefix(p, "/"):
		return bad("path %q is not an absolute file path", p)
	case path.Clean(p) != p:
		return bad("path %q is not clean", p)
	case strings.ContainsAny(p, "\x00\\"):
		return bad("path %q has a NUL or backslash", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return bad("path %q has ..", p)
	}
	return nil
}

// checkLink requires a symlink target that is relative and, resolved from
// the link's directory, stays inside the kit's tree.
func checkLink(p, target string) error {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsAny(target, "\x00\\") {
		return bad("symlink %q: target %q is not a relative path", p, target)
	}
	depth := strings.Count(path.Dir(p), "/")
	if path.Dir(p) == "/" {
		depth = 0
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "..":
			depth--
		case ".", "":
		default:
			depth++
		}
		if depth < 0 {
			return bad("symlink %q: target %q leaves the kit", p, target)
		}
	}
	return nil
}
