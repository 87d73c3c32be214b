# A directory is read recursively: one document per regular file, in byte order of the paths,
# id the path as given (no trailing-slash doubling), as an archive's entries; names beginning
# with '.' (.git, .DS_Store) are skipped, as shell globs skip them.
mkdir -p docs/sub docs/B
printf 'first line\nsecond line\n' > docs/a.txt
printf 'one' > docs/sub/c.txt
printf 'capital' > docs/B/b.txt
: > docs/empty.txt
mkdir docs/.git && printf 'x' > docs/.git/HEAD && printf '\377' > docs/.DS_Store
ss-tokenize docs | ss-cat | sed 's/.*"id":"\([^"]*\)".*"text":"\([^"]*\)".*/\1 \2/'
ss-tokenize docs/ | ss-cat | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -n 1
