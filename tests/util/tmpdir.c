/* tmpdir.c — see tmpdir.h. */
#include "util/tmpdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int ss_test_tmpdir_make(char *buf, size_t cap, const char *name)
{
	const char *t = getenv("TMPDIR");
	int n = snprintf(buf, cap, "%s/ss-test-%s-XXXXXX", t && *t ? t : "/tmp", name);
	if (n < 0 || (size_t)n >= cap) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return mkdtemp(buf) ? 0 : -1;
}

int ss_test_tmpdir_remove(const char *dir)
{
	char cmd[4200];
	int n = snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (n < 0 || (size_t)n >= sizeof cmd)
		return -1;
	return system(cmd) == 0 ? 0 : -1;
}
