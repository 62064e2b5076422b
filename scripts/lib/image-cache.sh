# Sourced by scripts/build-*-image.sh: images are tagged by a hash of their inputs and built once per machine.
#   reuse_or_lock REPO KEY LOCKNAME
# sets $tag to REPO:KEY. If that image exists it is tagged REPO:latest, printed, and the script exits 0. Otherwise the
# script goes on holding $cache/LOCKNAME.lock (fd 9), so two test sessions never build the same image twice.
# Needs $cache and a log function from the caller.
reuse_or_lock() {
  tag="$1:$2"
  mkdir -p "$cache"
  exec 9>"$cache/$3.lock"
  flock 9
  if docker image inspect "$tag" >/dev/null 2>&1; then
    docker tag "$tag" "$1:latest"
    log "reusing $tag"
    echo "$tag"
    exit 0
  fi
}
