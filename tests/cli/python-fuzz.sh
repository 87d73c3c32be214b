# The Python reader's fuzz target (tests/fuzz/pyreader.py) for 8 seconds from seed 48 over the
# C fuzzers' stream and q8 seeds: only FormatError escapes, under a 1 GiB address-space margin,
# no input over 5 s, what is read finite and of its dims' shapes; every 10th input also given to
# ss-cat, which must agree on its validity. PYFUZZ_SECONDS=N runs it longer.
set -eu
. "$SS_TOP/tests/util/golden.sh"
. "$SS_TOP/tests/util/pyreader.sh"
"$py" "$SS_TOP/tests/fuzz/pyreader.py" --seconds "${PYFUZZ_SECONDS:-8}" --seed 48 --out "$d" \
	--ss-cat "$(command -v ss-cat)" --diff 10 "$SS_TOP/tests/fuzz/seeds/stream" "$SS_TOP/tests/fuzz/seeds/q8" ||
	fail "pyreader fuzz target"
