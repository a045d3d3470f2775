"""Request bodies and answers through ``orjson`` (app/kube/client.py)."""

from __future__ import annotations

import json

import pytest

from app.kube.client import ApiError, _decode_event, _encode, _raise_for


def test_bodies_are_compact_json_and_keep_non_ascii_text() -> None:
    body = {"note": "Zürich €", "series": {"count": 2}, "list": [1, None, True]}
    data = _encode(body)
    assert json.loads(data) == body
    assert b" " not in data.replace("Zürich €".encode(), b"")


def test_a_lone_surrogate_is_escaped_not_an_error() -> None:
    data = _encode({"note": "x\ud800y"})
    assert data == b'{"note":"x\\ud800y"}'


def test_watch_lines_and_error_bodies_are_decoded() -> None:
    line = b'{"type":"ADDED","object":{"metadata":{"name":"n\xc3\xbc"}}}'
    assert _decode_event(line)["object"]["metadata"]["name"] == "nü"
    with pytest.raises(ApiError, match="watch event is not JSON"):
        _decode_event(b'{"type":')
    with pytest.raises(ApiError) as err:
        _raise_for(409, b'{"kind":"Status","message":"the object has been modified"}')
    assert (err.value.status, err.value.reason) == (409, "the object has been modified")
    with pytest.raises(ApiError) as err:
        _raise_for(502, b"<html>bad gateway</html>")
    assert err.value.reason == "<html>bad gateway</html>"


@pytest.mark.parametrize(
    ("status", "header", "wanted"),
    [
        (429, "1", 1.0),
        (429, " 60 ", 60.0),
        (503, "5", 5.0),
        (429, None, None),
        (409, "3", None),  # client-go waits only on 429 and 5xx
        (429, "Wed, 21 Oct 2026 07:28:00 GMT", None),  # an HTTP-date: client-go ignores it
        (429, "-1", None),
        (429, "1.5", None),
    ],
)
def test_retry_after_is_read_as_client_go_reads_it(
    status: int, header: str | None, wanted: float | None
) -> None:
    """API Priority and Fairness' 429 is plain text with ``Retry-After`` (apiserver
    filters/priority-and-fairness.go ``tooManyRequests``)."""
    with pytest.raises(ApiError) as err:
        _raise_for(status, b"Too many requests, please try again later.\n", header)
    assert err.value.retry_after == wanted
    assert err.value.status == status
