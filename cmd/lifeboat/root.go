package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// app carries what every command needs: output streams and the option
// flags that become the configuration.
type app struct {
	stdout, stderr io.Writer
	configFile     string
	optFlags       []boundFlag // every option flag of every command
	getenv         func(string) string
	environ        func() []string // NAME=value, as os.Environ
	envWarned      bool            // unknown LIFEBOAT_* variables were warned of
	// identityFile is the loaded configuration's encryption.identity_file:
	// a decryption error names it (explainKeys).
	identityFile string
}

// config loads the effective configuration (file, env, flags) for a
// command that stores no backup: the runtime's soft memory limit is the
// headroom alone (a download is one stream through small buffers).
func (a *app) config() (*Config, error) {
	return a.loadConfig(false)
}

// checkedConfig is config for config check: an unknown LIFEBOAT_*
// variable is an error, and errors found beyond Validate (the TLS
// files) are located like its own (the file's line, the variable, the
// flag).
func (a *app) checkedConfig() (*Config, func(error) error, error) {
	if err := a.checkEnv(true); err != nil {
		return nil, nil, err
	}
	cfg, from, err := loadConfig(a.configPath(), a.getenv, a.givenFlags())
	if err != nil {
		return nil, nil, err
	}
	return cfg, from.locate, nil
}

// configPath is the configuration file: --config, else LIFEBOAT_CONFIG.
func (a *app) configPath() string {
	if a.configFile != "" {
		return a.configFile
	}
	return a.getenv("LIFEBOAT_CONFIG")
}

// uploadConfig is config for the commands that store backups (snapshot,
// agent, demo): the soft limit also leaves room for an S3 upload's part
// buffers.
func (a *app) uploadConfig() (*Config, error) {
	return a.loadConfig(true)
}

func (a *app) loadConfig(uploads bool) (*Config, error) {
	_ = a.checkEnv(false) // warnings only
	cfg, err := LoadConfig(a.configPath(), a.getenv, a.givenFlags())
	if err != nil {
		return nil, err
	}
	setMemoryLimit(uploadBuffers(cfg, uploads))
	a.identityFile = cfg.Encryption.IdentityFile
	return cfg, nil
}

// explainKeys adds to an error of identities that decrypt nothing the
// file they came from.
func (a *app) explainKeys(err error) error {
	if a.identityFile != "" && (errors.Is(err, repository.ErrDecrypt) || errors.Is(err, kit.ErrDecrypt)) {
		return fmt.Errorf("%w; none of the identities in %s matches", err, a.identityFile)
	}
	return err
}

// uploadBuffers is what a command that stores (uploads) holds in bounded
// buffers on top of the runtime's headroom: the S3 upload's part buffers,
// and, in a daemon that captures, capture's bound (its buffered changes
// and a segment being encoded, up to two of them).
func uploadBuffers(cfg *Config, uploads bool) int64 {
	if !uploads {
		return 0
	}
	buffers := partBuffers(cfg)
	if cfg.Capture.Enabled {
		buffers += cfg.Capture.MaxBufferBytes + 2*cfg.Capture.MaxSegmentBytes
	}
	return buffers
}

// partBuffers is what the S3 uploads of a backup and of its copies hold
// in part buffers.
func partBuffers(cfg *Config) int64 {
	buffers := storeBuffers(cfg.Store.URL, cfg.Store.S3)
	// A copy uploads after the backup it copies has committed: the
	// largest one's buffers, not their sum (the heap's headroom covers
	// a copy that overlaps the next backup; the GC works harder then).
	for _, cc := range cfg.Copies {
		buffers = max(buffers, storeBuffers(cc.URL, cfg.copyS3(cc)))
	}
	return buffers
}

// storeBuffers is what one upload to the store at url holds in part
// buffers: (concurrency+2) × part size on S3, nothing for a directory.
func storeBuffers(url string, s S3StoreConfig) int64 {
	u, err := uploader.ParseStoreURL(url)
	if err != nil || u.Scheme != "s3" {
		return 0
	}
	c := s3Config(u, s).WithDefaults()
	return int64(c.Concurrency+2) * c.PartSize
}

// logger is the command's logger. It is also slog's default, so that
// what libraries write with the standard log package (the AWS SDK's
// transfer manager does) is a record of the same format and stream.
func (a *app) logger(c *Config) *slog.Logger {
	lg := newLogger(a.stderr, c.Log.Level, c.Log.Format)
	slog.SetDefault(lg)
	return lg
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root, _ := newRoot(stdout, stderr)
	return root
}

// newRoot is newRootCmd with its app, whose state outlives a run.
func newRoot(stdout, stderr io.Writer) (*cobra.Command, *app) {
	a := &app{stdout: stdout, stderr: stderr, getenv: os.Getenv, environ: os.Environ}
	root := &cobra.Command{
		Use:           "lifeboat",
		Short:         "Verified etcd backups, shipped, retained and restore-drilled",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	// --version says what `lifeboat version` says.
	root.SetVersionTemplate(versionLine() + "\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "YAML config file (also LIFEBOAT_CONFIG)")
	a.addOptionFlags(pf, groupGlobal, 0)

	root.AddCommand(
		withoutConfig(newVersionCmd(a)),
		newConfigCmd(a),
		withoutConfig(newKeygenCmd(a)),
		newSnapshotCmd(a),
		newListCmd(a),
		newLogCmd(a),
		newVerifyCmd(a),
		newDemoCmd(a),
		newPruneCmd(a),
		newScrubCmd(a),
		newCopyCmd(a),
		newRestoreCmd(a),
		newFetchCmd(a),
		newLsCmd(a),
		newGetCmd(a),
		newDiffCmd(a),
		newDrillCmd(a),
		newKitCmd(a),
		newAgentCmd(a),
		newFleetCmd(a),
		newEtcdCmd(a),
		newRestoreChildCmd(a),
		newReplayChildCmd(a),
		newDocsCmd(a),
	)
	var bind func(c *cobra.Command)
	bind = func(c *cobra.Command) {
		key := c.Name()
		if p := c.Parent(); p != nil && p != root {
			if _, ok := commandGroups[p.Name()+" "+key]; ok {
				key = p.Name() + " " + key // kit list, kit restore: not list, restore
			}
		}
		if g, ok := commandGroups[key]; ok {
			a.withOptions(c, g)
		}
		for _, sub := range c.Commands() {
			bind(sub)
		}
	}
	bind(root)
	return root, a
}
