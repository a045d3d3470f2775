"""``python -m tests.fakeapi --port PORT [--seed FILE ...]``: serve until interrupted.

Prints one line with the server URL once it accepts requests.
"""

from __future__ import annotations

import argparse
import sys

from tests.fakeapi.server import FakeApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakeapi", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any)")
    parser.add_argument(
        "--seed",
        action="append",
        default=[],
        metavar="FILE",
        help="kubectl dump to load (v1 List or multi-document YAML); repeatable",
    )
    args = parser.parse_args(argv)
    server = FakeApiServer(port=args.port)
    try:
        server.seed(files=args.seed)
    except (OSError, ValueError) as err:
        print(f"fakeapi: {err}", file=sys.stderr)
        return 2
    server.serve_until_signal()
    return 0


if __name__ == "__main__":
    sys.exit(main())
