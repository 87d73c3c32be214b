# A --prompt-file over 64 MiB (issue 32 item 14): refused by its size, before it is read;
# a sparse file, so the test writes nothing.
truncate -s 67108865 big.txt
ss-decode --model "$SS_FIXTURES/golden/models/t1-hf" --no-state --prompt-file big.txt -n 1
