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
