#!/bin/sh
# The main job on its bundled default: tokenize the WikiText-2 raw test split into 256-token
# chunks (one document per line), check the stream decodes back to the text, and report.
# Overridable: DOCS=file, TOKENIZER=tokenizer.json. Run through `make demo`.
set -eu
: "${SS_SHARED:=$(cd "$(dirname "$0")/../.." && pwd)/shared}"
: "${DOCS:=$SS_SHARED/data/corpora/wikitext-2-raw.test.hf-crlf.raw}"
: "${SS_BUILD:=build}"
PATH="$(cd "$(dirname "$0")/.." && pwd)/$SS_BUILD/bin:$PATH"
out=${OUT:-$SS_BUILD/demo}
mkdir -p "$out"
[ -n "${TOKENIZER:-}" ] && export SS_TOKENIZER="$TOKENIZER"
start=$(date +%s.%N)
ss-tokenize --chunk 256 -o "$out/corpus.tokens" "$DOCS"
end=$(date +%s.%N)
n=$(ss-cat --meta "$out/corpus.tokens" | wc -l)
ntok=$(ss-cat "$out/corpus.tokens" | sed -n 's/.*"n_tokens":\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s}')
echo "demo: $DOCS"
echo "demo: $n chunks, $ntok tokens, $(du -h "$out/corpus.tokens" | cut -f1) on disk, $(echo "$end - $start" | bc) s to tokenize"
echo "demo: first chunk:"
ss-cat -n 1 "$out/corpus.tokens"
