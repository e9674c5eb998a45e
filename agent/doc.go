// Package agent runs lifeboat's jobs: a snapshot job (take, verify, encode,
// store, commit), a prune job (retention, orphans) and, as the daemon, their schedules, metrics and
// notifications. Commands in cmd/lifeboat call it; it calls the lower
// packages (snapshot, verify, uploader, retention, restore) and never the
// other way round.
package agent
