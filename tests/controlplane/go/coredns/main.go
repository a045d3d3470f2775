// Command coredns is CoreDNS v1.15.0 with only the plugins tests/cluster's Corefile uses
// (cluster.go, corefile_text): CoreDNS's documented way of choosing plugins without its
// plugin.cfg and code generation is a main that sets dnsserver.Directives and imports
// the plugins' packages. Directives keeps CoreDNS's own order (core/dnsserver/
// zdirectives.go): each plugin sees a query after those before it. No forward, no loop:
// there is no upstream here; names outside the Corefile's zones are refused.
//
// Built by tests/controlplane/build.py (build_coredns) from this module of its own (go.mod
// says why), into a cache directory of its own.
// Test infrastructure only.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/k8s_external"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{
		"ready",
		"health",
		"errors",
		"log",
		"cache",
		"k8s_external",
		"kubernetes",
	}
}

func main() {
	coremain.Run()
}
