#!/bin/sh
# Every path a comment cites exists (issue 33 item 2): in the comments of
# the sources (C, CUDA, shell, Python, make, gnuplot), a token that
# names a file of this tree (it starts with one of its top-level folders,
# or ends in .md) must resolve from the repository root or from the citing
# file's folder; a citation of ../shared/PATH must exist in $SS_SHARED
# (checked when it is set). A program is cited by its source's name less
# .c (gen/mkrecall), files by a glob (lib/train/*.c). Upstream files
# (mamba_ssm modules/mamba2.py, zstd's tests/cli-tests) and placeholders
# (tests/cli/TOOL/CASE.sh) are not checked.
# Prints each dangling citation as FILE:LINE: PATH.
set -u
top=${SS_TOP:-.}
command -v python3 >/dev/null || { echo "no python3"; exit 77; }
cd "$top" || exit 1
# the tracked files; in a copy without .git (git archive), every file outside build/ and dot folders
if [ -e .git ] && command -v git >/dev/null; then
	git ls-files -z
else
	find . -path ./build -prune -o -path "./.*" -prune -o -type f -print0 | sed -z "s|^\./||"
fi | python3 -c '
import glob, os, re, sys
shared = os.environ.get("SS_SHARED") or ""
files = [f for f in sys.stdin.read().split("\0") if f]
tops = sorted({f.split("/")[0] for f in files if "/" in f})
src = re.compile(r"\.(c|h|cu|cuh|sh|py|mk|gp)$|(^|/)Makefile$|^tests/(run|cli-case|man-examples)$")
skip = re.compile(r"^(data|tests/fixtures|tests/fuzz/seeds|tests/fuzz/crashes)/")
tok = re.compile(r"(?<![\w./*-])((?:\.\./shared/)?[\w.*-]+(?:/[\w.*-]+)*)")
placeholder = re.compile(r"(^|/)([A-Z][A-Z_]*(/|$)|[A-Z][A-Z_]*\.(sh|c|1)$|ss-foo\.\d$)")
bad = 0
def comments(path, text):
    """(line, comment text) of each comment line."""
    out = []
    if re.search(r"\.(c|h|cu|cuh)$", path):
        for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S):
            line = text.count("\n", 0, m.start()) + 1
            for i, l in enumerate(m.group(0).split("\n")):
                out.append((line + i, l))
    else:
        for i, l in enumerate(text.split("\n")):
            m = re.search(r"(^|\s)#(?![!{])(.*)", l)
            if m:
                out.append((i + 1, m.group(2)))
    return out
for f in files:
    if not src.search(f) or skip.match(f) or not os.path.isfile(f):
        continue
    text = open(f, encoding="utf-8", errors="replace").read()
    for line, c in comments(f, text):
        for m in tok.finditer(c):
            p = m.group(1).rstrip(".")
            if placeholder.search(p):
                continue
            if p.startswith("../shared/"):
                if shared and not os.path.exists(os.path.join(shared, p[len("../shared/"):])):
                    print("%s:%d: %s (not in %s)" % (f, line, p, shared)); bad += 1
                continue
            if c[:m.start()].rstrip().endswith("\x27s"):
                continue # a file of another project, named with its possessive
            first = p.split("/")[0]
            ours = ("/" in p and first in tops) or (p.endswith(".md") and len(p) > 3)
            if not ours:
                continue
            # a file or folder, a program built from p.c (gen/mkrecall), a glob (lib/train/*.c)
            if any(glob.glob(q) or os.path.exists(q + ".c") for q in (p, os.path.join(os.path.dirname(f), p))):
                continue
            print("%s:%d: %s" % (f, line, p)); bad += 1
print("%d dangling citation(s)" % bad)
sys.exit(1 if bad else 0)
'
