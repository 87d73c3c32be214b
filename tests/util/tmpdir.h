/* tmpdir.h — a scratch directory per test program (cmocka group setup and
 * teardown of test_stream, test_index, test_hardening). */
#ifndef SS_TEST_TMPDIR_H
#define SS_TEST_TMPDIR_H

#include <stddef.h>

/* Makes a fresh directory $TMPDIR/ss-test-NAME-XXXXXX ($TMPDIR unset or
 * empty: /tmp) and writes its path into buf (cap bytes). Returns 0, or -1
 * (errno set) when it cannot be made or the path does not fit. */
int ss_test_tmpdir_make(char *buf, size_t cap, const char *name);

/* Removes dir and everything below it (rm -rf). Returns 0 or -1. */
int ss_test_tmpdir_remove(const char *dir);

#endif
