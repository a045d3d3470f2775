"""kubectl-dependent tests skip with a reason when kubectl is missing, but fail where it is
required: in CI or with NODE_IPAM_REQUIRE_KUBECTL=1 (issue 13, finding 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import kubectl


@pytest.fixture
def no_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("NODE_IPAM_REQUIRE_KUBECTL", raising=False)


@pytest.mark.usefixtures("no_kubectl")
def test_missing_kubectl_skips_with_a_reason() -> None:
    with pytest.raises(pytest.skip.Exception, match="kubectl is not on PATH"):
        kubectl.kubectl()


@pytest.mark.usefixtures("no_kubectl")
@pytest.mark.parametrize(("name", "value"), [("CI", "true"), ("NODE_IPAM_REQUIRE_KUBECTL", "1")])
def test_missing_kubectl_fails_where_it_is_required(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(pytest.fail.Exception, match="required here"):
        kubectl.kubectl()


def test_ci_run_requires_kubectl() -> None:
    script = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "export CI=true" in script
    assert kubectl.required({"CI": "true"}) and kubectl.required({"CI": "1"})
    assert not kubectl.required({"CI": "false"}) and not kubectl.required({})
