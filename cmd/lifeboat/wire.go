package main

import (
	"context"
	"log/slog"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// openStore opens the store the configuration names; a directory store
// is created only when create is set (the writers: snapshot, the agent,
// the demo, a copy's store), readers refuse a missing one.
func openStore(ctx context.Context, cfg *Config, lg *slog.Logger, create bool) (uploader.Store, error) {
	u, err := uploader.ParseStoreURL(cfg.Store.URL)
	if err != nil {
		return nil, &ConfigError{Key: "store.url", Err: err}
	}
	switch u.Scheme {
	case "file":
		if !create {
			return uploader.OpenDir(u.Dir)
		}
		return uploader.NewDir(u.Dir)
	case "s3":
		sc := cfg.s3Config(u)
		sc.CreateBucket = sc.CreateBucket && create // a reader never creates the bucket
		st, err := uploader.NewS3(ctx, sc, lg)
		if err != nil {
			return nil, err
		}
		return st, nil
	default:
		return nil, cfgErr("store.url", "%s stores are not supported by this build", u.Scheme)
	}
}

// openBackups opens the repository of an existing store (readers).
func openBackups(ctx context.Context, cfg *Config, lg *slog.Logger) (*repository.Repo, error) {
	return openRepo(ctx, cfg, lg, false)
}

// createBackups opens the repository, creating a directory store that
// does not exist yet (the writers: snapshot, the agent, the demo).
func createBackups(ctx context.Context, cfg *Config, lg *slog.Logger) (*repository.Repo, error) {
	return openRepo(ctx, cfg, lg, true)
}

func openRepo(ctx context.Context, cfg *Config, lg *slog.Logger, create bool) (*repository.Repo, error) {
	st, err := openStore(ctx, cfg, lg, create)
	if err != nil {
		return nil, err
	}
	return trustedRepo(st, cfg, lg)
}

// trustedRepo is the repository of cfg's cluster in st with the
// configured signing key, trust and lineage choice.
func trustedRepo(st uploader.Store, cfg *Config, lg *slog.Logger) (*repository.Repo, error) {
	r := repository.New(st, cfg.Cluster)
	key, trust, err := signingFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	r.Signer, r.Trust, r.Lineage, r.Log = key, trust, cfg.Lineage.Select, lg
	r.Lock = lockPolicy(cfg) // store.object_lock of the store cfg names
	return r, nil
}

// signingFromConfig loads the signing key (nil without one) and the
// readers' trust: the trusted keys and the signing key's own public key.
func signingFromConfig(cfg *Config) (*signing.Key, *signing.Trust, error) {
	trust := &signing.Trust{AllowUnsigned: cfg.Signing.AllowUnsigned}
	for _, s := range cfg.Signing.TrustedKeys {
		p, err := signing.ParsePublicKey(s)
		if err != nil {
			return nil, nil, &ConfigError{Key: "signing.trusted_keys", Err: err}
		}
		trust.Keys = append(trust.Keys, p)
	}
	var key *signing.Key
	if cfg.Signing.KeyFile != "" {
		k, err := signing.LoadKey(cfg.Signing.KeyFile)
		if err != nil {
			return nil, nil, &ConfigError{Key: "signing.key_file", Err: err}
		}
		key = k
		trust.Keys = append(trust.Keys, k.Public())
	}
	return key, trust, nil
}

func encodingFromConfig(cfg *Config) (repository.Encoding, error) {
	var files []string
	if cfg.Encryption.RecipientsFile != "" {
		files = append(files, cfg.Encryption.RecipientsFile)
	}
	rs, keys, err := repository.ParseRecipients(cfg.Encryption.Recipients, files)
	if err != nil {
		return repository.Encoding{}, &ConfigError{Key: "encryption.recipients", Err: err}
	}
	return repository.Encoding{Compression: cfg.Store.Compression, Recipients: rs, RecipientKeys: keys}, nil
}

func identities(cfg *Config) ([]age.Identity, error) {
	if cfg.Encryption.IdentityFile == "" {
		return nil, nil
	}
	ids, err := repository.ParseIdentityFile(cfg.Encryption.IdentityFile)
	if err != nil {
		return nil, &ConfigError{Key: "encryption.identity_file", Err: err}
	}
	return ids, nil
}

func etcdConfig(cfg *Config) snapshot.Config {
	return snapshot.Config{
		Endpoints:   cfg.Etcd.Endpoints,
		CACert:      cfg.Etcd.CACert,
		Cert:        cfg.Etcd.Cert,
		Key:         cfg.Etcd.Key,
		User:        cfg.Etcd.User,
		Password:    cfg.Etcd.Password,
		DialTimeout: cfg.Etcd.DialTimeout,
		Member:      cfg.Etcd.Member,
	}
}

func snapshotOptions(cfg *Config) snapshot.Options {
	chunk := cfg.Snapshot.WritebackChunk
	if chunk == 0 {
		chunk = -1 // the config's 0 means "leave writeback to the kernel"
	}
	return snapshot.Options{
		StallTimeout: cfg.Snapshot.StallTimeout,
		Timeout:      cfg.Snapshot.Timeout,
		Chunk:        chunk,
	}
}

// snapshotJob builds the snapshot job cfg describes.
func snapshotJob(cfg *Config, backups *repository.Repo, enc repository.Encoding) *backup.Job {
	return &backup.Job{
		Etcd:         etcdConfig(cfg),
		Options:      snapshotOptions(cfg),
		SpoolDir:     cfg.Snapshot.SpoolDir,
		Backups:      backups,
		Encoding:     enc,
		LockMode:     cfg.Store.ObjectLock.Mode,
		LockRetain:   time.Duration(cfg.Store.ObjectLock.Retain),
		LegalHold:    cfg.Store.ObjectLock.LegalHold,
		LiveHashKV:   cfg.Snapshot.LiveHashKV,
		Kit:          kitSource(cfg, enc),
		Version:      Version,
		AdoptCluster: cfg.Lineage.AdoptCluster,
	}
}

// addOutputFlag adds -o/--output (table or json) to a command.
func addOutputFlag(c *cobra.Command, v *string, usage string) {
	c.Flags().StringVarP(v, "output", "o", "table", usage)
}

// checkOutput rejects an --output other than table or json (exit 2).
func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usagef("--output %q: use table or json", o)
	}
	return nil
}

// noteDamage records the damage err proves (a *repository.DamageError, or
// a segment of segs a replay found damaged) in b, found by foundBy; a
// failure to record it (read-only credentials) is logged, and the
// command goes on with err.
func noteDamage(ctx context.Context, b *repository.Repo, err error, segs []repository.SegmentInfo, foundBy string, lg *slog.Logger) {
	de := repository.SegmentDamage(err, segs)
	if de == nil {
		return
	}
	if rerr := b.NoteDamage(ctx, de, foundBy); rerr != nil {
		lg.Warn("the damage found is not recorded in the store (read-only credentials?)", "object", de.Key, "err", rerr)
		return
	}
	lg.Info("damage recorded in the store: lifeboat list shows it", "object", de.Key)
}
