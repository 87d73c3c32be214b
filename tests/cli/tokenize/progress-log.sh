# Progress when stderr is not a terminal (a log): with -v, plain lines, no carriage return or
# escape sequence, every $SS_PROGRESS_SECONDS seconds (0: each document), with the rate and,
# the input being a file, the share done and the time left; counts agree in number.
printf 'one\ntwo three\n' > x.txt
SS_PROGRESS_SECONDS=0 ss-tokenize -v -o x.tok x.txt 2>err
tr '\r\033' 'RE' < err
ss-tokenize -o x.tok x.txt
