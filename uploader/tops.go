package uploader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Tops returns the first path elements of the keys under the store's
// root that have more below them (the "directories" at its root),
// sorted: one ListObjectsV2 with the delimiter "/" per thousand names,
// not a listing of every object. A reader of many clusters lists each
// one's prefix from it, several at once.
func (s *S3) Tops(ctx context.Context) ([]string, error) { return s.Dirs(ctx, "") }

// Dirs is Tops of the directory under (a key prefix ending in "/", or ""
// for the root): the first path elements below it that have more below
// them, sorted, without listing what they hold.
func (s *S3) Dirs(ctx context.Context, under string) ([]string, error) {
	prefix := s.prefix + under
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket:    aws.String(s.cfg.Bucket),
		Prefix:    aws.String(prefix),
		Delimiter: aws.String("/"),
		MaxKeys:   aws.Int32(1000),
	})
	var out []string
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", s.name(prefix), err)
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), prefix), "/")
			if name != "" {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Tops returns the directories at the store's root, sorted (temporary
// directories of unfinished Puts skipped); a missing root has none.
func (d *Dir) Tops(ctx context.Context) ([]string, error) { return d.Dirs(ctx, "") }

// Dirs is Tops of the directory under (a key prefix ending in "/", or ""
// for the root); a missing directory has none.
func (d *Dir) Dirs(ctx context.Context, under string) ([]string, error) {
	p := filepath.Join(d.root, filepath.FromSlash(under))
	es, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	var out []string
	for _, e := range es {
		if e.IsDir() && !strings.HasPrefix(e.Name(), tempPrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// ListAfter is List of the keys under prefix that sort after the key
// after: S3's StartAfter, so that only what was added after a known key
// is transferred (keys that sort by time: what is new). after "" lists
// everything under prefix.
func (s *S3) ListAfter(ctx context.Context, prefix, after string, fn func(ObjectInfo) error) error {
	in := &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.cfg.Bucket),
		Prefix:  aws.String(s.prefix + prefix),
		MaxKeys: aws.Int32(1000),
	}
	if after != "" {
		in.StartAfter = aws.String(s.prefix + after)
	}
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list %s: %w", s.name(s.prefix+prefix), err)
		}
		for _, o := range page.Contents {
			info := ObjectInfo{
				Key:     strings.TrimPrefix(aws.ToString(o.Key), s.prefix),
				Size:    aws.ToInt64(o.Size),
				ModTime: aws.ToTime(o.LastModified),
			}
			if err := fn(info); err != nil {
				return err
			}
		}
	}
	return nil
}

// ListAfter is List of the keys under prefix that sort after the key
// after (a directory is listed whole and filtered).
func (d *Dir) ListAfter(ctx context.Context, prefix, after string, fn func(ObjectInfo) error) error {
	return d.List(ctx, prefix, func(o ObjectInfo) error {
		if o.Key <= after {
			return nil
		}
		return fn(o)
	})
}
