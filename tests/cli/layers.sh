#!/bin/sh
# The include rules of lib/README.md (issue 33 item 1): a folder of lib/
# includes its own headers, the public ones (lib/ss*.h) and the internal
# headers of the folders before it in README's "Layers" line, never one
# after it; public headers include only public headers; tools/, bench/
# and gen/ include no internal header of lib/ (the plugin ABI excepted for
# kernels/ and bench/cuda.c, as README says). Includes are resolved as the
# compiler does: the including file's folder, then -I. -Ilib -Itools
# -Itests (-Ikernels for CUDA). Prints each broken rule as FILE: INCLUDE: RULE.
set -u
top=${SS_TOP:-.}
command -v python3 >/dev/null || { echo "no python3"; exit 77; }
cd "$top" || exit 1
python3 - <<'PY'
import os, re, sys
readme = open("lib/README.md").read()
m = re.search(r"^Layers, lowest first: (.+)$", readme, re.M)
layers = m.group(1).split()
rank = {l: i for i, l in enumerate(layers)}
for l in layers:
    if not os.path.isdir("lib/" + l):
        print("lib/README.md: layer %s has no folder" % l); sys.exit(1)
for d in os.listdir("lib"):
    if os.path.isdir("lib/" + d) and d not in rank:
        print("lib/%s: a folder that lib/README.md's Layers line does not name" % d); sys.exit(1)
plugin_abi = "lib/forward/device_plugin.h"
abi_users = re.compile(r"^(kernels/|bench/cuda\.c$)")
bad = 0
def resolve(f, inc):
    dirs = [os.path.dirname(f), ".", "lib", "tools", "tests"] + (["kernels"] if f.endswith((".cu", ".cuh")) else [])
    for d in dirs:
        p = os.path.normpath(os.path.join(d, inc))
        if os.path.isfile(p):
            return p
    return None
def folder(p):
    """the layer of a path under lib/ (None for a public header)."""
    parts = p.split("/")
    return parts[1] if len(parts) > 2 else None
for root in ("lib", "tools", "bench", "gen", "kernels"):
    for dp, dn, fn in os.walk(root):
        for n in fn:
            f = os.path.join(dp, n)
            if not re.search(r"\.(c|h|cu|cuh)$", n):
                continue
            for i, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
                mm = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not mm:
                    continue
                p = resolve(f, mm.group(1))
                if p is None:
                    print("%s:%d: %s: not found" % (f, i, mm.group(1))); bad += 1; continue
                if not p.startswith("lib/"):
                    continue
                to = folder(p)
                why = None
                if to is None:
                    if not re.match(r"lib/ss[\w]*\.h$", p):
                        why = "not a public header"
                elif root != "lib":
                    if not (p == plugin_abi and abi_users.match(f)):
                        why = "an internal header of lib/%s, outside lib/" % to
                else:
                    frm = folder(f)
                    if frm is None:
                        why = "a public header includes an internal one"
                    elif rank[to] > rank[frm]:
                        why = "lib/%s includes lib/%s, a layer above it" % (frm, to)
                if why:
                    print("%s:%d: %s: %s" % (f, i, mm.group(1), why)); bad += 1
sys.exit(1 if bad else 0)
PY
