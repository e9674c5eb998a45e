// Package fleet is the fleet's view of many clusters read from their
// stores alone: a catalog of every cluster under one or more store roots
// (Read), and the judgement of each by its own promises (Assess): the
// agent's schedules and stale_after from its status document
// (repository.AgentStatus), else what the spacing of its backups and
// drills shows.
//
// Reading is read-only and cheap: one listing of each store, served
// from memory to every cluster's repository reads (listedStore, which
// also refuses every write), then one GET per manifest, newest drill
// report, newest agent status document and newest kit manifest. A
// cluster that cannot be read is a row with the error, never a missing
// row; an object that cannot be read or is not signed by a trusted key
// is that cluster's problem.
//
// Assess is a pure function of a Cluster, the Policy and now, so that
// every decision (stale by its own schedule, drill failed or overdue,
// capture behind, window broken, agent silent, copy behind, certificate
// expiring, unreadable or untrusted objects, two lineages) is
// table-tested. The package does not write to any store, run drills or
// serve anything (cmd/lifeboat's fleet command prints a Report).
package fleet
