"""Verify inkling.fleet.service on the molecule host (pytest-testinfra).

State after converge + idempotence + check + side_effect: the unit runs the stand-in
from the converge inputs.
"""
import json
import os
import time

import pytest

UNIT = "inkling-vllm.service"
QUADLET = "/etc/containers/systemd/inkling-vllm.container"
API_KEY = "lab-api-key-not-secret"
REV = "0123456789abcdef0123456789abcdef01234567"


def _wait_http(host, path, code=200, timeout=60):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000" + path)
        if last.stdout.strip() == str(code):
            return
        time.sleep(1)
    pytest.fail("%s never returned %s (last %r)" % (path, code, last.stdout if last else None))


@pytest.fixture(scope="module")
def ready(host):
    _wait_http(host, "/health")
    return True


@pytest.fixture(scope="module")
def inspect(host, ready):
    out = host.check_output("podman inspect inkling-vllm")
    return json.loads(out)[0]


def test_unit_active_and_not_restarting(host, ready):
    show = host.check_output("systemctl show %s -p ActiveState -p SubState -p LoadState" % UNIT)
    assert "ActiveState=active" in show
    assert "SubState=running" in show
    assert "LoadState=loaded" in show
    assert host.file(QUADLET).exists
    assert host.file(QUADLET).mode == 0o644


def test_listening_and_serving_the_model(host, ready):
    assert host.socket("tcp://0.0.0.0:8000").is_listening
    out = host.check_output("curl -sf -H 'Authorization: Bearer %s' http://127.0.0.1:8000/v1/models" % API_KEY)
    assert [m["id"] for m in json.loads(out)["data"]] == ["inkling"]


def test_api_key_enforced_and_never_in_unit_files(host, ready):
    code = host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models").stdout
    assert code == "401"
    found = host.run("grep -rl %s /etc/containers/systemd /run/systemd/generator /etc/systemd/system" % API_KEY)
    assert found.stdout.strip() == "", "API key written to %s" % found.stdout
    assert host.run("podman secret inspect inkling-vllm-api-key").rc == 0


def test_api_key_is_a_root_only_file_never_in_podman_inspect_or_the_environment(host, inspect):
    """The key reaches vLLM as its --config file (a mount secret), not as VLLM_API_KEY (issue 36, finding 10)."""
    assert API_KEY not in host.check_output("podman inspect inkling-vllm")
    assert not [e for e in inspect["Config"]["Env"] if e.startswith("VLLM_API_KEY")]
    args = inspect["Config"]["Cmd"] if inspect["Config"].get("Cmd") else inspect["Args"]
    assert "--config /run/secrets/inkling-vllm-api-key.yaml" in " ".join(args)
    # the stand-in image has python3 but no coreutils
    seen = host.check_output("podman exec inkling-vllm python3 -c 'import os; s = os.stat(\"%s\"); "
                             "print(oct(s.st_mode & 0o777), s.st_uid)'" % "/run/secrets/inkling-vllm-api-key.yaml")
    assert seen.split()[-2:] == ["0o400", "0"], seen


def test_command_line(inspect):
    args = inspect["Config"]["Cmd"] if inspect["Config"].get("Cmd") else inspect["Args"]
    joined = " ".join(args)
    for expected in ("--model thinkingmachines/Inkling-NVFP4", "--revision " + REV, "--served-model-name inkling",
                     "--host 0.0.0.0", "--port 8000", "--tensor-parallel-size 8", "--shutdown-timeout 5"):
        assert expected in joined
    assert inspect["Config"]["Entrypoint"] in (["/usr/local/bin/vllm", "serve"], "/usr/local/bin/vllm serve")


def test_env(inspect):
    env = dict(e.split("=", 1) for e in inspect["Config"]["Env"])
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["HF_HUB_CACHE"] == "/root/.cache/huggingface/hub"
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    for var, sub in (("VLLM_CACHE_ROOT", "vllm"), ("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", "fa4-cutedsl"),
                     ("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
                     ("FLASHINFER_WORKSPACE_BASE", "flashinfer")):
        assert env[var] == "/var/cache/inkling/" + sub


def test_mounts_hub_read_only_caches_writable(host, inspect):
    mounts = {m["Destination"]: m for m in inspect["Mounts"]}
    hub = mounts["/root/.cache/huggingface/hub"]
    assert hub["Source"] == "/var/lib/inkling/huggingface/hub"
    assert hub["RW"] is False
    cache = mounts["/var/cache/inkling"]
    assert cache["RW"] is True
    digest = inspect["ImageDigest"].split(":", 1)[1]
    assert cache["Source"] == "/var/lib/inkling/cache/sm90-patched/" + digest
    # Writing into the hub cache from the container fails; into the cache it works.
    assert host.run("podman exec inkling-vllm python3 -c \"open('/root/.cache/huggingface/hub/x','w')\"").rc != 0
    assert host.run("podman exec inkling-vllm python3 -c \"open('/var/cache/inkling/triton/x','w')\"").rc == 0


def test_ipc_host_devices_and_no_pull(host, inspect):
    assert inspect["HostConfig"]["IpcMode"] == "host"
    unit = host.file(QUADLET).content_string
    assert "AddDevice=nvidia.com/gpu=all" in unit
    assert "Pull=never" in unit
    assert "SecurityLabelDisable=true" in unit
    generated = host.check_output("systemctl cat %s" % UNIT)
    assert "--pull never" in generated or "--pull=never" in generated
    assert "TimeoutStartSec=4200" in generated
    assert "Restart=on-failure" in generated
    assert "StartLimitBurst=3" in generated


def test_compile_cache_survives_restart(host, ready):
    host.check_output("systemctl reset-failed %s; systemctl restart %s" % (UNIT, UNIT))
    _wait_http(host, "/health")
    metrics = host.check_output("curl -sf http://127.0.0.1:8000/metrics")
    assert "standin_compile_cache_warm 1" in metrics


def test_graceful_stop_drains(host, ready):
    """TimeoutStopSec > podman --stop-timeout > vLLM --shutdown-timeout: a stop logs a clean drain."""
    generated = host.check_output("systemctl cat %s" % UNIT)
    assert "TimeoutStopSec=50" in generated and "--stop-timeout=20" in generated
    host.check_output("systemctl stop %s" % UNIT)
    try:
        journal = host.check_output("journalctl -u %s -n 30 --no-pager" % UNIT)
        assert "Shutdown complete." in journal
        assert host.run("podman container exists inkling-vllm").rc == 1
    finally:
        host.check_output("systemctl start %s" % UNIT)
        _wait_http(host, "/health")


def test_lab_platform_settings(host):
    """What lab/playbooks/prepare-hosts.yml gives every lab host (once checked on `lab/lab.sh up` hosts only)."""
    assert json.loads(host.check_output("podman info --format json"))["store"]["graphDriverName"] == "vfs"
    ca = os.path.join(os.path.dirname(__file__), "..", "..", "..", "lab", ".state", "pki", "ca.crt")
    with open(ca) as handle:
        # (the ansible backend drops the file's final newline)
        want = handle.read().strip()
    assert host.file("/etc/containers/certs.d/lab-registry:5000/ca.crt").content_string.strip() == want
    # Names resolve on the lab network.
    assert host.run("getent hosts lab-registry").rc == 0
