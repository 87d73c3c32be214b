# A write error on standard output is one line naming it, exit 1 (not a second line from
# the exit-time check of stdout).
printf 'a b\n' | ss-encode --text > /dev/full
