//go:build !linux || !(amd64 || arm64)

package restore

import "errors"

// skipSyncs is not available here: the restore child syncs as etcdutl does.
func skipSyncs() error { return errors.New("skipping syncs needs Linux on amd64 or arm64") }
