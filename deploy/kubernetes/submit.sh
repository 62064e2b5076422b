#!/usr/bin/env bash
# Runs one night of boot-harness on Kubernetes: creates the Indexed boot Job (boot-job.yaml), waits until it has
# finished, complete or failed (a lost shard is the merge's to name), then creates the merge Job (merge-job.yaml),
# waits for it and prints its log. Exit 0 when the night is green, 1 when the merge Job failed (a red night), 2 on
# bad settings. Both Jobs are named after the night, so a night is never confused with an earlier one.
#
# Settings (environment variables):
#   RUN_NAME    the night's name: its folder on the claim and its Jobs' names (a DNS label, at most 40 characters)
#                                                                   (default boot-<UTC date>-<time>, e.g. boot-20261204-012300)
#   NAMESPACE   the namespace of the Jobs and the claim                           (default: kubectl's current one)
#   KUBECTL     the kubectl to run                                                (default kubectl)
#   POLL_S      seconds between looks at a running Job                            (default 30)
#   SHARDS      how many pods share the matrix: the boot Job's completions, parallelism, maxFailedIndexes and the
#               BOOT_HARNESS_SHARD_COUNT its pods read, all four set from this one number  (default: as shipped, 2)
# GPUs per shard, the image and the claims are in the manifests (their headers say where). Kubernetes >= 1.29.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
RUN_NAME=${RUN_NAME:-boot-$(date -u +%Y%m%d-%H%M%S)}
KUBECTL=${KUBECTL:-kubectl}
POLL_S=${POLL_S:-30}
SHARDS=${SHARDS:-$(sed -nE 's/^  completions: ([0-9]+) +# shards$/\1/p' "$here/boot-job.yaml")}
if ! [[ "$RUN_NAME" =~ ^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$ ]]; then
  echo "RUN_NAME=$RUN_NAME: use lowercase letters, digits and '-', at most 40 characters (a Job name)" >&2
  exit 2
fi
if ! [[ "$SHARDS" =~ ^[1-9][0-9]{0,3}$ ]]; then
  echo "SHARDS=$SHARDS: the shard count must be a whole number from 1 to 9999" >&2
  exit 2
fi
kube=("$KUBECTL")
if [ -n "${NAMESPACE:-}" ]; then kube+=(--namespace "$NAMESPACE"); fi

# the manifests with the night's name in place of the shipped one (Job names and RUN_NAME), and the shard count on
# every line marked `# shards` (a number, or the quoted string an env value must be)
manifest() {
  sed -E -e "s/boot-harness-nightly/$RUN_NAME/g" \
    -e "s/^( +[A-Za-z]+: )[0-9]+( +# shards)$/\1$SHARDS\2/" \
    -e "s/^( +value: )\"[0-9]+\"( +# shards)$/\1\"$SHARDS\"\2/" "$here/$1"
}

# waits until Job $1 has a Complete or Failed condition; prints which
finished() {
  local conditions
  while :; do
    conditions=$("${kube[@]}" get job "$1" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}')
    case " $conditions " in
      *" Complete "*) echo Complete; return ;;
      *" Failed "*) echo Failed; return ;;
    esac
    sleep "$POLL_S"
  done
}

manifest boot-job.yaml | "${kube[@]}" create -f -
echo "boot Job $RUN_NAME-boot: $(finished "$RUN_NAME-boot")"
manifest merge-job.yaml | "${kube[@]}" create -f -
merge=$(finished "$RUN_NAME-merge")
"${kube[@]}" logs "job/$RUN_NAME-merge" || true
echo "merge Job $RUN_NAME-merge: $merge (results on the claim under $RUN_NAME/)"
[ "$merge" = Complete ]
