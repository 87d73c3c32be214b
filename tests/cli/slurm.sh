#!/bin/sh
# The Slurm scripts (pipelines/slurm/) without a cluster: stand-in sbatch, squeue and scancel
# on PATH record their arguments and run the job scripts in the background as Slurm would
# (after their --dependency=afterok jobs, cancelled under --kill-on-invalid-dep=yes when one
# fails, else pending with reason DependencyNeverSatisfied; array tasks with
# SLURM_ARRAY_TASK_ID; a partition of 4 cpus and 8 GB that refuses bigger jobs). Checks:
# submit.sh twice at once ends with one good index; a failed task, then a resubmit that
# cancels a stale job and asks only for the missing shard; the job names and logs; a refused
# sbatch cancels what was submitted and says so; two index jobs at once keep a good index;
# answers as an array equal one process's, and a failed part alone is resubmitted.
# Self-contained: a random model and a byte-level tokenizer (tests/util/tiny.sh), a corpus
# made here. Run by tests/run from the repo root (SS_TOP, PATH with build/bin).
set -eu
LC_ALL=C; export LC_ALL
d=$(mktemp -d)
trap 'for p in "$d"/stub/*.pid; do [ -f "$p" ] && { kill -- -"$(cat "$p")" 2>/dev/null || :; }; done; rm -rf "$d"' EXIT
cd "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }

# A model, a tokenizer (every byte one token, no merges) and 12 documents.
. "$SS_TOP/tests/util/tiny.sh"
for w in alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima; do
	echo "The $w document talks about $w and nothing but $w, at some length."
done >docs.txt

# The stand-ins: one script, its name says which command. Jobs live in $STUB as files:
# ID.state (PENDING RUNNING COMPLETED FAILED CANCELLED), ID.reason, ID.pid (the runner's
# process group); an array's tasks are ID_I.*. STUB_REFUSE: a pattern an sbatch command line
# must not match (the stand-in fails as sbatch does under EnforcePartLimits).
mkdir bin stub
cat >bin/slurm-stub <<'EOF'
#!/bin/sh
set -u
S=$STUB
log() { flock "$S/lock" sh -c 'printf "%s\n" "$1" >>"$2"' sh "$*" "$S/$(basename "$0").log"; }
state() { # ID: an array's state is its tasks' (FAILED if one failed, COMPLETED if all did)
	if [ -f "$S/$1.tasks" ]; then
		st=COMPLETED
		for t in $(cat "$S/$1.tasks"); do
			case $(cat "$S/$1_$t.state") in
			FAILED | CANCELLED) echo FAILED; return ;;
			COMPLETED) ;;
			*) st=PENDING ;;
			esac
		done
		echo $st
	else
		cat "$S/$1.state"
	fi
}
tasks() { # array spec -> ids
	echo "$1" | tr , '\n' | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done
}
case ${1:-} in
--run) # the runner of job $2 (its own process group)
	shift; id=$1 deps=$2 kill=$3 cpus=$4 out=$5; shift 5
	for dep in $(echo "$deps" | tr : ' '); do
		while :; do
			case $(state "$dep") in
			COMPLETED) break ;;
			FAILED | CANCELLED)
				if [ "$kill" = yes ]; then echo CANCELLED >"$S/$id.state"; else echo DependencyNeverSatisfied >"$S/$id.reason"; fi
				for t in $(cat "$S/$id.tasks" 2>/dev/null); do
					if [ "$kill" = yes ]; then echo CANCELLED >"$S/${id}_$t.state"; else echo DependencyNeverSatisfied >"$S/${id}_$t.reason"; fi
				done
				exit 0 ;;
			esac
			sleep 0.1
		done
	done
	run1() { # TASK-OR-EMPTY SCRIPT ARGS...
		task=$1; shift
		jid=$id${task:+_$task}
		[ "$(cat "$S/$jid.state")" = PENDING ] || return 0
		echo RUNNING >"$S/$jid.state"
		o=$(echo "$out" | sed "s/%j/$id/g; s/%A/$id/g; s/%a/$task/g")
		if env SLURM_JOB_ID="$id" SLURM_CPUS_PER_TASK="$cpus" SLURM_SUBMIT_DIR="$PWD" \
			${task:+SLURM_ARRAY_JOB_ID=$id SLURM_ARRAY_TASK_ID=$task} sh "$@" >"$o" 2>&1
		then echo COMPLETED >"$S/$jid.state"; else echo FAILED >"$S/$jid.state"; fi
	}
	if [ -f "$S/$id.tasks" ]; then
		for t in $(cat "$S/$id.tasks"); do run1 "$t" "$@" & done
		wait
	else
		run1 "" "$@"
	fi
	rm -f "$S/$id.pid"
	exit 0 ;;
esac
case $(basename "$0") in
sbatch)
	log "$*"
	if [ -n "${STUB_REFUSE:-}" ] && echo "$*" | grep -q -- "$STUB_REFUSE"; then
		echo "sbatch: error: Batch job submission failed: Requested node configuration is not available" >&2
		exit 1
	fi
	opts=
	while [ $# -gt 0 ]; do case $1 in -*) opts="$opts $1"; shift ;; *) break ;; esac; done
	script=$1; shift
	# the script's #SBATCH lines, then the command line's options (all --name=value here)
	deps= kill=no array= out=slurm-%j.out cpus=1 mem=0
	for a in $(sed -n 's/^#SBATCH //p' "$script") $opts; do
		case $a in
		--dependency=afterok:*) deps=${a#--dependency=afterok:} ;;
		--kill-on-invalid-dep=*) kill=${a#*=} ;;
		--array=*) array=${a#*=} ;;
		--output=*) out=${a#*=} ;;
		--cpus-per-task=*) cpus=${a#*=} ;;
		--mem=*G) mem=${a#--mem=}; mem=${mem%G} ;;
		esac
	done
	if [ "$cpus" -gt 4 ] || [ "$mem" -gt 8 ]; then
		echo "sbatch: error: CPU count or memory per node can never be satisfied (PartitionConfig)" >&2
		exit 1
	fi
	id=$(flock "$S/lock" sh -c 'n=$(($(cat "$1/next" 2>/dev/null || echo 1000) + 1)); echo $n >"$1/next"; echo $n' sh "$S")
	echo PENDING >"$S/$id.state"
	if [ -n "$array" ]; then
		tasks "$array" >"$S/$id.tasks"
		for t in $(cat "$S/$id.tasks"); do echo PENDING >"$S/${id}_$t.state"; done
	fi
	setsid sh "$0" --run "$id" "$deps" "$kill" "$cpus" "$out" "$script" "$@" </dev/null >/dev/null 2>&1 &
	echo $! >"$S/$id.pid"
	echo "$id" ;;
squeue) # -h -o '%i %r' [-j ID,...]: pending or running jobs (and tasks) of the list
	log "$*"
	ids=
	while [ $# -gt 0 ]; do case $1 in -j) ids=$(echo "$2" | tr , ' '); shift ;; esac; shift; done
	[ -n "$ids" ] || ids=$(ls "$S" | sed -n 's/^\([0-9]*\)\.state$/\1/p')
	for id in $ids; do
		for f in "$S/$id.state" "$S/${id}"_*.state; do
			[ -f "$f" ] || continue
			j=$(basename "$f" .state)
			[ ! -f "$S/$id.tasks" ] || [ "$j" != "$id" ] || continue
			case $(cat "$f") in
			PENDING) echo "$j $(cat "$S/$j.reason" 2>/dev/null || echo Dependency)" ;;
			RUNNING) echo "$j None" ;;
			esac
		done
	done ;;
scancel)
	log "$*"
	for id in "$@"; do
		[ -f "$S/$id.pid" ] && kill -- -"$(cat "$S/$id.pid")" 2>/dev/null
		rm -f "$S/$id.pid"
		for f in "$S/$id.state" "$S/${id}"_*.state; do
			[ -f "$f" ] || continue
			case $(cat "$f") in PENDING | RUNNING) echo CANCELLED >"$f" ;; esac
		done
	done ;;
esac
EOF
for c in sbatch squeue scancel; do ln -s slurm-stub bin/$c; done
chmod +x bin/slurm-stub
export STUB=$d/stub PATH=$d/bin:$PATH

# wait_jobs: until no job or task is PENDING (except DependencyNeverSatisfied) or RUNNING.
wait_jobs() {
	i=0
	while squeue -h -o '%i %r' | grep -v DependencyNeverSatisfied | grep -q .; do
		i=$((i + 1))
		[ $i -lt 1200 ] || fail "jobs still running after 120 s: $(squeue -h -o '%i %r')"
		sleep 0.1
	done
}
# good_index DB: the shards' indexes, one per shard, read as one through DB/index.list,
# answer a query with the right document, over all 12 documents; none indexes them all.
good_index() {
	[ -s "$1/index.list" ] || fail "$1: no index.list (jobs: $(cat stub/*.state | sort | uniq -c | tr '\n' ' '))"
	[ "$(cat "$1/index.list")" = "$(printf 'shard-0.db\nshard-1.db\nshard-2.db')" ] ||
		fail "$1: index.list: $(cat "$1/index.list")"
	n=$(ss-retrieve list --index "@$1/index.list" | wc -l)
	for i in 0 1 2; do
		m=$(ss-retrieve list --index "$1/shard-$i.db" | wc -l)
		[ "$m" -gt 0 ] && [ "$m" -lt "$n" ] || fail "$1: shard-$i.db holds $m of the $n documents"
	done
	ss-retrieve query -q --index "@$1/index.list" -k 1 --query "foxtrot" --ids | grep -q "docs.txt:6#0" ||
		fail "$1: the index does not find the foxtrot document"
	[ "$(ss-retrieve query -q --index "@$1/index.list" -k 20 --query "document" --ids | wc -l)" -eq 12 ] ||
		fail "$1: the index does not hold the 12 documents"
	ls "$1" | grep -q '\.tmp' && fail "$1: temporary files left: $(ls "$1")"
	return 0
}
mtime() { stat -c %y "$1"; }
export DOCS=$d/docs.txt MODEL=$d/model SHARDS=3 CHUNK=64
sub=$SS_TOP/pipelines/slurm/submit.sh

# 1. Submitted twice at once: two chains race; one good index at the end.
export DB=$d/db
sh "$sub" --partition=cpu >out1 & sh "$sub" --partition=cpu >out2
wait
wait_jobs
good_index db
for o in out1 out2; do
	grep -q "^tokens job [0-9]" $o && grep -q "^shard array (0-2) job [0-9]" $o && grep -q "^index job [0-9]" $o ||
		fail "submit.sh output: $(cat $o)"
done
[ "$(grep -c . stub/sbatch.log)" -eq 6 ] || fail "not 3 + 3 sbatch calls: $(cat stub/sbatch.log)"
grep -q -- "--job-name=ss-tokens --output=ss-tokens-%j.log .*--partition=cpu .*index.sbatch tokens$" stub/sbatch.log ||
	fail "tokens job: $(grep tokens stub/sbatch.log)"
tok=$(sed -n 's/^tokens job //p' out1)
[ -e "ss-tokens-$tok.log" ] || fail "no log ss-tokens-$tok.log: $(ls)"
grep -q -- "--kill-on-invalid-dep=yes --array=0-2 .*shard.sbatch$" stub/sbatch.log || fail "array: $(cat stub/sbatch.log)"

# 2. A failed task: the index job is not run; a resubmit asks only for that shard and the index.
export DB=$d/db2
mkdir fakebin
# breakable TOOL PATTERN: fakebin/TOOL runs the real tool, but dies as a killed task (exit 137)
# while $d/break exists, when its arguments match the case PATTERN.
breakable() {
	cat >"fakebin/$1" <<EOF
#!/bin/sh
case " \$* " in $2) [ -e "$d/break" ] && { echo "killed" >&2; exit 137; } ;; esac
exec "$SS_TOP/${SS_BUILD:-build}/bin/$1" "\$@"
EOF
	chmod +x "fakebin/$1"
}
breakable ss-encode '*" --shard 1/3 "*'
touch break
env PATH="$d/fakebin:$PATH" sh "$sub" --partition=cpu >out
wait_jobs
[ -s db2/shard-0.db ] && [ -s db2/shard-2.db ] && [ ! -e db2/shard-1.states ] && [ ! -e db2/index.list ] ||
	fail "after a failed task: $(ls db2)"
ls db2 | grep -q '\.tmp' && fail "a failed task left a temporary file: $(ls db2)"
idx=$(sed -n 's/^index job //p' out)
[ "$(cat "stub/$idx.state")" = CANCELLED ] || fail "the index job after a failed task: $(cat "stub/$idx.state")"
# A stale index job of an older submission (without --kill-on-invalid-dep): pending forever.
echo PENDING >"stub/$idx.state"
echo DependencyNeverSatisfied >"stub/$idx.reason"
m0=$(mtime db2/shard-0.states) m2=$(mtime db2/shard-2.states)
rm break
: >stub/sbatch.log
sh "$sub" --partition=cpu >out
grep -q "^cancelled job $idx " out || fail "the stale index job $idx was not cancelled: $(cat out)"
grep -qx "$idx" stub/scancel.log || fail "scancel: $(cat stub/scancel.log)"
grep -q "^shard array (1) job" out || fail "resubmit: $(cat out)"
grep -q -- "--array=1 " stub/sbatch.log || fail "resubmit asked for other shards: $(cat stub/sbatch.log)"
wait_jobs
good_index db2
[ "$(mtime db2/shard-0.states)$(mtime db2/shard-2.states)" = "$m0$m2" ] || fail "finished shards were redone"
# Everything done: a resubmit asks for no shard, only the (up-to-date) tokens and index jobs.
: >stub/sbatch.log
sh "$sub" --partition=cpu >out
grep -q "every shard is up to date" out && ! grep -q shard.sbatch stub/sbatch.log || fail "up to date: $(cat out)"
wait_jobs
good_index db2

# 3. Resources: the defaults fit the 4-cpu, 8 GB partition (above); SHARD_OPTS asking for
# more is refused, and the refused sbatch cancels the tokens job it already submitted.
export DB=$d/db3
: >stub/scancel.log
set +e; SHARD_OPTS="--cpus-per-task=16 --mem=32G" sh "$sub" --partition=cpu >out 2>err; rc=$?; set -e
[ $rc -eq 1 ] || fail "submit.sh after a refused sbatch: exit $rc"
tok=$(sed -n 's/^tokens job //p' out)
[ -n "$tok" ] || fail "the tokens job id was not printed: $(cat out)"
grep -q "sbatch of the shard array (0-2) failed; cancelling $tok" err || fail "refused: $(cat err)"
grep -qx "$tok" stub/scancel.log || fail "tokens job $tok not cancelled: $(cat stub/scancel.log)"
wait_jobs
[ ! -e db3/slurm.jobs ] || fail "a failed submission recorded its jobs"
env STUB_REFUSE='index.sbatch$' SHARDS=2 sh "$sub" >out 2>err && fail "submit.sh: a refused index job passed"
grep -q "sbatch of the index failed; cancelling [0-9]* [0-9]*" err || fail "refused index: $(cat err)"
wait_jobs

# 4. Two index jobs at once (a slow ss-retrieve, so that they overlap): one good list.
export DB=$d/db4
cat >fakebin/ss-retrieve <<EOF
#!/bin/sh
case \$1 in build | stats | merge) sleep 0.5 ;; esac
"$SS_TOP/${SS_BUILD:-build}/bin/ss-retrieve" "\$@" || exit
case \$1 in build | stats | merge) sleep 1 ;; esac
exit 0
EOF
chmod +x fakebin/ss-retrieve
sh "$SS_TOP/pipelines/slurm/index.sbatch" tokens >/dev/null
for i in 0 1 2; do SLURM_ARRAY_TASK_ID=$i SLURM_CPUS_PER_TASK=1 sh "$SS_TOP/pipelines/slurm/shard.sbatch" >/dev/null; done
PATH=$d/fakebin:$PATH
i1=$(sbatch --parsable "$SS_TOP/pipelines/slurm/index.sbatch")
i2=$(sbatch --parsable "$SS_TOP/pipelines/slurm/index.sbatch")
wait_jobs
good_index db4
[ "$(cat "stub/$i1.state") $(cat "stub/$i2.state")" = "COMPLETED COMPLETED" ] ||
	fail "two index jobs at once: $(cat "stub/$i1.state") $(cat "stub/$i2.state"): $(cat ss-index-$i1.log ss-index-$i2.log)"

# The optional merge (MERGE=1): one index file that answers as the shards do.
DB=$d/db2 MERGE=1 sh "$SS_TOP/pipelines/slurm/index.sbatch" >/dev/null
[ -s db2/index.db ] || fail "MERGE=1: no db2/index.db"
ss-retrieve query -q --index db2/index.db -k 20 --query "document foxtrot" --ids >merged.ids
ss-retrieve query -q --index @db2/index.list -k 20 --query "document foxtrot" --ids >shards.ids
[ -s merged.ids ] && cmp -s merged.ids shards.ids || fail "merged index vs shards: $(diff merged.ids shards.ids)"

# 5. Answers as an array (WHAT=answers, answer.sbatch): 4 parts of 9 questions, merged in input
# order, byte-equal to one process's answers; a failed part is the only one resubmitted.
unset DB DOCS SHARDS CHUNK
n=0
for w in foxtrot alpha nothing-matches kilo bravo lima echo juliett india; do
	n=$((n + 1)); echo "{\"id\":\"q$n\",\"query\":\"the $w document\"}"
done >questions.jsonl
export QUESTIONS=$d/questions.jsonl INDEX=$d/db2/index.db MAX_TOKENS=6 K=3
OUT=$d/one PARTS=1 sh "$SS_TOP/pipelines/answer.sh" part 0
OUT=$d/one PARTS=1 sh "$SS_TOP/pipelines/answer.sh" merge
[ "$(wc -l <one/answers.jsonl)" -eq 9 ] || fail "one process: $(cat one/answers.jsonl)"
grep -q '"id":"q1","state":"picaso-r(' one/answers.jsonl || fail "q1 not from a composed state: $(head -1 one/answers.jsonl)"
breakable ss-decode '*"/parts/.2."*'
touch break
: >stub/sbatch.log
WHAT=answers OUT=$d/four PARTS=4 sh "$sub" --partition=cpu >out
grep -q "^answer array (0-3) job [0-9]" out && grep -q "^merge job [0-9]" out || fail "answers: $(cat out)"
wait_jobs
[ -s four/parts/0.jsonl ] && [ -s four/parts/3.jsonl ] && [ ! -e four/parts/2.jsonl ] && [ ! -e four/answers.jsonl ] ||
	fail "after a failed part: $(ls four four/parts)"
rm break
: >stub/sbatch.log
WHAT=answers OUT=$d/four PARTS=4 sh "$sub" --partition=cpu >out
grep -q "^answer array (2) job" out && grep -q -- "--array=2 " stub/sbatch.log || fail "resubmit: $(cat out)"
wait_jobs
cmp one/answers.jsonl four/answers.jsonl || fail "4 parts' answers differ from one process's"
echo ok
