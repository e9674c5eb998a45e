package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	"github.com/prometheus/common/expfmt"

	"github.com/lifeboat-dev/lifeboat/internal/writeback"
)

// WriteTextfile writes g's metrics to path in the text format for
// node_exporter's textfile collector, atomically: a temporary file in the
// same directory (a dot-name the collector ignores), fsync, rename, fsync
// of the directory. A reader sees the old file or the new one, never half.
//
// It is client_golang's prometheus.WriteToTextfile (the same encoding, the
// same 0644) plus what that one lacks: WriteToTextfile renames its
// temporary file without an fsync of the file or of the directory, so
// after a power loss the textfile node_exporter reads can be empty or
// missing although the run reported success. The write itself is
// writeback.WriteFileAtomic, lifeboat's one atomic file write.
//
// The file is 0644, not the house's 0600: node_exporter usually runs as
// another user and must read it, and metrics hold no secrets.
func WriteTextfile(path string, g prometheus.Gatherer) error {
	mfs, err := g.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	err = writeback.WriteFileAtomic(path, writeback.FileOptions{Perm: 0o644}, func(w io.Writer) error {
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
				return fmt.Errorf("encode metrics: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write metrics textfile: %w", err)
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
