#!/usr/bin/env bash
# Submits one night of boot-harness to Slurm: the array of shards (boot-array.sbatch), then the merge
# (merge.sbatch) with --dependency=afterany on the array, so it runs once every task has ended, failed and cancelled
# ones included (the merge names a missing shard). Prints both job ids. Run it from the folder that holds the matrix
# (the jobs start there), with `boot-harness` on the PATH (sbatch passes the environment on).
#
# Settings (environment variables):
#   SHARDS                how many array tasks share the matrix: --array=0-(SHARDS-1)        (default 2)
#   GPUS_PER_TASK         GPUs each task gets: --gres=gpu:GPUS_PER_TASK (or gpu:TYPE:N)    (default 1)
#   MEM_PER_TASK          host memory each task gets: --mem (boot-array.sbatch says why)  (default 64G)
#   BOOT_HARNESS_RESULTS  the shared folder the tasks and the merge write                (default ./boot-results)
#   RUN_NAME              the night's folder in it                                       (default array-<array job id>)
#   MATRIX, PARALLEL, SELECT, NIGHTS   passed on to the jobs (see their headers)
#   SBATCH                the sbatch to run                                              (default sbatch)
#   SBATCH_ARGS           more sbatch options for both jobs, e.g. "--partition=gpu --account=ml"
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
SHARDS=${SHARDS:-2}
GPUS_PER_TASK=${GPUS_PER_TASK:-1}
MEM_PER_TASK=${MEM_PER_TASK:-64G}
SBATCH=${SBATCH:-sbatch}
case "$SHARDS" in '' | *[!0-9]* | 0) echo "SHARDS must be a positive integer, got '$SHARDS'" >&2; exit 2 ;; esac
export BOOT_HARNESS_RESULTS=${BOOT_HARNESS_RESULTS:-$PWD/boot-results}
mkdir -p "$BOOT_HARNESS_RESULTS"
case "$MEM_PER_TASK" in '' | *[!0-9KMGT]* | [!0-9]*) echo "MEM_PER_TASK must be a size such as 64G, got '$MEM_PER_TASK'" >&2; exit 2 ;; esac
read -r -a extra <<< "${SBATCH_ARGS:-}"
# "${extra[@]}" of an empty array is an unbound variable under `set -u` in bash before 4.4: expand it guarded
array=$("$SBATCH" --parsable ${extra[@]+"${extra[@]}"} --array="0-$((SHARDS - 1))" --gres="gpu:$GPUS_PER_TASK" \
  --mem="$MEM_PER_TASK" "$here/boot-array.sbatch")
array=${array%%;*}  # --parsable prints "id" or "id;cluster"
export RUN_NAME=${RUN_NAME:-array-$array}
merge=$("$SBATCH" --parsable ${extra[@]+"${extra[@]}"} --dependency="afterany:$array" --export="ALL,RUN_NAME=$RUN_NAME" \
  "$here/merge.sbatch")
merge=${merge%%;*}
echo "array job $array ($SHARDS tasks, gpu:$GPUS_PER_TASK and $MEM_PER_TASK each), merge job $merge (after all of them)"
echo "results: $BOOT_HARNESS_RESULTS/$RUN_NAME/"
