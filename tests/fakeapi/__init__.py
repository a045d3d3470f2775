"""A faithful fake Kubernetes API server for tests (plain HTTP on 127.0.0.1).

Start it from Python (``FakeApiServer().start()``, or the ``fake_api`` pytest fixture) or
standalone: ``python -m tests.fakeapi --port PORT [--seed FILE ...]``. See
``tests/fakeapi/README.md`` for what is implemented and what answers 404/405.
"""

from tests.fakeapi.server import FakeApiServer

__all__ = ["FakeApiServer"]
