# A --prompts file over 64 MiB (issue 32 item 14): every prompt is held in memory, so the
# whole file is bounded, not only its lines (16 MiB each). Sparse, refused by its size.
truncate -s 67108865 big.jsonl
ss-decode --model "$SS_FIXTURES/golden/models/t1-hf" --no-state --prompts big.jsonl
