//go:build tools

// Package tidb pins tidb-server's version: scripts/tidb.sh builds it with
// `go build github.com/pingcap/tidb/cmd/tidb-server` in this folder.
package tidb

import _ "github.com/pingcap/tidb/cmd/tidb-server"
