# A prompt over 64 MiB from a pipe (issue 32 item 14): refused after 64 MiB + 1 bytes.
head -c 67108865 /dev/zero | ss-decode --model "$SS_FIXTURES/golden/models/t1-hf" --no-state --prompt-file - -n 1
