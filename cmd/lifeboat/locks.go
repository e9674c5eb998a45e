package main

import (
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// lockPolicy is the Object Lock every write to the store cfg names
// requests (store.object_lock; a copy's config carries the copy's):
// everything a restore reads for store.object_lock.retain, and the
// segments and markers capture's compaction replaces for as long as
// compaction needs them (repository.LockPolicy). Compaction counts only
// when it runs: with capture on, and, for encrypted segments, an identity
// to read them with (capture.compactLoop); otherwise every segment is
// locked for the full retain.
func lockPolicy(cfg *Config) repository.LockPolicy {
	l := cfg.Store.ObjectLock
	p := repository.LockPolicy{Retention: uploader.Retention{Mode: l.Mode, For: time.Duration(l.Retain), LegalHold: l.LegalHold}}
	compact, err := cfg.Capture.compactPolicy()
	encrypted := len(cfg.Encryption.Recipients) > 0 || cfg.Encryption.RecipientsFile != ""
	if err == nil && len(compact.Levels) > 0 && (!encrypted || cfg.Encryption.IdentityFile != "") {
		p.Compaction = compact
	}
	return p
}
