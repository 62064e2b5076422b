#!/usr/bin/env bash
# Stands in for the NVIDIA container toolkit on a machine without a GPU, so that the harness's GPU plumbing is
# exercised against the real engines (tests/rehearsal, docs/gpu-runner.md). Idempotent; needs root.
#   - docker: a stub `nvidia-container-runtime-hook` in $STUB_BIN. dockerd registers its "nvidia" device driver only
#     when that binary is on its PATH at start-up (moby daemon/nvidia_linux.go), so scripts/setup-docker.sh starts
#     dockerd with $STUB_BIN first on PATH (and restarts a dockerd that runs without it). With the driver, a
#     `--gpus all` request is accepted, dockerd sets NVIDIA_VISIBLE_DEVICES in the container and runs the hook as a
#     prestart hook; the stub logs the container's state to $STUB_LOG and succeeds. No device is made.
#   - podman: a CDI spec for `nvidia.com/gpu` (devices `all`, `0`) in /etc/cdi that sets NVIDIA_VISIBLE_DEVICES.
# A real GPU host has neither: it has nvidia-container-toolkit (the real hook, `nvidia-ctk cdi generate`).
set -euo pipefail
STUB_BIN=/usr/local/lib/boot-harness/gpu-stubs/bin
STUB_LOG=/var/log/boot-harness-stub-nvidia-hook.log
[ "$(id -u)" -eq 0 ] || { echo "setup-gpu-stubs: needs root" >&2; exit 1; }
mkdir -p "$STUB_BIN" /etc/cdi
hook="$STUB_BIN/nvidia-container-runtime-hook"
cat > "$hook.tmp" <<HOOK
#!/bin/sh
# boot-harness stub of nvidia-container-runtime-hook (scripts/setup-gpu-stubs.sh): an OCI prestart hook that records
# which container it ran for and the NVIDIA_VISIBLE_DEVICES dockerd put in its spec, and succeeds. It grants no
# device: there is no GPU here. Log line: <unix time> <hook args> <container id> NVIDIA_VISIBLE_DEVICES=<value>
state=\$(cat)
id=\$(printf '%s' "\$state" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
bundle=\$(printf '%s' "\$state" | sed -n 's/.*"bundle":"\([^"]*\)".*/\1/p')
visible=\$(grep -o 'NVIDIA_VISIBLE_DEVICES=[^"]*' "\$bundle/config.json" 2>/dev/null | tail -n 1)
printf '%s %s %s %s\n' "\$(date +%s)" "\$*" "\$id" "\${visible:-NVIDIA_VISIBLE_DEVICES=<unset>}" >> $STUB_LOG
exit 0
HOOK
chmod 755 "$hook.tmp"
mv "$hook.tmp" "$hook"
cat > /etc/cdi/boot-harness-stub-nvidia.yaml.tmp <<'CDI'
# boot-harness stub of an NVIDIA CDI spec (scripts/setup-gpu-stubs.sh): names the devices podman is asked for and
# marks the container; it grants no device, there is no GPU here.
cdiVersion: "0.3.0"
kind: nvidia.com/gpu
devices:
  - name: all
    containerEdits:
      env: ["NVIDIA_VISIBLE_DEVICES=all"]
  - name: "0"
    containerEdits:
      env: ["NVIDIA_VISIBLE_DEVICES=0"]
containerEdits:
  env: ["BOOT_HARNESS_STUB_CDI=1"]
CDI
mv /etc/cdi/boot-harness-stub-nvidia.yaml.tmp /etc/cdi/boot-harness-stub-nvidia.yaml
echo "setup-gpu-stubs: stub hook $hook, CDI spec /etc/cdi/boot-harness-stub-nvidia.yaml"
