"""The pure core: selectors, views, the selection function, verdicts, the node index,
status comparison, admission decisions, certificate decisions and cluster-dump parsing.

Nothing here talks to the network or imports a web framework, the Kubernetes client or
another layer of ours (checked by the import contracts in ``pyproject.toml``). Every other
layer calls :func:`app.core.nodeipam.select`; there is no second selection path.
"""
