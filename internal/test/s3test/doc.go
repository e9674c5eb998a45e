// Package s3test runs a real S3-compatible server (versitygw) for tests, and a
// fault-injecting HTTP proxy to put in front of it.
//
// Start launches a versitygw v1.8.0 process with the posix backend on a free
// loopback port, with fresh data and versioning directories under t.TempDir
// (versioning is always on so that Object Lock works), waits for its health
// endpoint and kills it at test cleanup. Server.Stop kills it earlier, to test
// "server down"; Server.Restart kills it and starts it again on the same port
// and data, to test "server down, then back". The binary is looked up in
// $VERSITYGW, then <module root>/.bin/versitygw, then PATH; when none is found
// the test fails under CI=true and is skipped otherwise, with the install
// command in the message.
//
// NewProxy starts a reverse proxy whose faults are programmed per request:
// error statuses with an S3 XML error body, a connection reset in the middle of
// the request body, a stall, or a response body cut short. Op names the S3
// operation of a request so that a fault can target, say, the second
// UploadPart.
//
// The package is meant to be imported only by tests. Nothing in it fakes S3:
// every request is answered by the real server.
package s3test
