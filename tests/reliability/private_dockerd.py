"""A dockerd of the test's own, to kill, restart and freeze: the machine's engine serves the rest of the suite at the
same time (the reliability suite's background lanes, the other xdist lane), so its faults are tried on a second daemon
with its own socket, data and exec roots, and a bridge of its own. It answers within a second or two and holds one
small image (the Debian+Python base, `docker save`d into it), so a restart costs what a real one does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.env import ROOT

BASE_REPO = "boot-harness/debian-bookworm-python"
#: A bridge for its containers (dockerd's default docker0 is the machine engine's). Short: interface names are <= 15.
BRIDGE, SUBNET = "bh-faults0", "172.29.31.1/24"


def base_image() -> str | None:
    """The base image the machine's engine holds (scripts/build-vllm-cpu-image.sh built it), by repo:tag."""
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", BASE_REPO],
                         capture_output=True, text=True).stdout.split()
    return next((name for name in out if not name.endswith(":<none>")), None)


class PrivateDockerd:
    def __init__(self, root: Path, image: str):
        self.root, self.image = root, image
        self.sock = root / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.log = root / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    def _argv(self) -> list[str]:
        return ["dockerd", "--host", self.host, "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid"),
                "--bridge", BRIDGE, "--iptables=false", "--ip6tables=false"]

    def answers(self) -> bool:
        ping = [sys.executable, str(ROOT / "scripts" / "ping-engine.py"), str(self.sock)]
        return subprocess.run(ping).returncode == 0

    def start(self, wait_s: float = 30) -> float:
        """Start it (again) and wait until its API answers; seconds it took."""
        t0 = time.monotonic()
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd="/", start_new_session=True)
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() - t0 > wait_s:
                raise RuntimeError(f"the private dockerd did not answer: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        return time.monotonic() - t0

    def stop(self, sig: int = signal.SIGTERM, wait_s: float = 40) -> int | None:
        """As `systemctl stop docker` does (SIGTERM): dockerd closes its API, stops every container, exits."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def docker(self, *args: str, stdin=None) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True, stdin=stdin,
                              timeout=120)

    def our_containers(self) -> list[str]:
        return self.docker("ps", "-a", "-q", "--filter", "label=boot-harness.owner-pid").stdout.split()


def _bridge(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True)


def start_private_dockerd(root: Path, image: str) -> PrivateDockerd:
    _bridge("link", "del", BRIDGE)  # one a killed test session left
    _bridge("link", "add", BRIDGE, "type", "bridge")
    _bridge("addr", "add", SUBNET, "dev", BRIDGE)
    _bridge("link", "set", BRIDGE, "up")
    d = PrivateDockerd(root, image)
    d.start()
    saved = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    loaded = d.docker("load", stdin=saved.stdout)
    saved.wait(timeout=120)
    if loaded.returncode != 0:
        raise RuntimeError(f"docker load into the private dockerd: {loaded.stderr}")
    return d


def remove_private_dockerd(d: PrivateDockerd) -> None:
    """Nothing of it stays: its containers, the daemon and the containerd it started, its mounts, its bridge."""
    if d.proc and d.proc.poll() is None:
        d.thaw()
    if d.answers():
        for c in d.docker("ps", "-a", "-q").stdout.split():
            d.docker("rm", "-f", c)
    d.stop()
    exec_root = str(d.root / "exec")
    for pid in subprocess.run(["pgrep", "-f", exec_root], capture_output=True, text=True).stdout.split():
        os.kill(int(pid), signal.SIGKILL)  # a containerd a killed dockerd left running
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[1].startswith(str(d.root))]
    for m in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)
    _bridge("link", "del", BRIDGE)
    shutil.rmtree(d.root, ignore_errors=True)
