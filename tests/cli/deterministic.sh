#!/bin/sh
# ss-encode gives a document the same state bytes whatever --threads, --batch and --shard
# (that is, whatever documents share its forward passes): 14 documents of 3 to 1,300 tokens
# (longer than a 512-token pass) encoded with threads 1 and 2, batches 1, 3, 4 and 8, and in
# 3 shards; the streams are compared byte for byte, the shards record by record.
# The same by default, without --deterministic (prefill's projections through the project's own
# row-invariant kernel, issue 50: the same state bytes as --deterministic), with that kernel held
# to AVX2 (SS_GEMM=avx2: the same bytes again) and to C (SS_GEMM=c); and with --deterministic
# through the BLAS (SS_GEMM=blas: 256 x 256 sgemm calls); bf16 and q8_0 matrices the same
# bytes by default and held to AVX2.
# Self-contained: a random model and a byte-level tokenizer (tests/util/tiny.sh).
# Run by tests/run from the repo root (SS_TOP, PATH with build/bin).
set -eu
LC_ALL=C; export LC_ALL
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }

. "$SS_TOP/tests/util/tiny.sh"
python3 - <<'PY'
import random
r = random.Random(7)
words = "state space model scan token shard batch thread corpus index query".split()
with open("docs.txt", "w") as f:
    for n in (3, 40, 700, 9, 130, 1300, 64, 65, 255, 256, 257, 511, 513, 90):
        f.write(" ".join(r.choice(words) for _ in range(n // 6 + 1))[:n] + "\n")
PY
ss-tokenize -q --chunk 2000 -o docs.tok docs.txt
[ "$(ss-cat docs.tok | wc -l)" -eq 14 ] || fail "tokenized: $(ss-cat docs.tok | wc -l) documents"
enc() { ss-encode -q --deterministic --model model "$@" docs.tok; }
enc --threads 1 --batch 1 -o ref.st
for tb in "2 1" "1 4" "2 4" "2 3" "2 8"; do
	set -- $tb
	enc --threads "$1" --batch "$2" -o t$1b$2.st
	cmp -s ref.st t$1b$2.st || fail "--threads $1 --batch $2: not the bytes of --threads 1 --batch 1"
done
# by default (no --deterministic), per kernel choice; "own" is --deterministic's bytes
for g in own avx2 c; do
	SS_GEMM=$g ss-encode -q --model model --threads 1 --batch 1 -o $g.st docs.tok
	for tb in "2 1" "2 4" "2 3"; do
		set -- $tb
		SS_GEMM=$g ss-encode -q --model model --threads "$1" --batch "$2" -o $g$1$2.st docs.tok
		cmp -s $g.st $g$1$2.st ||
			fail "SS_GEMM=$g --threads $1 --batch $2: not the bytes of --threads 1 --batch 1"
	done
done
cmp -s own.st ref.st || fail "by default: not the bytes of --deterministic"
# AVX2's kernels sum in AVX-512's order (ops/linear_f32.h)
cmp -s own.st avx2.st || fail "SS_GEMM=avx2: not the bytes of the default kernel"
# bf16 matrices (widened in the kernels' registers, the AVX2 panels included) and q8_0
# (ss_linear_q8_0_cpu: every kernel's bytes the same): AVX2 and the default agree, batched
for w in bf16 q8_0; do
	ss-encode -q --model model --weights-dtype $w --threads 1 --batch 1 -o $w.st docs.tok
	SS_GEMM=avx2 ss-encode -q --model model --weights-dtype $w --threads 2 --batch 4 -o ${w}avx2.st docs.tok
	cmp -s $w.st ${w}avx2.st || fail "--weights-dtype $w: SS_GEMM=avx2 --threads 2 --batch 4 differs"
done
SS_GEMM=blas enc --threads 1 --batch 1 -o blas.st
for tb in "2 1" "2 4"; do
	set -- $tb
	SS_GEMM=blas enc --threads "$1" --batch "$2" -o blas$1$2.st
	cmp -s blas.st blas$1$2.st ||
		fail "SS_GEMM=blas --deterministic --threads $1 --batch $2: not the bytes of 1 and 1"
done
# records without their byte offsets, sorted by id
recs() { ss-cat --full "$@" | sed 's/"offset":[0-9]*,//' | sort; }
for i in 0 1 2; do enc --threads 2 --batch 2 --shard $i/3 -o s$i.st; done
recs ref.st >ref.json
recs s0.st s1.st s2.st >shards.json
[ "$(wc -l <shards.json)" -eq 14 ] || fail "the shards hold $(wc -l <shards.json) records"
cmp -s ref.json shards.json || fail "the 3 shards differ from the whole encode"
echo ok
