"""deploy/'s container recipe and Kubernetes manifest, checked statically (no container runtime runs
here): the user, the wheel build, the probes and the grace period against the hub's own defaults."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from omega_mcp.config import HubConfig, load_config
from omega_mcp.server.http import GRACE_SECONDS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SHUTDOWN_BOUND = GRACE_SECONDS + 2 * 3.0  # requests in flight, then closing sessions and connections (http.py)


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        pending += raw.rstrip("\\").strip() + " "
        if not raw.endswith("\\"):
            lines.append(pending.strip())
            pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _manifests() -> dict[str, dict[str, Any]]:
    return {
        doc["kind"] + "/" + doc["metadata"]["name"]: doc
        for doc in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text())
    }


def test_the_image_builds_the_tested_wheel_and_runs_the_hub_as_a_non_root_user() -> None:
    steps = _instructions(DEPLOY / "Dockerfile")
    runs = [args for kind, args in steps if kind == "RUN"]
    # The wheel the tests install (tests/test_install.py): `pip wheel --no-deps` of this checkout.
    assert any("pip wheel --no-deps" in run and run.rstrip().endswith(" .") for run in runs)
    assert any("pip install" in run and "omega_mcp-*.whl" in run for run in runs)
    users = [args for kind, args in steps if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert any("useradd" in run and users[-1].split(":")[0] in run for run in runs)
    (cmd,) = [json.loads(args) for kind, args in steps if kind == "CMD"]
    assert cmd[:3] == ["omega-mcp", "serve", "--http"]
    config = cmd[cmd.index("--config") + 1]
    copies = [shlex.split(args) for kind, args in steps if kind == "COPY" and not args.startswith("--from")]
    assert ["deploy/omega.toml", config] in copies
    assert (ROOT / "deploy" / "omega.toml").exists()


def test_the_configs_shipped_load_and_drain_for_the_default_time(tmp_path: Path) -> None:
    manifests = _manifests()
    shipped = tmp_path / "configmap.toml"
    shipped.write_text(manifests["ConfigMap/omega-mcp"]["data"]["omega.toml"])
    default = HubConfig().drain_seconds
    for path in (DEPLOY / "omega.toml", shipped):
        config = load_config(path, environ={"OMEGA_HOME": str(tmp_path / "home")})
        assert config.hub.drain_seconds == default


def test_the_manifest_probes_and_grace_period_match_the_hub() -> None:
    manifests = _manifests()
    replicas = manifests["StatefulSet/omega-mcp"]["spec"]
    pod = replicas["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    port = int(container["args"][container["args"].index("--port") + 1])
    assert container["ports"][0]["containerPort"] == port
    # SIGTERM drains for drain_seconds, then the bounded shutdown: all before the kubelet's SIGKILL.
    drain = HubConfig().drain_seconds
    assert pod["terminationGracePeriodSeconds"] >= drain + SHUTDOWN_BOUND
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": "omega-mcp.json"}
    balancer = manifests["Deployment/omega-haproxy"]["spec"]["template"]["spec"]["containers"][0]
    names = {e["name"] for e in balancer["env"]}
    assert {"OMEGA_LB_BIND", "OMEGA_REPLICA_1", "OMEGA_REPLICA_2", "OMEGA_REPLICA_3"} <= names
    assert replicas["replicas"] == 3


def test_the_seccomp_profile_lets_the_sandbox_make_its_namespaces() -> None:
    profile = json.loads((DEPLOY / "seccomp.json").read_text())
    denied = {name for rule in profile["syscalls"] if rule["action"] != "SCMP_ACT_ALLOW" for name in rule["names"]}
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    assert not denied & {
        "unshare",
        "mount",
        "umount2",
        "pivot_root",
        "setns",
        "clone",
        "clone3",
        "landlock_create_ruleset",
        "landlock_add_rule",
        "landlock_restrict_self",
        "prctl",
    }
    assert {"kexec_load", "init_module", "bpf", "ptrace"} <= denied
