"""The reconciler: informers, cache, triggers, work queue, reconcile, leader election, events.

Runs only in the leader-elected replica's background threads; it never imports the web
layer (the two meet in :mod:`app.server`, the one place that wires a process).
"""
