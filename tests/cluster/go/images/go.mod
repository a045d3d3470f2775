// Test infrastructure only: the two tiny images tests/cluster imports into every node's
// containerd (no registry is reachable): the pod sandbox ("pause") and a backend HTTP
// server. Standard library only, built static (CGO_ENABLED=0) by tests/cluster/images.py.
module nodeipamlb.test/cluster/images

go 1.25.0
