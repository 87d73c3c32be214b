# ss-encode -v into a log (stderr not a terminal): plain progress lines (no carriage return or
# escape), with tokens/s and, the input being a file, the share done and the time left; one
# document is "1 document".
printf 'one line\n' > one.txt
SS_PROGRESS_SECONDS=0 ss-encode -v --device cpu --model "$SS_FIXTURES/golden/models/t1-hf" --text one.txt -o one.st 2>err
tr '\r\033' 'RE' < err
