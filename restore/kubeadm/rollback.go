package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Rollback puts the node back as it was before the restore j: etcd and
// the apiserver stopped, the restored data dir moved to
// <data dir>.lifeboat-restored-<time> (kept) and the old one back in
// place, then both manifests back and both serving. It works from any
// phase and, like Run, is idempotent: run it again after a crash.
func Rollback(ctx context.Context, n *Node, j *Journal, o Options) error {
	o.defaults()
	r := &run{n: n, j: j, o: o}
	if err := moveManifests(j.Manifests, j.Aside, present(j.Manifests, EtcdYAML, APIYAML)...); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	if _, err := r.waitStopped(ctx); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	note, err := r.unswap()
	if err != nil {
		return fmt.Errorf("rollback: %w (journal %s: run --rollback again)", err, j.File())
	}
	fmt.Fprintf(o.Out, "[rollback] %s\n", note)
	if err := moveManifests(j.Aside, j.Manifests, EtcdYAML); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	cli, err := r.etcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	ep := n.ClientURLs[0]
	err = r.wait(ctx, o.StartTimeout, "etcd to serve at "+ep, func(ctx context.Context) (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := cli.Status(cctx, ep)
		if err != nil {
			return false, err.Error(), nil
		}
		return s.Leader != 0, "no leader yet", nil
	})
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	fmt.Fprintf(o.Out, "[rollback] etcd serves the old data dir at %s\n", ep)
	if err := moveManifests(j.Aside, j.Manifests, APIYAML); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	if err := r.waitReady(ctx); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	fmt.Fprintf(o.Out, "[rollback] the apiserver is ready at %s\n", n.APIServer)
	return j.advance(PhaseRolledBack, o.Now(), note)
}

// present returns the names that exist in dir.
func present(dir string, names ...string) []string {
	var out []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// unswap puts the old data dir back in place, keeping the restored one.
func (r *run) unswap() (string, error) {
	j := r.j
	if _, err := os.Stat(j.OldDataDir); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(j.DataDir); err != nil {
			return "", fmt.Errorf("neither %s nor %s exists", j.OldDataDir, j.DataDir)
		}
		var left []string
		if _, err := os.Stat(j.NewDataDir); err == nil {
			left = append(left, j.NewDataDir+" (the restore, unused) is left as it is")
		}
		return strings.Join(append([]string{"the data dir was never swapped: " + j.DataDir + " is the old one"}, left...), "; "), nil
	}
	if j.RestoredDataDir == "" {
		j.RestoredDataDir = strings.Replace(j.NewDataDir, ".lifeboat-new-", ".lifeboat-restored-", 1)
		if err := j.save(); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(j.DataDir); err == nil {
		if err := os.Rename(j.DataDir, j.RestoredDataDir); err != nil {
			return "", fmt.Errorf("move the restored data dir aside: %w", err)
		}
	}
	if err := os.Rename(j.OldDataDir, j.DataDir); err != nil {
		return "", fmt.Errorf("move the old data dir back: %w", err)
	}
	if err := syncDir(filepath.Dir(j.DataDir)); err != nil {
		return "", err
	}
	return fmt.Sprintf("the old data dir is back at %s; the restored one is kept at %s", j.DataDir, j.RestoredDataDir), nil
}
