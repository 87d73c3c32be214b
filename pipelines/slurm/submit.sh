#!/bin/sh
# pipelines/slurm/submit.sh — submits a corpus build to Slurm: a job that tokenizes the corpus,
# then an array of SHARDS tasks (shard.sbatch, one ss-encode --shard each, after the first job),
# then the index job (index.sbatch, after every task succeeded: --dependency=afterok).
# Usage: DB=dir DOCS="files..." MODEL=dir SHARDS=N [CHUNK=256] sh pipelines/slurm/submit.sh [SBATCH-OPTION...]
# Extra arguments (e.g. --partition=cpu --account=x) go to every sbatch. Prints the job ids.
# Re-submitting after a failure redoes only the shards that are missing.
set -eu
: "${DB:?set DB (the database directory)}" "${DOCS:?set DOCS (the corpus files)}"
: "${MODEL:=${SS_MODEL:-}}" "${SHARDS:=4}" "${CHUNK:=256}"
[ -n "$MODEL" ] || { echo "submit.sh: set MODEL (the model directory)" >&2; exit 2; }
case $SHARDS in '' | *[!0-9]* | 0) echo "submit.sh: SHARDS=$SHARDS is not a positive integer" >&2; exit 2 ;; esac
SS_TOP=$(cd "$(dirname "$0")/../.." && pwd)
export DB DOCS MODEL SHARDS CHUNK SS_TOP
here=$SS_TOP/pipelines/slurm
tok=$(sbatch --parsable --export=ALL "$@" "$here/index.sbatch" tokens)
tok=${tok%%;*}
arr=$(sbatch --parsable --export=ALL --dependency=afterok:"$tok" --array=0-$((SHARDS - 1)) "$@" "$here/shard.sbatch")
arr=${arr%%;*}
idx=$(sbatch --parsable --export=ALL --dependency=afterok:"$arr" "$@" "$here/index.sbatch")
idx=${idx%%;*}
echo "tokens job $tok, shard array $arr (0-$((SHARDS - 1))), index job $idx"
