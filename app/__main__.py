"""``python -m app ...`` is ``node-ipam-lb ...`` (how tooling starts it with this interpreter)."""

from app.cli import main

main()
