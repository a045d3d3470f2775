"""Logs and Prometheus metrics, shared by the controller and the web layer."""
