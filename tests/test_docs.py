"""The documents an outsider reads first say what is true and need no inside knowledge."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_layout_table_names_every_route_module_as_it_is() -> None:
    # Before: "routes/ (admission, preview, health, metrics)": there is no metrics module.
    row = next(line for line in README.splitlines() if line.startswith("| `app/web/` |"))
    listed = row.split("`routes/` (", 1)[1].split("), `tls.py`", 1)[0]
    named = set(re.findall(r"`(\w+\.py)`", listed))
    modules = {p.name for p in (ROOT / "app/web/routes").glob("*.py")} - {"__init__.py"}
    assert named == modules


def test_bench_readme_needs_no_inside_knowledge() -> None:
    text = (ROOT / "bench/README.md").read_text()
    for phrase in (r"\bissue \d+", r"\bthe brief\b", r"\bits owner\b", r"running in parallel"):
        assert re.search(phrase, text, re.IGNORECASE) is None, phrase


def test_readme_says_how_long_setup_and_tests_take_and_what_the_real_api_tier_needs() -> None:
    top = README.split("## ", 1)[0]
    assert "Setup takes about 3 minutes" in top and "the test run about 24 minutes" in top
    assert "needs Go" in top
    assert "](#tests-against-a-real-api-server)" in top
    assert "\n## Tests against a real API server\n" in README


def test_readme_names_every_settings_flag_of_preview() -> None:
    from app.config import SelectionConfig

    listed = README.split("The settings are flags named like", 1)[1].split(". A dump", 1)[0]
    named = set(re.findall(r"`--([a-z-]+)`", listed))
    # enable_node_ipam is Cilium's on/off switch: preview has no flag for it.
    settings = {f.replace("_", "-") for f in SelectionConfig.model_fields} - {"enable-node-ipam"}
    assert named == settings
