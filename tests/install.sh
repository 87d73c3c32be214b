#!/bin/sh
# The install test (.ci/run): `make install` into a temporary PREFIX, then the main pipeline
# (tokenize, encode, index, retrieve, compose, decode) run from another directory with every
# SS_* variable unset and only the installed tools on PATH: the tools must find the installed
# tokenizer and default model ($(PREFIX)/share/ss) by themselves. Then `make uninstall` must
# leave no file behind. Extra arguments go to make (e.g. CUDA=off -j2).
# Usage: tests/install.sh [MAKE-ARGS...]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mktemp -d "${TMPDIR:-/tmp}/ss-prefix.XXXXXX")
work=$(mktemp -d "${TMPDIR:-/tmp}/ss-work.XXXXXX")
trap 'rm -rf "$prefix" "$work"' EXIT
fail() { echo "install test: FAIL: $*" >&2; exit 1; }

echo "install test: make install PREFIX=$prefix"
make --no-print-directory -s -C "$top" "$@" install PREFIX="$prefix" >"$work/install.log" 2>&1 ||
	{ tail -n 30 "$work/install.log"; fail "make install"; }
(cd "$prefix" && find . -type f | sort) >"$work/installed"
echo "install test: $(wc -l <"$work/installed") files installed:"
sed 's/^/    /' "$work/installed"
for f in bin/ss-encode share/man/man1/ss-encode.1 share/man/man5/ss-states.5 share/ss/tokenizer.json \
	share/ss/model/config.json share/ss/model/model.safetensors share/ss/model/tokenizer.json share/ss/NOTICE \
	share/ss/recall-model/model.safetensors share/ss/recall-model/tokenizer.json \
	share/bash-completion/completions/ss-encode share/bash-completion/completions/ss-retrieve; do
	grep -qx "./$f" "$work/installed" || fail "$f not installed"
done

# The main pipeline from another directory: no SS_* variable, no source tree on PATH.
for v in $(env | sed -n 's/^\(SS_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
cd "$work"
PATH=$prefix/bin:/usr/bin:/bin
export PATH
ss-encode --help | grep -qF "$prefix/share/ss/model" || fail "ss-encode --help does not name $prefix/share/ss"
got=$(bash -c '. "$1" && COMP_WORDS=(ss-encode --thr) COMP_CWORD=1 && _ss_complete && echo "${COMPREPLY[*]}"' \
	_ "$prefix/share/bash-completion/completions/ss-encode")
[ "$got" = --threads ] || fail "the installed bash completion of ss-encode --thr gave '$got'"
MANPATH=$prefix/share/man man -w ss-encode | grep -qF "$prefix/share/man/man1/ss-encode.1" ||
	fail "man ss-encode does not find the installed page"
head -n 120 "$prefix/share/ss/wikitext-2-raw.test.hf-crlf.raw" >wiki.txt
q='Du Fu was a Chinese poet'
set -x
ss-tokenize -q --chunk 256 -o corpus.tokens wiki.txt
ss-encode -q -o corpus.states corpus.tokens
ss-retrieve build -q --index index.db corpus.tokens corpus.states
ss-retrieve query -q --index index.db -k 5 --query "$q" --ids >retrieved.tsv
ss-retrieve query -q --index index.db -k 5 --query "$q" | ss-compose --mode picaso-r |
	ss-decode --prompt "$q" --max-tokens 16 >continuation.txt
set +x
echo "install test: $(ss-cat --meta corpus.tokens | wc -l) chunks indexed; retrieved (most relevant last):"
sed 's/^/    /' retrieved.tsv
[ "$(wc -l <retrieved.tsv)" -eq 5 ] || fail "not 5 chunks retrieved"
grep -q 'wiki.txt:[0-9]*#[0-9]*' retrieved.tsv || fail "retrieved ids"
[ -s continuation.txt ] || fail "empty continuation"
echo "install test: continuation: $(tr '\r\n' '  ' <continuation.txt | LC_ALL=C tr -c '[:print:]' '?')"

echo "install test: make uninstall PREFIX=$prefix"
make --no-print-directory -s -C "$top" "$@" uninstall PREFIX="$prefix" >"$work/uninstall.log" 2>&1 ||
	{ cat "$work/uninstall.log"; fail "make uninstall"; }
left=$(cd "$prefix" && find . ! -type d | sort)
[ -z "$left" ] || fail "left behind after uninstall: $left"
echo "install test: uninstall left no file; directories left: $(cd "$prefix" && find . -mindepth 1 -type d | sort | tr '\n' ' ')"
echo "install test: ok"
