package backup

import (
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestRunRefusesUnknownLiveHashKV checks that a backup, run as a library,
// refuses the live HashKV modes the configuration refuses
// (snapshot.live_hashkv) before it takes anything, instead of reading them
// as "always".
func TestRunRefusesUnknownLiveHashKV(t *testing.T) {
	f := jobtest.NewFixture(t, nil, 10)
	for _, tc := range []struct {
		mode, want string
	}{
		{"sometimes", `backup: live hashkv: "sometimes" is not "always", "auto" or "defer"`},
		{"ALWAYS", `backup: live hashkv: "ALWAYS" is not "always", "auto" or "defer"`},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			job := Job{
				Etcd: f.EtcdConfig(), SpoolDir: f.Spool, Backups: f.Backups,
				Encoding: repository.Encoding{Compression: "zstd"}, LiveHashKV: tc.mode, Version: "test",
			}
			lg, _ := jobtest.Logger(t)
			_, err := Run(t.Context(), job, lg)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Run: got error %v, want %q", err, tc.want)
			}
			if ids := jobtest.Manifests(t, f.Backups); len(ids) != 0 {
				t.Errorf("backups after the refused run: %v, want none", ids)
			}
		})
	}
}
