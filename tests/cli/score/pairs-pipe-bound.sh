# Pairs from a pipe (issue 32 item 14): counted as read, refused past 64 MiB; here blank
# lines of 1000 spaces, which a reader without the bound reads to the end (exit 0).
yes "$(printf '%1000s' '')" | head -c 67108865 | ss-score --model "$SS_FIXTURES/golden/models/t1-hf" --no-state --pairs -
