"""A real cluster on this machine: kubelet, containerd and kube-proxy in network
namespaces (see README.md here). ``images`` needs the standard library only."""
