package restore

// RestoreInChild is restoreInChild, for the tests of restore_test.
var RestoreInChild = restoreInChild
