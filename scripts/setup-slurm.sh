#!/usr/bin/env bash
# Installs what a one-node Slurm cluster needs (Debian's slurmctld, slurmd, slurm-client and munge; ~7-14 s, 3.5 MB)
# and prints the env file for the Slurm rehearsal on the last line:  . "$(bash scripts/setup-slurm.sh | tail -1)"
# Nothing is started here: scripts/slurm-cluster.sh starts the cluster and stops it (the Slurm tests do both, so no
# daemon of ours outlives the test session). The packages' init scripts would start system daemons during the
# install: an /usr/sbin/policy-rc.d that exits 101 stops that, and is removed again if it was not there before.
# Facts this follows: ../shared/notes/slurm-one-node.md (docs/scale.md, "Slurm").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
say() { echo "setup-slurm: $*" >&2; }

if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v munged >/dev/null; then
  [ "$(id -u)" -eq 0 ] || { say "installing Slurm needs root"; exit 1; }
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
  fi
  trap '[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
  export DEBIAN_FRONTEND=noninteractive
  pkgs=(slurmctld slurmd slurm-client munge)
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" </dev/null >/dev/null 2>&1 \
    || { apt-get update -qq </dev/null >/dev/null
         apt-get install -y -qq --no-install-recommends "${pkgs[@]}" </dev/null >/dev/null; }
  command -v sbatch >/dev/null || { say "apt-get could not install Slurm"; exit 1; }
  say "installed $(sbatch --version)"
fi
mkdir -p "$cache"
env_file="$cache/slurm.env"
{
  echo "export SLURM_CLUSTER_SCRIPT=$here/slurm-cluster.sh"
  echo "export SLURM_STATE_ROOT=$cache/slurm"
} > "$env_file"
echo "$env_file"
