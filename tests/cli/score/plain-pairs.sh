# Pairs given as plain lines: the error shows the JSON line wanted.
printf 'what is x\n' | ss-score --model "$SS_FIXTURES/golden/models/t1-hf" --no-state --pairs -
