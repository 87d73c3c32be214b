#!/bin/sh
# bench/gpu.sh — on a GPU machine, in one call: build with CUDA, run the CPU/GPU
# parity tests, and time encode and decode of random mamba2-130m and
# mamba2-2.7b-shaped models in bf16 beside transformers' Mamba2 on the same
# GPU and shapes, with the bf16 GEMM floor (bench/cuda prints the floors;
# bench/gpu-notes.md explains them and states the goals).
# Figures only; exit 1 only if the build or the parity tests fail.
# usage: bench/gpu.sh [PRESET...]   (default: mamba2-130m mamba2-2.7b)
#   env: DOCS (256), TOKENS (512), PER_CALL (16), STEPS (64), BATCHES (1,64),
#        SS_BUILD (build), PEAK_TFLOPS (989), PEAK_TBPS (3.35; H200: 4.8)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
: "${SS_BUILD:=build}" "${DOCS:=256}" "${TOKENS:=512}" "${PER_CALL:=16}" "${STEPS:=64}"
: "${BATCHES:=1,64}" "${PEAK_TFLOPS:=989}" "${PEAK_TBPS:=3.35}"
presets=${*:-mamba2-130m mamba2-2.7b}

echo "== build (CUDA=on)"
make -j"$(nproc)" CUDA=on all >/dev/null
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

echo "== parity"
SS_BUILD=$SS_BUILD tests/run ops forward cuda_parity device

tmp=${TMPDIR:-/tmp}/ss-gpu-bench.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for p in $presets; do
	echo "== $p (bf16)"
	"$SS_BUILD"/gen/mkmodel "$tmp/$p" --preset "$p" --dtype bf16 >/dev/null
	"$SS_BUILD"/bench/cuda -m "$tmp/$p" -d "$DOCS" -n "$TOKENS" -b "$PER_CALL" -B "$BATCHES" \
		-s "$STEPS" -P "$PEAK_TFLOPS" -W "$PEAK_TBPS" || echo "bench/cuda: exit $?"
	if python3 -c 'import torch, transformers' 2>/dev/null; then
		python3 bench/peers/hf_mamba2.py "$tmp/$p" --docs "$DOCS" --tokens "$TOKENS" \
			--per-call "$PER_CALL" --batches "$BATCHES" --steps "$STEPS" || echo "hf peer: exit $?"
	else
		echo "hf: skipped (torch/transformers not importable)"
	fi
	rm -rf "${tmp:?}/$p"
done
