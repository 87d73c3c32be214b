# A directory is read recursively: one document per regular file, in byte order of the paths,
# id the path as given (no trailing-slash doubling), as an archive's entries.
mkdir -p docs/sub docs/B
printf 'first line\nsecond line\n' > docs/a.txt
printf 'one' > docs/sub/c.txt
printf 'capital' > docs/B/b.txt
: > docs/empty.txt
ss-tokenize docs | ss-cat | sed 's/.*"id":"\([^"]*\)".*"text":"\([^"]*\)".*/\1 \2/'
ss-tokenize docs/ | ss-cat | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -n 1
