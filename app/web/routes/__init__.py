"""Thin FastAPI routers: translate HTTP to the pure core and back (no selection logic here)."""
