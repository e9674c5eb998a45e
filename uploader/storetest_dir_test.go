package uploader_test

import (
	"path/filepath"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func TestDirStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) uploader.Store {
		d, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatalf("NewDir: %v", err)
		}
		return d
	})
}
