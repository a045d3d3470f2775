//go:build tools

// Package tools pins the two Prometheus commands this module builds (the server and
// promtool) so `go mod tidy` keeps their dependencies. Nothing here is compiled into the
// product.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
