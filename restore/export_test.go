package restore

// RestoreChildArgs is restoreChildArgs, for the tests of restore_test.
var RestoreChildArgs = restoreChildArgs
