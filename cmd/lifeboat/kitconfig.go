package main

import (
	"path/filepath"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// validate checks kit.paths and kit.root; a kit needs recipients.
func (k KitConfig) validate(enc EncryptionConfig) error {
	if err := kit.ValidatePaths(k.Paths); err != nil {
		return cfgErr("kit.paths", "%v", err)
	}
	if !filepath.IsAbs(k.Root) {
		return cfgErr("kit.root", "%q is not an absolute directory", k.Root)
	}
	if len(k.Paths) > 0 && len(enc.Recipients) == 0 && enc.RecipientsFile == "" {
		return cfgErr("kit.paths", "%v", kit.ErrNoRecipients)
	}
	return nil
}

// kitSource is the backup's kit source cfg describes (nil without kit.paths).
func kitSource(cfg *Config, enc repository.Encoding) *backup.KitSource {
	if len(cfg.Kit.Paths) == 0 {
		return nil
	}
	return &backup.KitSource{
		Root:       cfg.Kit.Root,
		Paths:      cfg.Kit.Paths,
		Encryption: kit.Encryption{Recipients: enc.Recipients, RecipientKeys: enc.RecipientKeys},
	}
}
