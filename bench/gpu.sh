#!/bin/sh
# bench/gpu.sh — on a GPU machine, in one call: build with CUDA, run the CPU/GPU
# parity tests and the tools on the GPU against the golden fixtures, and time
# encode and decode of random mamba2-130m and mamba2-2.7b-shaped models in bf16
# beside transformers' Mamba2 on the same GPU and shapes, with the bf16 GEMM
# floor (bench/cuda prints the floors; bench/gpu-notes.md explains them and
# states the goals), where the time goes (SS_CUDA_PROFILE=1: each op's device
# time) and one long document a call. Each step runs under a time limit, so
# one broken step costs its limit, not the call.
# Figures only; exit 1 only if the build or the parity tests fail.
# usage: bench/gpu.sh [PRESET...]   (default: mamba2-130m mamba2-2.7b)
#   env: SS_BUILD (build), BUILD (1; 0: use the build already in $SS_BUILD,
#        made elsewhere with CUDA=on), LOG (a folder: each step's output is
#        also written to LOG/STEP.log), DOCS (128; 2.7b: BIG_DOCS, 32),
#        TOKENS (512), PER_CALL (16), STEPS (64), BATCHES (1,64), REPS (2
#        timed rounds; 2.7b: 1), LONG (8192: 130m's one-long-document case),
#        PEER_DOCS (32), PEAK_TFLOPS (989), PEAK_TBPS (3.35; 4.8 when the GPU
#        is an H200), STEP_LIMIT (180 s a step)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
: "${SS_BUILD:=build}" "${BUILD:=1}" "${LOG:=}" "${DOCS:=128}" "${BIG_DOCS:=32}" "${TOKENS:=512}"
: "${REPS:=2}" "${LONG:=8192}"
: "${PER_CALL:=16}" "${STEPS:=64}" "${BATCHES:=1,64}" "${PEER_DOCS:=32}" "${PEAK_TFLOPS:=989}"
: "${STEP_LIMIT:=180}"
presets=${*:-mamba2-130m mamba2-2.7b}
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
case $gpu in *H200*) : "${PEAK_TBPS:=4.8}" ;; *) : "${PEAK_TBPS:=3.35}" ;; esac
[ -n "$LOG" ] && mkdir -p "$LOG"

# step NAME LIMIT CMD...: runs CMD under LIMIT seconds, its output on stdout
# and in $LOG/NAME.log; returns CMD's status (124: over the limit).
step() {
	name=$1 limit=$2; shift 2
	echo "== $name ($(date +%T), limit ${limit}s)"
	if [ -n "$LOG" ]; then
		{ timeout -k 5 "$limit" "$@" 2>&1; echo $? >"$tmp/rc"; } | tee "$LOG/$name.log"
	else
		{ timeout -k 5 "$limit" "$@" 2>&1; echo $? >"$tmp/rc"; }
	fi
	rc=$(cat "$tmp/rc")
	[ "$rc" -eq 0 ] || echo "== $name: exit $rc"
	return "$rc"
}

tmp=${TMPDIR:-/tmp}/ss-gpu-bench.$$
mkdir -p "$tmp"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
echo "gpu: ${gpu:-none found by nvidia-smi}"

if [ "$BUILD" != 0 ]; then
	step build 600 make -j"$(nproc)" CUDA=on all >/dev/null || exit 1
fi
# The models are written on the CPU while the parity tests run.
for p in $presets; do
	"$SS_BUILD"/gen/mkmodel "$tmp/$p" --preset "$p" --dtype bf16 >"$tmp/$p.mk" 2>&1 &
done

status=0
step parity "$STEP_LIMIT" "$SS_BUILD"/tests/test_cuda_parity || status=1
step tools "$STEP_LIMIT" env SS_BUILD="$SS_BUILD" tests/run cli/device-cuda || status=1
wait
for p in $presets; do
	docs=$DOCS reps=$REPS
	case $p in *2.7b*) docs=$BIG_DOCS reps=1 ;; esac
	if [ ! -f "$tmp/$p/config.json" ]; then
		echo "== $p: mkmodel failed: $(tail -n 1 "$tmp/$p.mk")"
		continue
	fi
	step "$p-ours" "$STEP_LIMIT" "$SS_BUILD"/bench/cuda -m "$tmp/$p" -d "$docs" -n "$TOKENS" -b "$PER_CALL" \
		-B "$BATCHES" -s "$STEPS" -r "$reps" -P "$PEAK_TFLOPS" -W "$PEAK_TBPS"
	step "$p-hf" "$STEP_LIMIT" python3 bench/peers/hf_mamba2.py "$tmp/$p" --docs "$PEER_DOCS" \
		--tokens "$TOKENS" --per-call "$PER_CALL" --batches "$BATCHES" --steps "$STEPS"
	# where the time goes: each op's device time, one call of encode and a few decode steps
	step "$p-profile" "$STEP_LIMIT" env SS_CUDA_PROFILE=1 "$SS_BUILD"/bench/cuda -m "$tmp/$p" \
		-d "$PER_CALL" -n "$TOKENS" -b "$PER_CALL" -B 1 -s 16 -r 1 -P "$PEAK_TFLOPS" -W "$PEAK_TBPS"
	# one long document a call: the sequential scan's parallelism is the heads' rows alone
	case $p in *130m*)
		step "$p-long" "$STEP_LIMIT" "$SS_BUILD"/bench/cuda -m "$tmp/$p" -d 2 -n "$LONG" -b 1 -B "" \
			-r 1 -P "$PEAK_TFLOPS" -W "$PEAK_TBPS" ;;
	esac
	rm -rf "${tmp:?}/$p"
done
exit $status
