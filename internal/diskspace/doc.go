// Package diskspace checks, before a long job writes anything, that the
// file systems it will write to have the room: a clear error naming the
// directory, what is needed and what is free, instead of a full disk
// minutes later (issue 31: the spool of an 8 GB snapshot, the members of
// a restore).
package diskspace
