// Package fleet is the fleet's view of many clusters read from their
// stores alone: a catalog of every cluster under one or more store roots
// (Read), and the judgement of each by its own promises (Assess): the
// agent's schedules and stale_after from its status document
// (repository.AgentStatus), else what the spacing of its backups and
// drills shows.
//
// Reading is read-only and grows with what changed. A full read (Read)
// lists every store a cluster at a time (where the store names its
// top-level directories), serving each cluster's repository reads from
// that listing (listedStore, which also refuses every write); a
// cluster whose listing is unchanged keeps its row, a changed one is
// read again with its small objects served from a document cache keyed
// by key, size and modification time (docs.go), kept on disk a file per
// cluster with a cache directory (NewCachedReader). The hub's refreshes
// between full reads (Reader.Refresh, refresh.go) list each cluster's
// agents/ area as its change signal and read again only the clusters
// whose agents did something, that have no agent, or that are new. A
// cluster that cannot be read is a row with the error, never a missing
// row; an object that cannot be read or is not signed by a trusted key
// is that cluster's problem.
//
// Assess is a pure function of a Cluster, the Policy and now, so that
// every decision (stale by its own schedule, drill failed or overdue,
// capture behind, window broken, agent silent, copy behind, certificate
// expiring, unreadable or untrusted objects, two lineages) is
// table-tested. The Hub serves the report (metrics, JSON, a page) and,
// with Drills, rehearses each cluster's restore itself (restore/drill)
// and stores the report as the cluster's own: the only write of the
// package, through drillView, which lets nothing else through.
package fleet
