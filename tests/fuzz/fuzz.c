/* fuzz.c — helpers of the fuzz harnesses; see fuzz.h. */
#include "fuzz.h"

#include <unistd.h>

static char dir[256];

static void cleanup(void)
{
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz: cannot remove %s\n", dir);
}

const char *fuzz_dir(void)
{
	if (!dir[0]) {
		const char *t = getenv("TMPDIR");
		snprintf(dir, sizeof dir, "%s/ss-fuzz.XXXXXX", t && *t ? t : "/tmp");
		if (!mkdtemp(dir)) {
			perror("fuzz: mkdtemp");
			abort();
		}
		atexit(cleanup);
	}
	return dir;
}

const char *fuzz_path(const char *name)
{
	static char buf[4][512];
	static int i;
	i = (i + 1) % 4;
	snprintf(buf[i], sizeof buf[i], "%s/%s", fuzz_dir(), name);
	return buf[i];
}

const char *fuzz_file(const char *name, const void *data, size_t size)
{
	const char *p = fuzz_path(name);
	FILE *f = fopen(p, "wb");
	if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
		perror(p);
		abort();
	}
	return p;
}

const char *fuzz_src(const char *rel)
{
	static char buf[1024];
	const char *top = getenv("SS_TOP");
	snprintf(buf, sizeof buf, "%s/%s", top && *top ? top : ".", rel);
	return buf;
}
