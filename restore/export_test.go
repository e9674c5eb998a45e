package restore

// RestoreChildArgs is restoreChildArgs, for the tests of restore_test.
var RestoreChildArgs = restoreChildArgs

// RemoveThroughStore is removeThroughStore, RemoveOwnKeys through etcd's
// store: the reference of TestRemoveOwnKeysAsTheStore.
var RemoveThroughStore = removeThroughStore
