/*
 * mkdb — writes a token stream and a state stream for documents given as
 * "ID<TAB>TEXT" lines on stdin: the fixtures of ss-retrieve's CLI tests and
 * a quick way to try the index without a model. Tokens are fake (one per
 * word, ids from a hash); states are seeded random values with small dims.
 *
 * usage: mkdb [--seed N] [--fingerprint FP] [--dims small|t1] [--no-text]
 *             TOKENS_OUT STATES_OUT
 * TOKENS_OUT or STATES_OUT may be "" to skip that stream.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"

static uint64_t hash(const char *s, uint64_t seed)
{
	uint64_t h = 1469598103934665603ull ^ seed;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static float unif(uint64_t *x)
{
	return (float)((next(x) >> 40) * (1.0 / (1u << 24)));
}

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "mkdb: %s: %s\n", what, msg);
	exit(1);
}

int main(int argc, char **argv)
{
	uint64_t seed = 1;
	const char *fp = "mkdb-small";
	int no_text = 0;
	ss_state_dims d = { "mamba2", 2, 2, 2, 2, 8, 4 };
	int i = 1;
	for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--fingerprint") && i + 1 < argc)
			fp = argv[++i];
		else if (!strcmp(argv[i], "--dims") && i + 1 < argc) {
			i++;
			if (!strcmp(argv[i], "t1"))
				d = (ss_state_dims){ "mamba2", 2, 8, 16, 16, 160, 4 };
			else if (strcmp(argv[i], "small"))
				die(argv[i], "unknown dims (small, t1)");
		} else if (!strcmp(argv[i], "--no-text"))
			no_text = 1;
		else
			die(argv[i], "unknown option");
	}
	if (argc - i != 2) {
		fprintf(stderr, "usage: mkdb [--seed N] [--fingerprint FP] [--dims small|t1] [--no-text] "
				"TOKENS_OUT STATES_OUT < 'ID<TAB>TEXT' lines\n");
		return 2;
	}
	const char *tpath = argv[i], *spath = argv[i + 1];
	char em[SS_ERRMSG_MAX];
	ss_writer *tw = NULL, *sw = NULL;
	if (*tpath && ss_writer_open(&tw, tpath, 0, em))
		die(tpath, em);
	if (*spath && ss_writer_open(&sw, spath, 0, em))
		die(spath, em);
	ss_state s;
	if (ss_state_alloc(&s, &d))
		die("state", "out of memory");
	snprintf(s.fingerprint, sizeof s.fingerprint, "%s", fp);
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int32_t *tok = NULL;
	while ((len = getline(&line, &cap, stdin)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = 0;
		char *tab = strchr(line, '\t');
		if (!tab)
			continue;
		*tab = 0;
		char *text = tab + 1;
		int64_t n = 0;
		size_t tl = strlen(text);
		free(tok);
		tok = malloc((tl + 1) * sizeof *tok);
		for (char *p = text; *p;) {
			while (*p == ' ')
				p++;
			if (!*p)
				break;
			char *q = p;
			while (*q && *q != ' ')
				q++;
			char save = *q;
			*q = 0;
			tok[n++] = (int32_t)(hash(p, 0) % 50277);
			*q = save;
			p = q;
		}
		if (tw) {
			ss_tokens t = { line, tok, n, no_text ? NULL : text, no_text ? 0 : tl, NULL };
			if (ss_writer_put_tokens(tw, &t, NULL))
				die(tpath, "write failed");
		}
		if (sw) {
			uint64_t x = hash(line, seed) | 1;
			for (size_t j = 0; j < ss_state_ssm_len(&d); j++)
				s.ssm[j] = unif(&x) * 2 - 1;
			for (size_t j = 0; j < ss_state_conv_len(&d); j++)
				s.conv[j] = unif(&x) * 2 - 1;
			for (size_t j = 0; j < ss_state_logdecay_len(&d); j++)
				s.logdecay[j] = -unif(&x) * (float)(n + 1);
			s.id = line;
			s.n_tokens = n;
			int rc = ss_writer_put_state(sw, &s, NULL);
			s.id = NULL;
			if (rc)
				die(spath, "write failed");
		}
	}
	free(tok);
	free(line);
	ss_state_free(&s);
	if (tw && ss_writer_close(tw, em))
		die(tpath, em);
	if (sw && ss_writer_close(sw, em))
		die(spath, em);
	return 0;
}
