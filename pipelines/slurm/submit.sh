#!/bin/sh
# pipelines/slurm/submit.sh — submits a corpus build to Slurm: a job that tokenizes the corpus
# (ss-tokens), then an array of the shards still to encode (shard.sbatch, one ss-encode --shard
# each, after the first job), then the index job (index.sbatch, after every task succeeded:
# --dependency=afterok). The dependent jobs are submitted with --kill-on-invalid-dep=yes, so
# Slurm cancels them when a job they wait for fails, instead of leaving them pending forever.
# Usage: DB=dir DOCS="files..." MODEL=dir SHARDS=N [CHUNK=256] sh pipelines/slurm/submit.sh [SBATCH-OPTION...]
# Extra arguments (e.g. --partition=cpu --account=x) go to every sbatch; SHARD_OPTS to the
# array only, INDEX_OPTS to the tokens and index jobs (e.g. SHARD_OPTS="--cpus-per-task=16
# --mem=32G"). Prints each job id as it is submitted; if an sbatch fails, cancels the jobs it
# submitted before and exits 1. Re-submitting after a failure submits only the shards that are
# missing or out of date, and first cancels the jobs of the last submission (their ids are kept
# in DB/slurm.jobs) that wait on a failed job (reason DependencyNeverSatisfied).
set -eu
: "${DB:?set DB (the database directory)}" "${DOCS:?set DOCS (the corpus files)}"
: "${MODEL:=${SS_MODEL:-}}" "${SHARDS:=4}" "${CHUNK:=256}" "${SHARD_OPTS:=}" "${INDEX_OPTS:=}"
[ -n "$MODEL" ] || { echo "submit.sh: set MODEL (the model directory)" >&2; exit 2; }
case $SHARDS in '' | *[!0-9]* | 0) echo "submit.sh: SHARDS=$SHARDS is not a positive integer" >&2; exit 2 ;; esac
SS_TOP=$(cd "$(dirname "$0")/../.." && pwd)
export DB DOCS MODEL SHARDS CHUNK SS_TOP
here=$SS_TOP/pipelines/slurm
jobs=$DB/slurm.jobs
mkdir -p "$DB"

# Jobs of the last submission that can never run: cancelled, so that they do not pend forever.
if [ -s "$jobs" ]; then
	squeue -h -o '%i %r' -j "$(paste -sd, "$jobs")" 2>/dev/null |
	while read -r id reason; do
		[ "$reason" = DependencyNeverSatisfied ] || continue
		scancel "${id%%_*}" && echo "cancelled job ${id%%_*} of the last submission (its dependency failed)"
	done
fi

# The shards still to encode, as an array spec: 0-3,7,9-10.
todo=$(make --no-print-directory -s -f "$SS_TOP/pipelines/corpus.mk" todo-shards)
spec=$(printf '%s\n' $todo | awk 'NF {
	if (n && $1 == last + 1) { last = $1; next }
	if (n) s = s (s == "" ? "" : ",") (first == last ? first : first "-" last)
	first = last = $1; n++ }
	END { if (n) s = s (s == "" ? "" : ",") (first == last ? first : first "-" last); print s }')

submitted=
# submit NAME SBATCH-ARGS...: sbatch, then prints "NAME job ID" and sets $id; on failure
# cancels the jobs submitted so far and exits 1.
submit() {
	name=$1; shift
	if ! out=$(sbatch --parsable --export=ALL "$@"); then
		echo "submit.sh: sbatch of the $name failed${submitted:+; cancelling$submitted}" >&2
		[ -z "$submitted" ] || scancel $submitted
		exit 1
	fi
	id=${out%%;*}
	submitted="$submitted $id"
	echo "$name job $id"
}
# shellcheck disable=SC2086 # the *_OPTS are lists of options
submit tokens --job-name=ss-tokens --output=ss-tokens-%j.log $INDEX_OPTS "$@" "$here/index.sbatch" tokens
after=$id
if [ -n "$spec" ]; then
	submit "shard array ($spec)" --dependency=afterok:"$after" --kill-on-invalid-dep=yes \
		--array="$spec" $SHARD_OPTS "$@" "$here/shard.sbatch"
	after=$id
else
	echo "every shard is up to date"
fi
submit index --dependency=afterok:"$after" --kill-on-invalid-dep=yes $INDEX_OPTS "$@" "$here/index.sbatch"
printf '%s\n' $submitted >"$jobs.tmp.$$"
mv -f "$jobs.tmp.$$" "$jobs"
