/*
 * mkstates — writes a state stream of N seeded random states: the inputs of
 * the ss-compose benchmark and CLI tests, no model needed.
 *
 * usage: mkstates [--shape 130m|t1|small|L,H,P,N,C,K] [--dtype f32|f16|bf16|q8|q4]
 *                 [--seed S] [--fingerprint FP] [--prefix ID] [--amin A] [--plan 1]
 *                 [--min-saving F] N OUT
 * Shapes: 130m = mamba2-130m (24 layers, 24 heads, headdim 64, d_state 128,
 * conv_dim 1792, d_conv 4: 18.9 MB in f32); t1 = golden t1 (2, 8, 16, 16,
 * 160, 4); small = (2, 3, 4, 5, 6, 4). ssm and conv are uniform in [-1, 1),
 * logdecay uniform in [A, 0) with A = --amin (default -50). Ids are
 * PREFIX0, PREFIX1, ... (default prefix "doc"); n_tokens = 100 + index.
 * --plan 1 puts a plan frame (ss_writer_put_plan: every record's logdecay)
 * ahead of the records, as ss-retrieve query does. --min-saving F: the
 * writer's ss_writer_set_min_saving (0: every record compressed, f16/bf16
 * shuffled; above 1: every record a raw frame; default: by the saving).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"

static uint64_t rng;

static double unif(void) /* [0, 1) */
{
	return (double)(ss_splitmix64(&rng) >> 11) * 0x1.0p-53;
}

static void usage(void)
{
	fprintf(stderr, "usage: mkstates [--shape 130m|t1|small|L,H,P,N,C,K] [--dtype f32|f16|bf16|q8|q4]\n"
			"                [--seed S] [--fingerprint FP] [--prefix ID] [--amin A] [--plan 1]\n"
			"                [--min-saving F] N OUT\n");
	exit(2);
}

int main(int argc, char **argv)
{
	ss_state_dims d = {"mamba2", 24, 24, 64, 128, 1792, 4};
	ss_dtype dt = SS_DTYPE_F32;
	const char *fp = "bench0000", *prefix = "doc";
	double amin = -50, min_saving = SS_MIN_SAVING_DEFAULT;
	int with_plan = 0;
	rng = 1;
	int i = 1;
	for (; i + 1 < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--shape")) {
			if (!strcmp(v, "130m"))
				;
			else if (!strcmp(v, "t1"))
				d = (ss_state_dims){"mamba2", 2, 8, 16, 16, 160, 4};
			else if (!strcmp(v, "small"))
				d = (ss_state_dims){"mamba2", 2, 3, 4, 5, 6, 4};
			else if (sscanf(v, "%d,%d,%d,%d,%d,%d", &d.n_layer, &d.nheads, &d.headdim, &d.d_state,
					&d.conv_dim, &d.d_conv) != 6)
				usage();
		} else if (!strcmp(k, "--dtype")) {
			if (ss_dtype_parse_for(v, SS_DTYPE_STATES, &dt, NULL))
				usage();
		} else if (!strcmp(k, "--seed")) {
			rng = strtoull(v, NULL, 10);
		} else if (!strcmp(k, "--fingerprint")) {
			fp = v;
		} else if (!strcmp(k, "--prefix")) {
			prefix = v;
		} else if (!strcmp(k, "--amin")) {
			amin = strtod(v, NULL);
		} else if (!strcmp(k, "--plan")) {
			with_plan = atoi(v);
		} else if (!strcmp(k, "--min-saving")) {
			min_saving = strtod(v, NULL);
		} else {
			usage();
		}
	}
	if (argc - i != 2)
		usage();
	long n = strtol(argv[i], NULL, 10);
	const char *out = argv[i + 1];
	char err[SS_ERRMSG_MAX];
	ss_writer *w;
	if (ss_writer_open(&w, out, 0, err)) {
		fprintf(stderr, "mkstates: %s: %s\n", out, err);
		return 1;
	}
	ss_writer_set_min_saving(w, min_saving);
	ss_state s;
	if (ss_state_alloc(&s, &d)) {
		fprintf(stderr, "mkstates: out of memory\n");
		return 1;
	}
	strncpy(s.fingerprint, fp, SS_FINGERPRINT_MAX - 1);
	s.dtype = dt;
	char id[256];
	s.id = id;
	if (with_plan && n > 0) { /* the same draws twice: the decays first */
		const uint64_t seed = rng;
		const size_t H = ss_state_logdecay_len(&d);
		float *plan = malloc((size_t)n * H * sizeof *plan);
		for (long k = 0; plan && k < n; k++) {
			for (size_t e = 0; e < ss_state_ssm_len(&d) + ss_state_conv_len(&d); e++)
				(void)unif();
			for (size_t e = 0; e < H; e++)
				plan[(size_t)k * H + e] = (float)(amin * (1 - unif()));
		}
		if (!plan || ss_writer_put_plan(w, (size_t)n, H, plan)) {
			fprintf(stderr, "mkstates: %s: cannot write the plan\n", out);
			ss_writer_abort(w);
			return 1;
		}
		free(plan);
		rng = seed;
	}
	for (long k = 0; k < n; k++) {
		snprintf(id, sizeof id, "%s%ld", prefix, k);
		s.n_tokens = 100 + k;
		for (size_t e = 0; e < ss_state_ssm_len(&d); e++)
			s.ssm[e] = (float)(2 * unif() - 1);
		for (size_t e = 0; e < ss_state_conv_len(&d); e++)
			s.conv[e] = (float)(2 * unif() - 1);
		for (size_t e = 0; e < ss_state_logdecay_len(&d); e++)
			s.logdecay[e] = (float)(amin * (1 - unif()));
		int rc = ss_writer_put_state(w, &s, NULL);
		if (rc) {
			fprintf(stderr, "mkstates: %s: %s\n", out, ss_strerror(rc));
			ss_writer_abort(w);
			return 1;
		}
	}
	s.id = NULL;
	ss_state_free(&s);
	if (ss_writer_close(w, err)) {
		fprintf(stderr, "mkstates: %s: %s\n", out, err);
		return 1;
	}
	return 0;
}
