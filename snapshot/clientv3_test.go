package snapshot_test

import clientv3 "go.etcd.io/etcd/client/v3"

func clientv3New(cc clientv3.Config) (*clientv3.Client, error) { return clientv3.New(cc) }
