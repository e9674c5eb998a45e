// Package fleet is the fleet's view of many clusters read from their
// stores alone: a catalog of every cluster under one or more store roots
// (Read), and the judgement of each by its own promises (Assess): the
// agent's schedules and stale_after from its status document
// (repository.AgentStatus), else what the spacing of its backups and
// drills shows.
//
// Reading is read-only and grows with what changed: each store is
// listed once per read (a cluster at a time where the store names its
// top-level directories), served from memory to every cluster's
// repository reads (listedStore, which also refuses every write); a
// cluster whose listing is unchanged keeps its row, a changed one is
// read again with its small objects served from a document cache keyed
// by key, size and modification time (docs.go), kept across restarts in
// a cache file (NewCachedReader). A cluster that cannot be read is a
// row with the error, never a missing row; an object that cannot be
// read or is not signed by a trusted key is that cluster's problem.
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
