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
