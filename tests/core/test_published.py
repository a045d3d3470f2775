"""The settings annotation of the record Lease (app/core/published.py): compact, bounded,
and refused when someone else wrote something else there."""

from __future__ import annotations

import json

import pytest

from app.config import Settings, published
from app.core.published import MAX_SETTINGS_BYTES, decode_settings, encode_settings


def test_the_default_settings_round_trip_under_their_flag_names() -> None:
    values = published(Settings())
    text = encode_settings(values)
    assert decode_settings(text) == values
    assert values["allowed-namespaces"] == "" and values["node-health-check"] is False
    assert len(text.encode()) < 1024  # ~0.5 KiB in practice


def test_a_value_too_long_to_publish_is_left_out_and_the_rest_kept() -> None:
    """5,000 namespaces of 20 characters: ~105 KB; the annotation stays within its bound
    (with the 128 KiB health record, under the API server's 256 KiB of annotations)."""
    many = ",".join(f"team-{i:015d}" for i in range(5000))
    values = published(Settings(allowed_namespaces=many, ip_mode="Proxy"))
    text = encode_settings(values)
    assert len(text.encode()) <= MAX_SETTINGS_BYTES
    found = decode_settings(text)
    assert "allowed-namespaces" not in found
    assert found == {k: v for k, v in values.items() if k != "allowed-namespaces"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "node-ipam-lb.io/effective-settings: Invalid value: not JSON"),
        ('["ip-mode"]', "Invalid value: must be a JSON object"),
        ('{"ip-mode": ["VIP"]}', "Invalid value: 'ip-mode': must be a string, boolean or number"),
        (json.dumps({"x": "y" * MAX_SETTINGS_BYTES}), "Too long: must have at most 32768 bytes"),
    ],
)
def test_what_someone_else_wrote_there_is_refused_naming_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=r"node-ipam-lb\.io/effective-settings") as raised:
        decode_settings(text)
    assert says in str(raised.value)
