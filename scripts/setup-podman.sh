#!/usr/bin/env bash
# Makes podman's Docker-compatible API answer on $PODMAN_SOCK (default /run/podman/podman.sock, where the harness looks
# for `runtime: podman`) and gives it a small local image for the podman tests. Idempotent and non-interactive:
#   - podman missing                    -> apt-get install podman (about 15 s);
#   - the API does not answer           -> `podman system service` in the background, with this machine's settings
#                                          (docs/container-image.md, "Podman"): runc (crun refuses the hybrid cgroup
#                                          layout), cgroupfs, a file events log, ulimits within the hard limits;
#   - the image is not in podman's store -> `docker save` of the local Debian+Python base (built by
#                                          build-vllm-cpu-image.sh) piped into `podman load` (a few seconds).
# No registry is needed. The 4.5 GB vLLM CPU image is not copied: the podman tests run the fake server from the
# repository (bind-mounted) on the base image; the engine path is what they check.
# Prints the env file (PODMAN_IMAGE, PODMAN_SOCK) on the last line:  . "$(bash scripts/setup-podman.sh | tail -1)"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
sock="${PODMAN_SOCK:-/run/podman/podman.sock}"
log="${PODMAN_LOG:-/var/log/boot-harness-podman.log}"
wait_s="${PODMAN_WAIT_S:-30}"
conf="$cache/podman/containers.conf"

say() { echo "setup-podman: $*" >&2; }
die() { say "$*"; exit 1; }
ping_api() { python3 "$here/ping-engine.py" "$sock"; }

[ "$(id -u)" -eq 0 ] || { ping_api && command -v podman >/dev/null || die "podman needs root here (rootful service)"; }

# catatonit is podman's `--init` (a Recommends, so not pulled in by --no-install-recommends): the harness runs every
# container with an init, which forwards SIGTERM to the server.
if ! command -v podman >/dev/null 2>&1 || [ ! -x /usr/libexec/podman/catatonit ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends podman catatonit </dev/null >/dev/null 2>&1 \
    || { apt-get update -qq </dev/null >/dev/null
         apt-get install -y -qq --no-install-recommends podman catatonit </dev/null >/dev/null; }
  command -v podman >/dev/null 2>&1 || die "apt-get could not install podman"
  say "installed $(podman --version) and catatonit"
fi

mkdir -p "$(dirname "$conf")" "$(dirname "$sock")" "$(dirname "$log")"
# Ulimits: root here cannot raise its hard limits, and podman (4.3) lowers its own RLIMIT_NPROC to 32768 when it
# starts, so a container asking for more fails at `runc create` ("error setting rlimit type 6").
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
cat >"$conf.tmp" <<EOF
# Written by scripts/setup-podman.sh: what podman 4.3 needs on these machines.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
changed=1; cmp -s "$conf.tmp" "$conf" && changed=0
mv "$conf.tmp" "$conf"
export CONTAINERS_CONF="$conf"

if ping_api && [ "$changed" = 1 ] && pid=$(pgrep -f "podman system service --time=0 unix://$sock"); then
  kill $pid; sleep 1; say "restarting the podman service: its settings changed"
fi
# A service started from a directory that is gone since (a CI checkout, removed and cloned again) answers pings but
# cannot start a container: conmon fails on "Failed to get working directory" ("write child: broken pipe").
if pid=$(pgrep -f "podman system service --time=0 unix://$sock" | head -1) \
    && [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == *" (deleted)" ]]; then
  kill "$pid"; sleep 1; say "restarting the podman service: the directory it was started from is gone"
fi
if ping_api; then
  say "the podman API already answers on $sock"
else
  rm -f "$sock"
  # from /: the service (and every conmon it forks) must not depend on the directory this script ran in
  (cd / && exec setsid nohup podman system service --time=0 "unix://$sock" >>"$log" 2>&1 </dev/null) &
  pid=$!
  deadline=$((SECONDS + wait_s))
  until ping_api; do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; die "podman system service exited; log: $log"; }
    [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$log" >&2; die "no answer on $sock within ${wait_s}s; log: $log"; }
    sleep 0.3
  done
  say "started podman system service (pid $pid, log $log) on $sock"
fi

# The base image docker holds (build-vllm-cpu-image.sh made it), under the same name in podman's store.
base=$(docker images --format '{{.Repository}}:{{.Tag}}' boot-harness/debian-bookworm-python | grep -v ':<none>$' | head -1)
[ -n "$base" ] || die "no boot-harness/debian-bookworm-python image in docker: run scripts/setup-container-example.sh"
image="localhost/$base"
if podman image exists "$image"; then
  say "reusing $image"
else
  docker save "$base" | podman load -q >/dev/null
  podman image exists "$image" || podman tag "docker.io/$base" "$image" 2>/dev/null || true
  podman image exists "$image" || die "podman load did not give $image"
  say "loaded $image from docker"
fi

mkdir -p "$cache"
envfile="$cache/podman.env"
printf 'export PODMAN_IMAGE=%q\nexport PODMAN_SOCK=%q\n' "$image" "$sock" >"$envfile"
echo "$envfile"
