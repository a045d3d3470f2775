"""Long values in user-facing messages (issue 13, finding 3): a 200 KB malformed selector is
cut in the middle, and the reason (what is wrong with it) stays whole, in the admission
denial and warning, in the selection error the reconciler logs, and in selector errors."""

from __future__ import annotations

import pytest

from app.core import admission
from app.core.nodeipam import select
from app.core.options import SelectionSettings
from app.core.selector import SelectorError, parse
from app.core.views import service_view
from tests.core.admission.builders import review, service
from tests.core.builders import NOW, service_obj

HUGE = 200_000
BAD_SELECTORS = {
    "a trailing operator": "tier in (" + ",".join(["web"] * (HUGE // 4)) + ") ==",
    "a key too long": "k" * HUGE,
    "a value too long": "tier=" + "v" * HUGE,
    "a bad token": "(" + "x" * HUGE,
}


@pytest.mark.parametrize("selector", BAD_SELECTORS.values(), ids=BAD_SELECTORS)
def test_selector_errors_are_bounded(selector: str) -> None:
    with pytest.raises(SelectorError) as err:
        parse(selector)
    assert len(str(err.value)) < 600


@pytest.mark.parametrize("selector", BAD_SELECTORS.values(), ids=BAD_SELECTORS)
def test_the_admission_denial_keeps_its_reason(selector: str) -> None:
    decision = admission.validate(
        admission.parse_review(review(service(cls="io.cilium/node", selector=selector))),
        settings=SelectionSettings(),
        snapshot=None,
    )
    assert not decision.allowed
    assert decision.message is not None
    assert len(decision.message) < 1000
    assert decision.message.startswith(
        "metadata.annotations[io.cilium.nodeipam/match-node-labels]: Invalid value: "
    )
    assert "characters)…" in decision.message
    with pytest.raises(SelectorError) as err:
        parse(selector)
    assert decision.message.endswith(f": {err.value}"), "the reason is whole, at the end"


def test_the_unchanged_invalid_warning_keeps_its_end() -> None:
    selector = BAD_SELECTORS["a trailing operator"]
    obj = service(cls="io.cilium/node", selector=selector)
    decision = admission.validate(
        admission.parse_review(review(obj, operation="UPDATE", old=obj)),
        settings=SelectionSettings(),
        snapshot=None,
    )
    assert decision.allowed
    [warning] = decision.warnings
    assert len(warning) <= admission.MAX_WARNING_CHARS
    assert warning.startswith("io.cilium.nodeipam/match-node-labels is invalid (un")
    assert warning.endswith("expected: ',' or 'end of string' (at byte 200010)"), warning


@pytest.mark.parametrize("selector", BAD_SELECTORS.values(), ids=BAD_SELECTORS)
def test_the_selection_error_logged_by_the_reconciler_is_bounded(selector: str) -> None:
    svc = service_view(service_obj("web", selector=selector))
    selection = select(
        service=svc, nodes=[], endpoint_slices=[], settings=SelectionSettings(), now=NOW
    )
    assert selection.error is not None
    assert len(selection.error) < 1000
    with pytest.raises(SelectorError) as err:
        parse(selector)
    assert selection.error.endswith(f": {err.value}")
