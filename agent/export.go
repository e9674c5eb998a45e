package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	"github.com/prometheus/common/expfmt"
)

// WriteTextfile writes g's metrics to path in the text format for
// node_exporter's textfile collector, atomically: a temporary file in the
// same directory (a dot-name the collector ignores), fsync, rename, fsync
// of the directory. A reader sees the old file or the new one, never half.
//
// The file is 0644, not the house's 0600: node_exporter usually runs as
// another user and must read it, and metrics hold no secrets.
func WriteTextfile(path string, g prometheus.Gatherer) error {
	mfs, err := g.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return fmt.Errorf("encode metrics: %w", err)
		}
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write metrics textfile: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("write metrics textfile %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write metrics textfile %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write metrics textfile %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write metrics textfile %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write metrics textfile: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write metrics textfile: sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write metrics textfile: sync directory %s: %w", dir, err)
	}
	return nil
}

// Push sends g's metrics to a Prometheus Pushgateway at gatewayURL, as job
// "lifeboat" grouped by cluster and instance, replacing that group's
// previous metrics (HTTP PUT). instance names the set of jobs the run did
// (e.g. "snapshot-prune"), so a daily drill CronJob and an hourly backup
// CronJob keep separate groups instead of erasing each other's series. The URL may hold credentials (user:password@): errors show
// it without them.
func Push(ctx context.Context, gatewayURL, cluster, instance string, g prometheus.Gatherer, client *http.Client) error {
	if client == nil {
		client = &http.Client{}
	}
	p := push.New(gatewayURL, "lifeboat").Grouping("cluster", cluster).Grouping("instance", instance).Gatherer(g).Client(client)
	if u, err := url.Parse(gatewayURL); err == nil && u.User != nil {
		pw, _ := u.User.Password()
		p = p.BasicAuth(u.User.Username(), pw)
	}
	if err := p.PushContext(ctx); err != nil {
		safe := redactURL(gatewayURL)
		msg := strings.ReplaceAll(err.Error(), gatewayURL, safe)
		if u, perr := url.Parse(gatewayURL); perr == nil && u.User != nil {
			msg = strings.ReplaceAll(msg, u.User.String(), "<redacted>")
		}
		return fmt.Errorf("push metrics to %s: %s", safe, msg)
	}
	return nil
}

// redactURL drops the user info of a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparsable URL>"
	}
	u.User = nil // credentials never appear
	return u.String()
}
