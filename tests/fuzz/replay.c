/*
 * replay.c — runs a fuzz harness over files, without libFuzzer: the
 * regression test that make test runs for every harness. With no
 * arguments it replays tests/fuzz/seeds/TARGET and tests/fuzz/crashes/TARGET
 * (TARGET compiled in); with arguments, the files named. A crash, a
 * sanitizer report or an assertion fails the test; otherwise it prints how
 * many inputs it ran.
 */
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_TARGET
#error "build with -DFUZZ_TARGET=\"name\""
#endif

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 4096, n = 0;
	unsigned char *b = malloc(cap);
	size_t r;
	while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			unsigned char *nb = realloc(b, cap *= 2);
			if (!nb)
				free(b);
			b = nb;
		}
	}
	fclose(f);
	if (!b) {
		fprintf(stderr, "%s: out of memory\n", path);
		return -1;
	}
	/* Copy to an exact-size buffer so that ASan sees reads past the end. */
	unsigned char *exact = malloc(n ? n : 1);
	memcpy(exact, b, n);
	free(b);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	return 0;
}

static int run_dir(const char *rel, int *count)
{
	const char *d = fuzz_src(rel);
	char path[1024];
	snprintf(path, sizeof path, "%s", d);
	DIR *dp = opendir(path);
	if (!dp)
		return 0; /* no past crashes: fine */
	struct dirent *e;
	int bad = 0;
	while ((e = readdir(dp))) {
		if (e->d_name[0] == '.')
			continue;
		char f[2048];
		snprintf(f, sizeof f, "%s/%s", path, e->d_name);
		struct stat st;
		if (stat(f, &st) || !S_ISREG(st.st_mode))
			continue;
		if (run_file(f))
			bad = 1;
		(*count)++;
	}
	closedir(dp);
	return bad;
}

int main(int argc, char **argv)
{
	int count = 0, bad = 0;
	if (argc > 1) {
		for (int i = 1; i < argc; i++, count++)
			bad |= run_file(argv[i]) != 0;
	} else {
		bad |= run_dir("tests/fuzz/seeds/" FUZZ_TARGET, &count);
		bad |= run_dir("tests/fuzz/crashes/" FUZZ_TARGET, &count);
		if (count == 0) {
			fprintf(stderr, "fuzz %s: no seeds in tests/fuzz/seeds/%s\n", FUZZ_TARGET, FUZZ_TARGET);
			return 1;
		}
	}
	printf("fuzz %s: %d inputs replayed\n", FUZZ_TARGET, count);
	return bad;
}
