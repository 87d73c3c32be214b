# A pairs file over 64 MiB (issue 32 item 14): every pair is held in memory for every state,
# so the whole file is bounded, not only its lines (16 MiB each). Sparse, refused by its size.
truncate -s 67108865 big.jsonl
ss-score --model "$SS_FIXTURES/golden/models/t1-hf" --no-state --pairs big.jsonl
