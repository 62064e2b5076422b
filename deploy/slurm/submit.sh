#!/usr/bin/env bash
# Submits one night of boot-harness to Slurm: the array of shards (boot-array.sbatch), then the merge
# (merge.sbatch) with --dependency=afterany on the array, so it runs once every task has ended, failed and cancelled
# ones included (the merge names a missing shard). Prints both job ids. Run it from the folder that holds the matrix
# (the jobs start there), with `boot-harness` on the PATH (sbatch passes the environment on).
#
# Settings (environment variables):
#   SHARDS                how many array tasks share the matrix: --array=0-(SHARDS-1)        (default 2)
#   GPUS_PER_TASK         GPUs each task gets: --gres=gpu:GPUS_PER_TASK (or gpu:TYPE:N)    (default 1)
#   BOOT_HARNESS_RESULTS  the shared folder the tasks and the merge write                (default ./boot-results)
#   RUN_NAME              the night's folder in it                                       (default array-<array job id>)
#   MATRIX, PARALLEL, SELECT, NIGHTS   passed on to the jobs (see their headers)
#   SBATCH                the sbatch to run                                              (default sbatch)
#   SBATCH_ARGS           more sbatch options for both jobs, e.g. "--partition=gpu --account=ml"
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
SHARDS=${SHARDS:-2}
GPUS_PER_TASK=${GPUS_PER_TASK:-1}
SBATCH=${SBATCH:-sbatch}
case "$SHARDS" in '' | *[!0-9]* | 0) echo "SHARDS must be a positive integer, got '$SHARDS'" >&2; exit 2 ;; esac
export BOOT_HARNESS_RESULTS=${BOOT_HARNESS_RESULTS:-$PWD/boot-results}
mkdir -p "$BOOT_HARNESS_RESULTS"
read -r -a extra <<< "${SBATCH_ARGS:-}"

array=$("$SBATCH" --parsable "${extra[@]}" --array="0-$((SHARDS - 1))" --gres="gpu:$GPUS_PER_TASK" \
  "$here/boot-array.sbatch")
array=${array%%;*}  # --parsable prints "id" or "id;cluster"
export RUN_NAME=${RUN_NAME:-array-$array}
merge=$("$SBATCH" --parsable "${extra[@]}" --dependency="afterany:$array" --export="ALL,RUN_NAME=$RUN_NAME" \
  "$here/merge.sbatch")
merge=${merge%%;*}
echo "array job $array ($SHARDS tasks, gpu:$GPUS_PER_TASK each), merge job $merge (after all of them)"
echo "results: $BOOT_HARNESS_RESULTS/$RUN_NAME/"
