"""node-ipam-lb as users run it, on one real cluster shared by this package's modules
(``conftest.py`` here): installed by Helm, its webhooks called through their Service,
traffic sent from a client namespace to every address it publishes, then the failures,
upgrades, node changes, port ownership and the uninstalls.

The modules run in the order of their numbers, on one cluster: each builds on the state
the previous left (the last ones uninstall the release). Measured figures are printed
(``-s`` shows them) and asserted only where the contract gives a bound.
"""
