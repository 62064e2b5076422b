"""One container spec, rendered twice (harness.runtime.container_spec): the container `ContainerRuntime.start` asks
the engine's API for and the one the printed `repro` command makes through the engine's CLI are the same container,
as the engine itself reports them (inspect): image, entrypoint, command, env, binds, ports, IPC, shm, GPU request,
labels, memory limit. On docker and on podman, with a GPU request (docker: the stub hook of scripts/setup-gpu-stubs.sh;
podman only from 5.4, whose API honours it), a patch from the matrix, a secret in the env and in the server's args, a
bind mount and the compile-cache mount.

Nothing boots: the entrypoint sleeps, and each container is stopped (removed) right after it is inspected."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import docker
import pytest

from harness.masking import Masker
from harness.matrix.load import load_matrix
from harness.runtime import engine as eng
from harness.runtime.base import CellContext
from harness.runtime.container import ContainerRuntime
from harness.runtime.ports import free_port
from harness.shell import format_shell
from tests.builders import write_matrix
from tests.helpers.env import PODMAN_CLI_ENV  # the CLI's settings

TARGET = "/etc/debian_version"
#: Secrets the cell is given; the printed command must name them (`"$HF_TOKEN"`), never hold them.
SECRETS = {"HF_TOKEN": "hf_spec_test_0123456789abcdef", "VLLM_API_KEY": "sk-spec-test-0123456789abcdef"}


def patch_for(base: bytes) -> tuple[str, str, str]:
    """A unified diff replacing the file's one line: (text, base sha256, patched sha256)."""
    patched = b"patched-by-boot-harness\n"
    text = (f"--- a{TARGET}\n+++ b{TARGET}\n@@ -1 +1 @@\n-{base.decode().rstrip(chr(10))}\n"
            f"+{patched.decode()}")
    return text, hashlib.sha256(base).hexdigest(), hashlib.sha256(patched).hexdigest()


def cli(program: str, cli_env: dict[str, str], *args: str) -> str:
    return subprocess.run([program, *args], capture_output=True, text=True, check=True, timeout=120,
                          env={**os.environ, **cli_env}).stdout


def inspected(client: docker.DockerClient, container_id: str) -> dict:
    """The fields both paths set, as the engine reports them."""
    a = client.api.inspect_container(container_id)
    c, h = a["Config"], a["HostConfig"]
    return {"Name": a["Name"], "ImageId": a["Image"], "Image": c["Image"], "Entrypoint": c["Entrypoint"],
            "Cmd": c["Cmd"], "Env": c["Env"],
            "Labels": c["Labels"], "Binds": h.get("Binds"), "Mounts": h.get("Mounts"),
            "PortBindings": h.get("PortBindings"), "IpcMode": h.get("IpcMode"), "ShmSize": h.get("ShmSize"),
            "DeviceRequests": h.get("DeviceRequests"), "Init": h.get("Init"), "Memory": h.get("Memory")}


def normalised(fields: dict, engine: str) -> dict:
    """Only what must differ between a run's container and a pasted one is taken out."""
    out = dict(fields)
    if engine == "podman":
        # podman's API records the name it resolved the reference to (`…:tag`), its CLI the reference as given
        # (`…@sha256:…`); both are given the same reference (the tokens are checked) and hold the same image
        # (ImageId, compared)
        out["Image"] = "<reference>"
    # the name: a run's is bh-<run>-<cell>, the pasted one's bh-repro-<cell>, so that both can exist at once
    out["Name"] = "<name>" if out["Name"].startswith("/bh-") else out["Name"]
    # the host port: a run lets the engine choose a free one, the repro binds the one the person asked for
    out["PortBindings"] = {k: [{**b, "HostPort": "<port>"} for b in v] for k, v in (out["PortBindings"] or {}).items()}
    # the order of Binds: docker's CLI passes its -v list through a Go map (any order); mounts are made by target
    # depth, not list order
    out["Binds"] = sorted(out["Binds"] or [])
    # the order of Env: podman's API puts the container's own variables before the image's, its CLI after (one
    # assignment per name either way); and HOSTNAME, which podman adds at start: the container's own id
    out["Env"] = sorted("HOSTNAME=<id>" if e.startswith("HOSTNAME=") else e for e in out["Env"] or [])
    # labels only a run's container carries: the owner's pid and host (what `gc` removes a dead harness's
    # containers by: a pasted container must never carry them), and testcontainers' own org.testcontainers.*
    out["Labels"] = {k: v for k, v in (out["Labels"] or {}).items()
                     if not k.startswith(("org.testcontainers", f"{eng.LABEL_PREFIX}.owner-pid",
                                          f"{eng.LABEL_PREFIX}.host"))}
    # DeviceRequests: docker-py sends no device ids as [], docker's CLI as null; both mean "none named"
    out["DeviceRequests"] = [{**r, "DeviceIDs": r.get("DeviceIDs") or None} for r in out["DeviceRequests"] or []]
    return out


def same_container_both_ways(engine: str, image: str, client: docker.DockerClient, cli_env: dict[str, str],
                             tmp_path: Path, gpus: str | None) -> dict:
    base = cli(engine, cli_env, "run", "--rm", "--entrypoint", "cat", image, TARGET).encode()
    text, base_sha, patched_sha = patch_for(base)
    (tmp_path / "p.patch").write_text(text)
    (tmp_path / "data").mkdir()
    (tmp_path / "cc").mkdir()
    doc = {"name": "spec", "runtime": engine, "image": image, "pull": "never", "model": "/data",
           "ipc": "shareable", "shm_size": "64m", "memory": "256m", "mounts": [{"source": "data", "target": "/data"}],
           # a multi-word entrypoint: the CLI's --entrypoint takes one word, so both paths must split it alike
           "entrypoint": ["sh", "-c", "exec sleep 30", "sh"],
           "env": {"PLAIN": "a b", **SECRETS}, "args": ["--api-key", SECRETS["VLLM_API_KEY"]],
           "axes": {"case": {"one": {"patches": [{"target": TARGET, "patch": "p.patch", "base_sha256": base_sha,
                                                  "patched_sha256": patched_sha}]}}}}
    if gpus:
        doc["gpus"] = gpus
    loaded = load_matrix(write_matrix(tmp_path / "m.yaml", doc))
    (cell,) = list(loaded.cells)
    runtime = ContainerRuntime(loaded, engine)
    ctx = CellContext(run_dir=tmp_path / "run", work_dir=tmp_path / "work", masker=Masker(), matrix_dir=tmp_path,
                      labels={"boot-harness.run": "spec-test", "boot-harness.cell": cell.id},
                      compile_cache=tmp_path / "cc")

    server = runtime.start(cell, ctx, lambda line: None)
    try:
        started = inspected(client, server.container.id)
    finally:
        server.stop(grace_s=1)

    port = free_port()
    tokens = runtime.command_line(cell, ctx, host_port=port)
    line = format_shell(tokens)
    assert not any(v in line for v in SECRETS.values()), line
    assert tokens[:2] == [engine, "run"]
    image_id, digest = runtime.resolve_image(image)
    assert (digest or image_id) in tokens, tokens  # the reference `start` gave the engine
    # `create` takes exactly run's flags (run = create + start): the same container, made without attaching to it
    created_line = format_shell([engine, "create", *tokens[2:]])
    subprocess.run([engine, "rm", "-f", f"bh-repro-{cell.id}"], capture_output=True, env={**os.environ, **cli_env})
    # the secrets come from the shell's environment, as when a person pastes the line
    proc = subprocess.run(["bash", "-c", created_line], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **cli_env, **SECRETS})
    assert proc.returncode == 0, proc.stderr
    created_id = proc.stdout.strip().splitlines()[-1]
    try:
        client.api.start(created_id)  # started as the run's is: podman fills some of Env (HOME, HOSTNAME) only then
        pasted = inspected(client, created_id)
    finally:
        client.api.remove_container(created_id, force=True)

    assert pasted["Name"] == f"/bh-repro-{cell.id}" and started["Name"] != pasted["Name"]
    assert normalised(started, engine) == normalised(pasted, engine)
    # not vacuous: the fields carry what the matrix asked for
    env = set(started["Env"])
    assert {f"{k}={v}" for k, v in SECRETS.items()} | {"PLAIN=a b"} <= env
    assert started["Entrypoint"] == ["sh"] and started["Cmd"][:3] == ["-c", "exec sleep 30", "sh"]
    assert SECRETS["VLLM_API_KEY"] in started["Cmd"]
    assert any(b.startswith(f"{tmp_path / 'run' / 'patches'}") and f":{TARGET}:ro" in b for b in started["Binds"])
    assert any(":/data:ro" in b for b in started["Binds"]) and started["IpcMode"] == "shareable"
    assert started["ShmSize"] == 64 * 2**20 and started["Init"] is True and started["Memory"] == 256 * 2**20
    assert started["Labels"]["boot-harness.cell"] == cell.id == pasted["Labels"]["boot-harness.cell"]
    return started


@pytest.fixture
def testcontainers_env(monkeypatch):
    for key, value in eng.TESTCONTAINERS_ENV.items():
        monkeypatch.setenv(key, value)


def test_docker_starts_the_container_its_repro_prints(docker_image, tmp_path, testcontainers_env):
    image = docker_image["VLLM_CPU_IMAGE"]
    client = docker.from_env()
    started = same_container_both_ways("docker", image, client, {}, tmp_path, gpus="all")
    (request,) = started["DeviceRequests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]], request


def test_podman_starts_the_container_its_repro_prints(podman, tmp_path, testcontainers_env, monkeypatch):
    monkeypatch.setenv("CONTAINER_HOST", podman["CONTAINER_HOST"])
    client = docker.DockerClient(base_url=podman["CONTAINER_HOST"])
    # podman 4.3 reports a private IPC namespace as "shareable" too: IpcMode is told apart on docker.
    # No GPU request: podman's API before 5.4 ignores CDI requests (podman#22645; preflight refuses such a run), and
    # neither its API nor its CLI shows a CDI device in inspect, so a request would compare as nothing.
    version = eng.engine_info(client, "podman").version_tuple()
    same_container_both_ways("podman", podman["PODMAN_IMAGE"], client, PODMAN_CLI_ENV, tmp_path,
                             gpus="all" if version >= eng.PODMAN_CDI_API else None)
