#!/bin/sh
# pipelines/slurm/submit.sh — submits work to Slurm as an array of the parts still to do, then one
# job after every task succeeded (--dependency=afterok). WHAT says which work:
#   corpus (default): a job that tokenizes the corpus (ss-tokens), then an array of the shards
#     still to do (shard.sbatch, after the first job: one ss-encode --shard and the shard's own
#     index, DB/shard-I.db, each), then the index job (index.sbatch: DB/index.list, the shards'
#     indexes queried as one; MERGE=1: also merged into DB/index.db);
#   answers: an array of the parts of a questions file still to answer (answer.sbatch: retrieve,
#     compose, decode; pipelines/answer.sh), then the merge of the answers in input order.
# The dependent jobs are submitted with --kill-on-invalid-dep=yes, so Slurm cancels them when a
# job they wait for fails, instead of leaving them pending forever.
# Usage: DB=dir DOCS="files..." MODEL=dir SHARDS=N [CHUNK=256] sh pipelines/slurm/submit.sh [SBATCH-OPTION...]
#        WHAT=answers QUESTIONS=q.jsonl INDEX=db OUT=dir PARTS=N [MODEL=dir K=4 MODE=picaso-r
#        MAX_TOKENS=16] sh pipelines/slurm/submit.sh [SBATCH-OPTION...]
# Extra arguments (e.g. --partition=cpu --account=x) go to every sbatch; SHARD_OPTS to the
# array only, INDEX_OPTS to the tokens, index and merge jobs (e.g. SHARD_OPTS="--cpus-per-task=16
# --mem=32G"). Prints each job id as it is submitted; if an sbatch fails, cancels the jobs it
# submitted before and exits 1. Re-submitting after a failure submits only the shards (parts)
# that are missing or out of date, and first cancels the jobs of the last submission (their ids
# are kept in DB/slurm.jobs, OUT/slurm.jobs) that wait on a failed job (reason
# DependencyNeverSatisfied).
set -eu
: "${WHAT:=corpus}" "${SHARD_OPTS:=}" "${INDEX_OPTS:=}"
SS_TOP=$(cd "$(dirname "$0")/../.." && pwd)
here=$SS_TOP/pipelines/slurm
case $WHAT in
corpus)
	: "${DB:?set DB (the database directory)}" "${DOCS:?set DOCS (the corpus files)}"
	: "${MODEL:=${SS_MODEL:-}}" "${SHARDS:=4}" "${CHUNK:=256}"
	[ -n "$MODEL" ] || { echo "submit.sh: set MODEL (the model directory)" >&2; exit 2; }
	case $SHARDS in '' | *[!0-9]* | 0) echo "submit.sh: SHARDS=$SHARDS is not a positive integer" >&2; exit 2 ;; esac
	export DB DOCS MODEL SHARDS CHUNK SS_TOP
	jobs=$DB/slurm.jobs
	mkdir -p "$DB"
	;;
answers)
	: "${QUESTIONS:?set QUESTIONS}" "${INDEX:?set INDEX}" "${OUT:?set OUT}" "${PARTS:=4}"
	QUESTIONS=$(realpath "$QUESTIONS") INDEX=$(realpath "$INDEX")
	mkdir -p "$OUT"
	OUT=$(realpath "$OUT")
	export QUESTIONS INDEX OUT PARTS SS_TOP
	jobs=$OUT/slurm.jobs
	;;
*) echo "submit.sh: WHAT=$WHAT: corpus or answers" >&2; exit 2 ;;
esac

# Jobs of the last submission that can never run: cancelled, so that they do not pend forever.
if [ -s "$jobs" ]; then
	squeue -h -o '%i %r' -j "$(paste -sd, "$jobs")" 2>/dev/null |
	while read -r id reason; do
		[ "$reason" = DependencyNeverSatisfied ] || continue
		scancel "${id%%_*}" && echo "cancelled job ${id%%_*} of the last submission (its dependency failed)"
	done
fi

# The shards (parts) still to do, as an array spec: 0-3,7,9-10.
if [ "$WHAT" = corpus ]; then
	todo=$(make --no-print-directory -s -f "$SS_TOP/pipelines/corpus.mk" todo-shards)
else
	todo=$(sh "$SS_TOP/pipelines/answer.sh" todo)
fi
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
if [ "$WHAT" = corpus ]; then
	submit tokens --job-name=ss-tokens --output=ss-tokens-%j.log $INDEX_OPTS "$@" "$here/index.sbatch" tokens
	after=--dependency=afterok:$id
	if [ -n "$spec" ]; then
		submit "shard array ($spec)" "$after" --kill-on-invalid-dep=yes \
			--array="$spec" $SHARD_OPTS "$@" "$here/shard.sbatch"
		after=--dependency=afterok:$id
	else
		echo "every shard is up to date"
	fi
	submit index "$after" --kill-on-invalid-dep=yes $INDEX_OPTS "$@" "$here/index.sbatch"
else
	after=--kill-on-invalid-dep=yes # no dependency
	if [ -n "$spec" ]; then
		submit "answer array ($spec)" --array="$spec" $SHARD_OPTS "$@" "$here/answer.sbatch"
		after=--dependency=afterok:$id
	else
		echo "every part is answered"
	fi
	submit merge "$after" --kill-on-invalid-dep=yes --job-name=ss-merge --output=ss-merge-%j.log \
		$INDEX_OPTS "$@" "$here/answer.sbatch"
fi
printf '%s\n' $submitted >"$jobs.tmp.$$"
mv -f "$jobs.tmp.$$" "$jobs"
