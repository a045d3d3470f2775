"""``node-ipam-lb preview``: runs :func:`app.core.nodeipam.select` on a cluster dump and
renders the result (a table like ``kubectl get svc``, or streamed JSON/YAML)."""
