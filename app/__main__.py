"""``python -m app ...`` is ``node-ipam-lb ...`` (``node-ipam-lb demo`` starts its children so)."""

from app.cli import main

main()
