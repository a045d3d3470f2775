"""The one client layer: every call to the Kubernetes API (:mod:`app.kube.client`).

Only this package imports the ``kubernetes`` package (an import contract in
``pyproject.toml`` checks it).
"""
