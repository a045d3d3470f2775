"""The web layer: app factory, routes (admission, preview, health, metrics), TLS, auth and
certificate sync. It reads the controller's cache through protocols and never imports
:mod:`app.controller` (the two meet in :mod:`app.server`)."""
