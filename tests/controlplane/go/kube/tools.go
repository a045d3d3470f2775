//go:build tools

// Package tools pins the commands this module builds so `go mod tidy` keeps their
// dependencies. Nothing here is compiled into the product. kube-apiserver serves the
// real-API tier (tests/controlplane); the other four run the real cluster of
// tests/cluster (kubelet, kube-proxy in each node's network namespace).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
