"""A real cluster on this machine: kubelet, containerd and kube-proxy in network
namespaces (see README.md here). ``images`` needs the standard library only, as does
this package's own namespace (``python -m tests.cluster build`` runs before any venv)."""

PROXY_MODES = ("iptables", "nftables")
"""kube-proxy modes a cluster runs (``--proxy-mode``, ``Cluster(proxy_mode=)``); ``ipvs``
needs IPVS, which this machine's kernel lacks (docs/design.md §4.10)."""
