//go:build tools

// This file pins the etcd server that electbench's etcd contenders run:
// scripts/etcd.sh builds it with `go build go.etcd.io/etcd/server/v3` in
// this folder, at the version this module requires.
package main

import _ "go.etcd.io/etcd/server/v3"
