"""``node-ipam-lb serve`` start-up errors and ``node-ipam-lb certs generate``."""

from __future__ import annotations

import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from pydantic import ValidationError
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings
from app.server import StartupError, leader_identity, listen, tls_context
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            [],
            {"NODE_IPAM_DEFAULT_LB_SERVICE_IPAM": "NodeIPAM"},
            "--default-lb-service-ipam (NODE_IPAM_DEFAULT_LB_SERVICE_IPAM): Input should be",
        ),
        (["--default-lb-service-ipam", "kubevip"], {}, "--default-lb-service-ipam"),
        (["--port", "0"], {}, "--port (NODE_IPAM_PORT)"),
        ([], {"NODE_IPAM_WORKERS": "many"}, "--workers (NODE_IPAM_WORKERS)"),
        (["--auth", "basic"], {}, "--auth (NODE_IPAM_AUTH)"),
        (["--tls-cert-file", "/tmp/x.crt"], {}, "must be given together"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], {}, "--kubeconfig /nonexistent/kubeconfig"),
        ([], {"KUBECONFIG": "/nonexistent/kc"}, "KUBECONFIG /nonexistent/kc: cannot load"),
        ([], {}, "no cluster to talk to: give --kubeconfig PATH"),
        (
            [],
            {
                "NODE_IPAM_LEASE_DURATION_SECONDS": "5",
                "NODE_IPAM_RENEW_DEADLINE_SECONDS": "30",
                "NODE_IPAM_RETRY_PERIOD_SECONDS": "60",
            },
            "invalid setting: lease-duration-seconds (5) must be greater than"
            " renew-deadline-seconds (30)",
        ),
        (
            ["--node-health-check-period-seconds", "1", "--node-health-check-timeout-seconds", "2"],
            {},
            "node-health-check-timeout-seconds (2) must not be greater than"
            " node-health-check-period-seconds (1)",
        ),
        (
            ["--renew-deadline-seconds", "2", "--retry-period-seconds", "2"],
            {},
            "renew-deadline-seconds (2) must be greater than 1.2 x retry-period-seconds (2)",
        ),
        (
            ["--cert-check-interval-seconds", "86400"],
            {"NODE_IPAM_CERT_RENEW_BEFORE_SECONDS": "3600"},
            "cert-check-interval-seconds (86400) must be less than cert-renew-before-seconds",
        ),
    ],
    ids=[
        "env typo in default-lb-service-ipam",
        "flag with an unknown default-lb-service-ipam",
        "port out of range",
        "env worker count not a number",
        "unknown auth mode",
        "certificate without key",
        "missing kubeconfig",
        "serve reads $KUBECONFIG like preview",
        "neither kubeconfig nor in-cluster config",
        "lease shorter than the renew deadline",
        "health-check timeout longer than its period",
        "renew deadline flags within one jittered retry",
        "certificate checked less often than its renew window",
    ],
)
def test_serve_start_up_error_is_one_line_and_exit_2(
    args: list[str], env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")  # no ~/.kube/config either
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(cli, ["serve", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("timings", "message"),
    [
        (
            {"lease_duration_seconds": 5, "renew_deadline_seconds": 30, "retry_period_seconds": 60},
            "lease-duration-seconds (5) must be greater than renew-deadline-seconds (30)",
        ),
        (
            {"lease_duration_seconds": 10, "renew_deadline_seconds": 10},
            "lease-duration-seconds (10) must be greater than renew-deadline-seconds (10)",
        ),
        (
            {"renew_deadline_seconds": 12, "retry_period_seconds": 10},
            "renew-deadline-seconds (12) must be greater than 1.2 x retry-period-seconds (10)",
        ),
        (
            {"cert_check_interval_seconds": 3600, "cert_renew_before_seconds": 3600},
            "cert-check-interval-seconds (3600) must be less than cert-renew-before-seconds",
        ),
    ],
    ids=[
        "two writers: lease 5 s, renew 30 s, retry 60 s",
        "lease equal to the renew deadline",
        "renew deadline within one jittered retry",
        "certificate checked no more often than its renew window",
    ],
)
def test_settings_refuse_inconsistent_timings(timings: dict[str, float], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        Settings(**timings)


NON_FINITE = ["inf", "-inf", "nan", "1e12"]
SECONDS_FLAGS = [
    "--request-timeout-seconds",
    "--request-head-timeout-seconds",
    "--idle-timeout-seconds",
    "--lease-duration-seconds",
    "--renew-deadline-seconds",
    "--retry-period-seconds",
    "--not-ready-grace-seconds",
    "--review-deadline-seconds",
    "--cluster-check-seconds",
    "--ca-validity-seconds",
    "--cert-validity-seconds",
    "--cert-renew-before-seconds",
    "--cert-check-interval-seconds",
]


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("flag", SECONDS_FLAGS)
def test_every_seconds_setting_is_finite_and_bounded(
    flag: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: --request-timeout-seconds inf started, then every API request failed
    # ("timestamp out of range for platform time_t") while /healthz said ok.
    for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(key, raising=False)
    result = CliRunner().invoke(cli, ["serve", flag, value])
    assert result.exit_code == 2, result.output
    variable = "NODE_IPAM_" + flag.removeprefix("--").replace("-", "_").upper()
    assert f"invalid setting: {flag} ({variable}): " in result.output
    assert "Traceback" not in result.output


def test_settings_accept_client_go_default_and_tight_timings() -> None:
    assert Settings().renew_deadline_seconds == 10
    tight = Settings(lease_duration_seconds=2, renew_deadline_seconds=1.5, retry_period_seconds=1.2)
    assert tight.retry_period_seconds == 1.2


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.server import settings_from

    monkeypatch.setenv("NODE_IPAM_DEFAULT_LB_SERVICE_IPAM", "none")
    monkeypatch.setenv("NODE_IPAM_WORKERS", "2")
    settings = settings_from({"default_lb_service_ipam": "nodeipam", "workers": None})
    assert settings.default_lb_service_ipam == "nodeipam"
    assert settings.workers == 2


def test_leader_identity_is_pod_name_plus_random_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "node-ipam-lb-7d9f-abcde")
    first, second = leader_identity(), leader_identity()
    assert first.startswith("node-ipam-lb-7d9f-abcde_") and first != second


def test_certs_generate_writes_the_three_files(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    result = CliRunner().invoke(
        cli,
        ["certs", "generate", "--dns-name", "localhost", "--dns-name", "::1", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "CA SHA-256 fingerprint: " in result.output
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)


def test_certs_generate_needs_a_name(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["certs", "generate", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--dns-name" in result.output


def test_console_script_prints_no_traceback_on_bad_settings() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", "serve", "--ip-mode", "Tunnel"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "node-ipam-lb serve: invalid setting: --ip-mode (NODE_IPAM_IP_MODE): Input should be"
        " 'VIP' or 'Proxy': 'Tunnel'"
    ]


@pytest.mark.parametrize(
    ("command", "options"),
    [
        (
            ["preview"],
            [
                "--filename",
                "--default-lb-service-ipam",
                "--load-balancer-class",
                "--match-node-labels-annotation",
                "--per-node-address-fallback",
                "--no-exclude-not-ready-nodes",
                "--not-ready-grace-seconds",
                "--ip-mode",
                "--reserved-port-exceptions",
            ],
        ),
        (
            ["serve"],
            [
                "--tls-private-key-file",
                "--match-node-labels-annotation",
                "--renew-deadline-seconds",
                "--no-enable-node-ipam",
                "--request-timeout-seconds",
                "--no-per-node-address-fallback",
                "--reserved-port-exceptions",
                "--webhook-configuration-name",
                "--cert-check-interval-seconds",
            ],
        ),
        (["certs", "generate"], ["--dns-name", "--out"]),
    ],
    ids=["preview", "serve", "certs generate"],
)
def test_help_at_80_columns_shows_every_option_name_in_full(
    command: list[str], options: list[str]
) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "…" not in result.output
    for option in options:
        assert f"{option} " in result.output or f"{option}\n" in result.output, option


def test_a_bad_bind_address_is_named_as_such_not_as_a_taken_port() -> None:
    # Before: "cannot listen: Name or service not known (is another process using port N?)".
    with pytest.raises(StartupError) as err:
        listen(Settings(bind_address="999.1.1.1", port=free_port()))
    assert "--bind-address 999.1.1.1" in str(err.value)
    assert "not a valid IP address" in str(err.value)
    assert "another process" not in str(err.value)


def test_a_taken_port_asks_about_another_process() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match=f"is another process using port {port}"):
            listen(Settings(bind_address="127.0.0.1", port=port))


@pytest.mark.parametrize(
    ("bad", "message"),
    [("cert", "--tls-cert-file {}: not a PEM certificate"),
     ("key", "--tls-private-key-file {}: not a PEM private key")],
)  # fmt: skip
def test_a_file_that_is_not_pem_is_named(tmp_path: Path, bad: str, message: str) -> None:
    # Before: "cannot load the key pair: [SSL] PEM lib (_ssl.c:3905)", naming neither file.
    run = CliRunner().invoke(
        cli, ["certs", "generate", "--dns-name", "x.example", "--out", str(tmp_path)]
    )
    assert run.exit_code == 0, run.output
    files = {"cert": tmp_path / "tls.crt", "key": tmp_path / "tls.key"}
    files[bad].write_text("this is not PEM\n")
    settings = Settings(tls_cert_file=files["cert"], tls_private_key_file=files["key"])
    with pytest.raises(StartupError) as err:
        tls_context(settings, workdir=tmp_path)
    assert message.format(files[bad]) in str(err.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--load-balancer-class", "not a class!!"], "load-balancer-class: Invalid value"),
        (["--load-balancer-class", "a/b/c"], "load-balancer-class: Invalid value"),
        (["--match-node-labels-annotation", ""], "match-node-labels-annotation: Invalid value"),
        (["--match-node-labels-annotation", "x/"], "name part must be non-empty"),
    ],
)
def test_class_and_annotation_must_be_qualified_names(args: list[str], message: str) -> None:
    # The API server accepts only a qualified name in spec.loadBalancerClass and as an
    # annotation key; any other value could never match a Service.
    for command in ("serve", "preview"):
        result = CliRunner().invoke(
            cli, [command, *args, "-f", "-"][: 3 if command == "serve" else 5]
        )
        assert result.exit_code == 2, result.output
        assert message in result.output


@pytest.mark.parametrize("command", ["serve", "preview"])
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--reserved-node-ports", "22,ssh"], {}, "reserved-node-ports: Invalid value: 'ssh'"),
        (["--reserved-node-ports", "70000"], {}, "reserved-node-ports: Invalid value: '70000'"),
        (
            ["--reserved-node-ports", "10259-10250"],
            {},
            "reserved-node-ports: Invalid value: '10259-10250': the range ends before it starts",
        ),
        (
            ["--reserved-node-ports", "53/ICMP"],
            {},
            "reserved-node-ports: Invalid value: '53/ICMP': protocol must be TCP, UDP or SCTP",
        ),
        ([], {"NODE_IPAM_RESERVED_NODE_PORTS": "x"}, "reserved-node-ports: Invalid value: 'x'"),
        (
            ["--reserved-port-exceptions", "bastion:22"],
            {},
            "reserved-port-exceptions: Invalid value: 'bastion:22'",
        ),
        (
            ["--reserved-port-exceptions", "kube-system/bastion:ssh"],
            {},
            "reserved-port-exceptions: Invalid value: 'ssh'",
        ),
        (
            [],
            {"NODE_IPAM_RESERVED_PORT_EXCEPTIONS": "kube-system/bastion"},
            "reserved-port-exceptions: Invalid value: 'kube-system/bastion'",
        ),
        (
            ["--allowed-namespaces", "team-a,Team_B"],
            {},
            "allowed-namespaces: Invalid value: 'Team_B'",
        ),
        ([], {"NODE_IPAM_ALLOWED_NAMESPACES": "a b"}, "allowed-namespaces: Invalid value: 'a b'"),
    ],
    ids=[
        "port not a number",
        "port out of range",
        "range ends before it starts",
        "unknown protocol",
        "env reserved-node-ports",
        "exception without namespace",
        "exception port not a number",
        "env exception without ports",
        "namespace not a DNS-1123 label",
        "env namespace with a space",
    ],
)
def test_a_bad_port_ownership_setting_exits_2_naming_it(
    command: str,
    args: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/design.md §4.9, §10: the three port-ownership settings are checked at start-up,
    # by serve and by preview alike, before any cluster is read.
    for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    extra = ["-f", "-"] if command == "preview" else []
    result = CliRunner().invoke(cli, [command, *args, *extra], input="")
    assert result.exit_code == 2, result.output
    assert "invalid setting: " + message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "settings",
    [
        {"reserved_node_ports": ""},
        {"reserved_node_ports": " 22 , 2379-2380/tcp,53/UDP,"},
        {"reserved_port_exceptions": "kube-system/bastion:22;infra/dns:53/UDP+53/TCP;"},
        {"allowed_namespaces": "default, team-a"},
    ],
)
def test_port_ownership_settings_accept_what_the_help_describes(settings: dict[str, str]) -> None:
    Settings(**settings).selection()


@pytest.mark.parametrize(
    "settings",
    [{"load_balancer_class": "example.com/lb"}, {"match_node_labels_annotation": "Example.com/M"}],
)
def test_qualified_class_and_annotation_are_accepted(settings: dict[str, str]) -> None:
    Settings(**settings).selection()


@pytest.mark.parametrize(("name", "reason"), [("bad name!!", "RFC 1123 subdomain"), ("", "empty")])
def test_certs_generate_refuses_a_name_a_certificate_cannot_hold(
    tmp_path: Path, name: str, reason: str
) -> None:
    result = CliRunner().invoke(
        cli, ["certs", "generate", "--dns-name", name, "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert f"DNS name {name!r}: Invalid value: not an IP address" in result.output
    assert reason in result.output
    assert not (tmp_path / "o").exists()
