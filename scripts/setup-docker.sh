#!/usr/bin/env bash
# Makes sure a Docker engine answers on /var/run/docker.sock. Idempotent and non-interactive (safe under CI=true with
# no stdin, and by hand):
#   - the API already answers            -> does nothing;
#   - dockerd is missing                 -> apt-get update (once) and apt-get install docker.io;
#   - then starts dockerd in the background (log: $DOCKERD_LOG) and waits, bounded, for the socket to answer.
# Prints one line saying what it did; exits non-zero with a clear message if the engine does not come up.
set -euo pipefail

sock=/var/run/docker.sock
log="${DOCKERD_LOG:-/var/log/boot-harness-dockerd.log}"
wait_s="${DOCKERD_WAIT_S:-30}"

ping_api() { python3 "$(dirname "$0")/ping-engine.py" "$sock"; }
# scripts/setup-gpu-stubs.sh's stub nvidia hook: dockerd must find it on its PATH when it starts.
stubs=/usr/local/lib/boot-harness/gpu-stubs/bin
running_pid() { local p; p=$(cat /var/run/docker.pid 2>/dev/null) && kill -0 "$p" 2>/dev/null && echo "$p"; }
lacks_stubs() {  # a dockerd of ours started before the stubs were installed
  local p; p=$(running_pid) || return 1
  [ -x "$stubs/nvidia-container-runtime-hook" ] || return 1
  ! tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -q "^PATH=$stubs:"
}

if ping_api; then
  if lacks_stubs; then
    p=$(running_pid)
    echo "setup-docker: restarting dockerd (pid $p) so that it finds the stub nvidia hook in $stubs" >&2
    kill "$p"
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  else
    echo "setup-docker: the Docker API already answers on $sock; nothing to do"
    exit 0
  fi
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-docker: the Docker API does not answer on $sock and starting dockerd needs root" >&2
  exit 1
fi

installed=""
if ! command -v dockerd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq </dev/null >/dev/null
  apt-get install -y -qq --no-install-recommends docker.io </dev/null >/dev/null
  command -v dockerd >/dev/null 2>&1 || { echo "setup-docker: apt-get installed docker.io but dockerd is still missing" >&2; exit 1; }
  installed="installed docker.io, "
fi

# A stale pid file from an engine that died keeps a new dockerd from starting.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
  rm -f /var/run/docker.pid
fi

mkdir -p "$(dirname "$log")"
if pid=$(cat /var/run/docker.pid 2>/dev/null) && kill -0 "$pid" 2>/dev/null; then
  started="found dockerd (pid $pid) starting"
else
  # setsid + nohup: the engine outlives this script and the terminal or CI step that ran it.
  # from /: the engine must not hold on to (or depend on) the directory this script ran in
  (cd / && PATH="$stubs:$PATH" exec setsid nohup dockerd >>"$log" 2>&1 </dev/null) &
  pid=$!
  started="started dockerd (pid $pid, log $log)"
fi

deadline=$((SECONDS + wait_s))
until ping_api; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "setup-docker: dockerd (pid $pid) exited before its API answered; last lines of $log:" >&2
    tail -n 20 "$log" >&2 || true
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "setup-docker: dockerd (pid $pid) did not answer on $sock within ${wait_s}s; last lines of $log:" >&2
    tail -n 20 "$log" >&2 || true
    exit 1
  fi
  sleep 0.5
done
echo "setup-docker: ${installed}${started}; the API answers on $sock"
