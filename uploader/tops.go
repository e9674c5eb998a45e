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
