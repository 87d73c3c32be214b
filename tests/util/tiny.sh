# tests/util/tiny.sh — sourced by CLI tests (set -eu, in their scratch directory): writes
# model/ (a random t1-shaped Mamba-2, build/gen/mkmodel) and tok.json (every byte one token,
# tests/util/bytetok.py), and exports SS_TOKENIZER, so that a test needs nothing of ../shared.
# Exits 77 (skipped) when mkmodel is not built.
mkmodel=$SS_TOP/${SS_BUILD:-build}/gen/mkmodel
[ -x "$mkmodel" ] || { echo "skipped: no $mkmodel (run make)"; exit 77; }
"$mkmodel" model --preset t1 >/dev/null
python3 "$SS_TOP/tests/util/bytetok.py" tok.json
SS_TOKENIZER=$PWD/tok.json
export SS_TOKENIZER
