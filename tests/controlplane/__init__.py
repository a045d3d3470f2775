"""A real kube-apiserver + etcd for tests, built from Go modules (see README.md here).

Keep this module free of imports: ``python3 -m tests.controlplane build`` runs with the
standard library only, before the project's virtualenv exists.
"""
