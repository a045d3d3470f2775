"""The codes of a Node's verdict (``NodeVerdict.code``, docs/design.md §4), in step order.

The one place they are spelled: every module compares with these constants, never with a
literal. The last two come from port ownership (§4.9) and are also ``Selection`` codes
and Event reasons. A leaf: imports nothing of ours (:mod:`app.core.views` reads the
predicate codes, :mod:`app.core.verdicts` the rest).
"""

SELECTED = "Selected"
SELECTOR_MISMATCH = "SelectorMismatch"
DELETING = "Deleting"
EXCLUDED_BY_LABEL = "ExcludedByLabel"
AUTOSCALER_TAINTED = "AutoscalerTaint"
NO_READY_ENDPOINT = "NoReadyEndpoint"
NOT_READY = "NotReady"
NO_ADDRESS_OF_FAMILY = "NoAddressOfFamily"
EXTERNAL_IP_PREFERRED = "ExternalIPPreferred"
UNHEALTHY = "Unhealthy"
PORT_IN_USE = "PortInUse"
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
NOT_IN_POOL = "NotInPool"
"""A Node the selector matches outside the nodes of the Service's NodeAddressPool (§4.13)."""
NO_POOL = "NoPool"
"""No NodeAddressPool applies to the Service (§4.13): a Selection code and Event reason."""
PORT_NOT_IN_POOL = "PortNotInPool"
"""A port of the Service is outside every NodeAddressPool that applies to it (§4.13)."""
POOL_CODES = frozenset({NO_POOL, PORT_NOT_IN_POOL, NOT_IN_POOL})
"""The outcome codes of NodeAddressPools (§4.13): each is the reason of the Warning a
refused Service gets."""
