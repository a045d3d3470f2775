"""The test library: what tests and benchmarks share, importing neither (README.md here).

- :mod:`tests.support.ports`: ``free_port``.
- :mod:`tests.support.waiting`: ``wait_for`` and its ``WaitTimeout``.
- :mod:`tests.support.processes`: ``Server`` (a child process with its log), ``tail``,
  ``die_with_parent``.
- :mod:`tests.support.objects`: Kubernetes objects both build (``event_body``).

It imports nothing of ``tests`` or ``bench`` (an import contract in pyproject.toml).
"""
