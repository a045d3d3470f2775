"""Run the fake API server (``tests/fakeapi``) seeded from a JSON file, in its own process.

``python -m bench.fakeapi_proc --seed-json FILE [--port PORT] [--tls]``: loads ``{"items": [...]}``
with ``json.load`` (the fake API's own ``--seed`` reads YAML, which takes minutes for the
16,000 objects of the cold-start cluster), then serves on 127.0.0.1 and prints the URL.
Running it apart from the benchmark driver and from ``serve`` lets the benchmarks read its
CPU time from ``/proc`` separately. With ``--tls`` it serves HTTPS (a throw-away CA; the
kubeconfig is written next to the seed file as ``kubeconfig``, naming that CA).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.fakeapi.server import FakeApiServer


def main(argv: list[str] | None = None) -> int:
    """Seed, serve until SIGTERM/SIGINT, exit 0."""
    parser = argparse.ArgumentParser(prog="python -m bench.fakeapi_proc")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed-json", required=True, metavar="FILE")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS (kubeconfig beside FILE)")
    args = parser.parse_args(argv)
    with open(args.seed_json, encoding="utf-8") as handle:
        objects = json.load(handle)["items"]
    server = FakeApiServer(port=args.port, tls=args.tls)
    server.seed(objects)
    del objects
    server.start()
    if args.tls:  # it names the CA in the server's own directory, kept until it stops
        kubeconfig = Path(args.seed_json).with_name("kubeconfig")
        kubeconfig.write_text(server.kubeconfig_path.read_text())
    server.serve_until_signal()
    return 0


if __name__ == "__main__":
    sys.exit(main())
