"""Cilium's own Node IPAM LB controller as a peer: its Go module (``go/``), its build
(``build.py``, standard library only: ``python3 -m tests.controlplane build`` builds it)
and the handle that runs it against a control plane (``peer.py``). See README.md."""
