//go:build tools

// Package tools pins the etcd command (the root package of go.etcd.io/etcd/server/v3 is
// etcd's main) so `go mod tidy` keeps its dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
