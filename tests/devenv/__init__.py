"""Development tooling: the walk-through from clone to ``curl`` (``python -m tests.devenv``,
its module docstring says what it does) and the manifests it applies."""
