#!/bin/sh
# pipelines/answer.sh — retrieval-augmented answers to a file of questions, in PARTS parts that
# can run anywhere (Slurm array tasks: pipelines/slurm/answer.sbatch), then merged in input order.
#
#   answer.sh part I     the questions of part I (lines i with i % PARTS == I, 0-based) : each
#                        retrieves its top K over INDEX (one ss-retrieve query batch), the K
#                        states are composed (ss-compose --mode MODE), and every question is
#                        decoded from its composed state in one ss-decode --prompts batch;
#                        writes OUT/parts/I.jsonl whole or not at all
#   answer.sh merge      OUT/answers.jsonl: the parts' lines in the questions' order (every part
#                        must be there: `answer.sh todo` lists the missing ones)
#   answer.sh todo       the parts whose answers are missing or older than QUESTIONS or INDEX
#
# Environment: QUESTIONS (JSON lines {"id", "query"}, as ss-retrieve query reads them on stdin;
# ids plain file names), INDEX, MODEL (default: the tools' default model), OUT (directory),
# PARTS (4), K (4), MODE (picaso-r), MAX_TOKENS (16), THREADS (the tools' default),
# RETRIEVE_OPTS (ss-retrieve query's options; default --literal: a question is text, its quotes
# are not phrase syntax; e.g. "--operator and" for that instead).
# A question whose query matches no document is decoded from the zero state (no context: the
# state of no tokens, ss-encode --concat of nothing).
# The answers (ss-decode --jsonl lines {"id", "text", "tokens", "finish_reason"}; greedy) do not
# depend on PARTS: ss-decode's outputs are the same bytes whatever its batch, so one part and
# four give byte-equal answers (tests/cli/slurm.sh).
set -eu
: "${QUESTIONS:?set QUESTIONS (JSON lines {\"id\", \"query\"})}" "${INDEX:?set INDEX}" "${OUT:?set OUT}"
: "${PARTS:=4}" "${K:=4}" "${MODE:=picaso-r}" "${MAX_TOKENS:=16}" "${RETRIEVE_OPTS=--literal}"
case $PARTS in '' | *[!0-9]* | 0) echo "answer.sh: PARTS=$PARTS is not a positive integer" >&2; exit 2 ;; esac
model=${MODEL:+--model $MODEL}
threads=${THREADS:+--threads $THREADS}
mkdir -p "$OUT/parts"

case ${1:-} in
part)
	i=${2:?answer.sh part I}
	case $i in *[!0-9]*) echo "answer.sh: part '$i' is not a number" >&2; exit 2 ;; esac
	[ "$i" -lt "$PARTS" ] || { echo "answer.sh: part $i of $PARTS does not exist" >&2; exit 2; }
	tmp=$(mktemp -d "$OUT/parts/.$i.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	awk -v n="$PARTS" -v i="$i" '(NR - 1) % n == i' "$QUESTIONS" >"$tmp/questions.jsonl"
	mkdir "$tmp/retrieved" "$tmp/composed"
	# shellcheck disable=SC2086 # a list of options
	ss-retrieve query -q --index "$INDEX" -k "$K" $RETRIEVE_OPTS --empty-ok --out-dir "$tmp/retrieved" \
		<"$tmp/questions.jsonl"
	# The prompts: each question with its composed state (none when nothing was retrieved).
	python3 - "$tmp" <<-'EOF' >"$tmp/prompts.jsonl"
	import json, os, sys
	tmp = sys.argv[1]
	for line in open(os.path.join(tmp, "questions.jsonl"), encoding="utf-8"):
	    q = json.loads(line)
	    p = {"id": q["id"], "prompt": q["query"]}
	    f = os.path.join(tmp, "retrieved", q["id"] + ".states")
	    p["state"] = os.path.join(tmp, "composed", q["id"] + ".state") \
	        if os.path.exists(f) and os.path.getsize(f) > 0 else os.path.join(tmp, "zero.state")
	    print(json.dumps(p, ensure_ascii=False))
	EOF
	# shellcheck disable=SC2086 # options or nothing
	ss-encode -q $model --concat --id none -o "$tmp/zero.state" </dev/null # the zero state
	for f in "$tmp"/retrieved/*.states; do
		[ -s "$f" ] || continue # nothing retrieved
		id=$(basename "$f" .states)
		ss-compose -q --mode "$MODE" -o "$tmp/composed/$id.state" "$f"
	done
	# shellcheck disable=SC2086 # options or nothing
	ss-decode -q $model $threads --prompts "$tmp/prompts.jsonl" --jsonl --greedy \
		--max-tokens "$MAX_TOKENS" -o "$OUT/parts/$i.jsonl"
	;;
merge)
	for i in $(seq 0 $((PARTS - 1))); do
		[ -f "$OUT/parts/$i.jsonl" ] || { echo "answer.sh: $OUT/parts/$i.jsonl is missing (answer.sh todo)" >&2; exit 1; }
	done
	# Question j's answer is line j / PARTS of part j % PARTS.
	awk -v n="$PARTS" -v dir="$OUT/parts" '
		{ p = (NR - 1) % n; f = dir "/" p ".jsonl"
		  if ((getline line < f) <= 0) { print "answer.sh: " f ": fewer answers than questions" > "/dev/stderr"; exit 1 }
		  print line }
		END { for (p = 0; p < n; p++) if ((getline line < (dir "/" p ".jsonl")) > 0) {
			print "answer.sh: " dir "/" p ".jsonl: more answers than questions" > "/dev/stderr"; exit 1 } }
	' "$QUESTIONS" >"$OUT/answers.jsonl.tmp"
	mv -f "$OUT/answers.jsonl.tmp" "$OUT/answers.jsonl"
	;;
todo)
	for i in $(seq 0 $((PARTS - 1))); do
		f=$OUT/parts/$i.jsonl
		if [ ! -f "$f" ] || [ "$QUESTIONS" -nt "$f" ] || [ "$INDEX" -nt "$f" ]; then echo "$i"; fi
	done
	;;
*)
	echo "usage: answer.sh part I | merge | todo   (environment: see the header)" >&2
	exit 2
	;;
esac
