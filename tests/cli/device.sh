# --device cpu|cuda|auto of the model tools, and the CUDA plugin staying out of
# everything that does not ask for it. On a machine without a GPU: auto falls
# back to the CPU silently with identical output, and cuda fails in one line.
# Run by tests/run from the repo root.
set -eu
. "$SS_TOP/tests/util/golden.sh"

# No binary links CUDA: the plugin is only ever dlopen()ed.
for t in ss-compose ss-retrieve ss-encode ss-decode ss-score ss-tokenize ss-cat; do
	ldd "$SS_TOP/$SS_BUILD/bin/$t" >"$d/ldd"
	! grep -E 'libcuda\.so|libcudart|libcublas|libss_cuda' "$d/ldd" || fail "$t links CUDA"
done

ss-tokenize -q --whole "$G/t1/c3/text.txt" >"$d/c3.tok"
ids=$(ss-cat --full "$d/c3.tok" | python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.readline())["tokens"][:40])))')

# Which device does auto pick here?
ss-encode -v --model "$T1" --device auto "$d/c3.tok" >/dev/null 2>"$d/auto.err"
if grep -q 'device cpu' "$d/auto.err"; then gpu=0; else gpu=1; fi

# --device cpu works; auto (the default) is the CPU here, byte for byte.
ss-encode --model "$T1" --device cpu "$d/c3.tok" >"$d/cpu.st"
ss-decode --model "$T1" --device cpu --no-state --ids --max-tokens 8 --prompt-tokens "$ids" >"$d/cpu.dec"
ss-score --model "$T1" --device cpu --no-state --query-tokens "$ids" --continuation-tokens 1,2,3 >"$d/cpu.score"
[ -s "$d/cpu.st" ] && [ -s "$d/cpu.dec" ] && [ -s "$d/cpu.score" ] || fail "--device cpu: empty output"
if [ "$gpu" -eq 0 ]; then
	ss-encode --model "$T1" "$d/c3.tok" >"$d/auto.st"
	cmp -s "$d/cpu.st" "$d/auto.st" || fail "encode: --device auto differs from cpu"
	ss-decode --model "$T1" --device auto --no-state --ids --max-tokens 8 --prompt-tokens "$ids" >"$d/auto.dec"
	cmp -s "$d/cpu.dec" "$d/auto.dec" || fail "decode: --device auto differs from cpu"
	ss-score --model "$T1" --device auto --no-state --query-tokens "$ids" --continuation-tokens 1,2,3 >"$d/auto.score"
	cmp -s "$d/cpu.score" "$d/auto.score" || fail "score: --device auto differs from cpu"
	# auto falls back silently: nothing on stderr
	ss-encode --model "$T1" --device auto "$d/c3.tok" 2>"$d/err" >/dev/null
	[ ! -s "$d/err" ] || fail "auto printed on stderr: $(cat "$d/err")"
	# cuda without a GPU: one line, exit 1, for each tool
	expect 1 'ss-encode: --device cuda: ' ss-encode --model "$T1" --device cuda "$d/c3.tok"
	expect 1 'ss-decode: --device cuda: ' ss-decode --model "$T1" --device cuda --no-state --prompt-tokens 1,2
	expect 1 'ss-score: --device cuda: ' ss-score --model "$T1" --device cuda --no-state --query-tokens 1 --continuation-tokens 2
	expect 1 'ss-encode: --device cuda:1: ' ss-encode --model "$T1" --device cuda:1 "$d/c3.tok"
fi

# A plugin that cannot be loaded: cuda fails in one line, auto falls back silently.
SS_CUDA_PLUGIN=$d/none.so expect 1 'cannot load the CUDA plugin' ss-encode --model "$T1" --device cuda "$d/c3.tok"
printf 'not an ELF file\n' >"$d/bad.so"
SS_CUDA_PLUGIN=$d/bad.so expect 1 'cannot load the CUDA plugin' ss-score --model "$T1" --device cuda --no-state --query-tokens 1 --continuation-tokens 2
SS_CUDA_PLUGIN=$d/none.so ss-encode --model "$T1" --device auto "$d/c3.tok" >"$d/fb.st" 2>"$d/err"
[ ! -s "$d/err" ] || fail "auto with a missing plugin printed: $(cat "$d/err")"
cmp -s "$d/cpu.st" "$d/fb.st" || fail "auto with a missing plugin differs from cpu"
# A plugin compiled from other headers than this libss (a stale build) is refused at load,
# naming the type whose layout differs; one from these headers gets as far as the GPU
# count. Both are fakes built here with the C compiler from lib/forward/device_plugin.h.
cat >"$d/fake.c" <<'EOF'
#include <string.h>
#include "forward/device_plugin.h"
static ss_cuda_layout layout[] = SS_CUDA_LAYOUT_INIT;
static ss_cuda_api api;
static int no_gpu(void) { return 0; }
static const char *why(void) { return "fake plugin"; }
const ss_cuda_api *ss_cuda_plugin(uint32_t abi)
{
	api.abi = SS_CUDA_ABI, api.size = sizeof api, api.build = "fake", api.layout = layout;
	api.device_count = no_gpu, api.last_error = why;
	for (ss_cuda_layout *l = layout; STALE && l->what; l++)
		if (!strcmp(l->what, "sizeof(ss_state)"))
			l->value = sizeof(ss_state) + 8;
	return abi == SS_CUDA_ABI ? &api : NULL;
}
EOF
${CC:-cc} -shared -fPIC -DSTALE=0 -I"$SS_TOP/lib" -o "$d/fresh.so" "$d/fake.c"
${CC:-cc} -shared -fPIC -DSTALE=1 -I"$SS_TOP/lib" -o "$d/stale.so" "$d/fake.c"
SS_CUDA_PLUGIN=$d/stale.so expect 1 'stale.so: built from other headers: sizeof(ss_state) is' \
	ss-encode --model "$T1" --device cuda "$d/c3.tok"
SS_CUDA_PLUGIN=$d/fresh.so expect 1 'no CUDA GPU (fake plugin)' ss-encode --model "$T1" --device cuda "$d/c3.tok"
# Without the CUDA driver, auto never even tries the plugin (loading the real one
# costs ~1 s and ~180 MB: issue 12); the loader's own log says what was opened.
if ! ldconfig -p | grep -q 'libcuda\.so\.1 '; then
	SS_CUDA_PLUGIN=$d/bad.so LD_DEBUG=files ss-decode --model "$T1" --device auto --no-state --ids \
		--max-tokens 1 --prompt-tokens 1,2 >/dev/null 2>"$d/ld.log"
	! grep -q 'file=.*bad\.so' "$d/ld.log" || fail "auto without a CUDA driver tried the plugin"
fi

# Bad names are usage errors (exit 2), before the model is loaded.
set +e
ss-encode --model /nonexistent --device gpu "$d/c3.tok" >/dev/null 2>"$d/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "--device gpu: exit $rc, expected 2"
grep -q "is not cpu, cuda, cuda:N or auto" "$d/err" || fail "--device gpu: $(cat "$d/err")"

# The help of each model tool names the option.
for t in ss-encode ss-decode ss-score; do
	$t --help | grep -q -- '--device D' || fail "$t --help lacks --device"
done
echo "device: ok (gpu=$gpu)"
