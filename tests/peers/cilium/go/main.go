// Command cilium-nodeipam runs Cilium's own Node IPAM LoadBalancer controller
// (operator/pkg/nodeipam.Cell of github.com/cilium/cilium, the version go.mod pins) on its
// own, composed with the cells cilium-operator gives it: the Kubernetes client
// (pkg/k8s/client.Cell), the controller-runtime manager (operator/pkg/controller-runtime.Cell)
// and LB-IPAM's shared configuration (pkg/lbipamconfig.Cell). Test infrastructure only
// (tests/peers/cilium): the differential tests compare its writes with node-ipam-lb's.
//
// Flags are the operator's: --k8s-kubeconfig-path, --enable-node-ipam,
// --default-lb-service-ipam, --k8s-client-qps, --k8s-client-burst (this hive's client
// defaults are 10 and 20; cilium-operator's are 100 and 200: the caller passes those).
// --version prints the Cilium module version compiled in. SIGINT/SIGTERM stop it.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/pflag"

	controllerruntime "github.com/cilium/cilium/operator/pkg/controller-runtime"
	"github.com/cilium/cilium/operator/pkg/nodeipam"
	"github.com/cilium/cilium/pkg/hive"
	k8sClient "github.com/cilium/cilium/pkg/k8s/client"
	"github.com/cilium/cilium/pkg/lbipamconfig"
	"github.com/cilium/cilium/pkg/logging"
)

const ciliumModule = "github.com/cilium/cilium"

func ciliumVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == ciliumModule {
				return dep.Version
			}
		}
	}
	return "(unknown)"
}

func main() {
	h := hive.New(
		k8sClient.Cell,
		controllerruntime.Cell,
		lbipamconfig.Cell,
		nodeipam.Cell,
	)
	flags := pflag.NewFlagSet(os.Args[0], pflag.ContinueOnError)
	version := flags.Bool("version", false, "print the Cilium version and exit")
	h.RegisterFlags(flags)
	if err := flags.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *version {
		fmt.Printf("cilium %s operator/pkg/nodeipam\n", ciliumVersion())
		return
	}
	// Run populates and starts every cell, blocks until SIGINT/SIGTERM (or a fatal
	// error), then stops them in reverse order.
	if err := h.Run(logging.DefaultSlogLogger); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
