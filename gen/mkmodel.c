/*
 * mkmodel — writes a random (seeded) Mamba-2 model directory in the
 * transformers safetensors layout, for benchmarks and manual tests.
 *
 *   build/gen/mkmodel DIR [--preset NAME] [--d-model N] [--n-layer N]
 *       [--d-state N] [--headdim N] [--expand N] [--ngroups N] [--d-conv N]
 *       [--vocab N] [--pad-multiple N] [--tied|--untied]
 *       [--dtype f32|f16|bf16] [--seed N] [--shards N]
 *
 * Presets: t1 (default), t2, mamba2-130m, mamba2-370m, mamba2-780m,
 * mamba2-1.3b, mamba2-2.7b; Mamba-1: m1, mamba-130m, mamba-370m, mamba-790m,
 * mamba-1.4b, mamba-2.8b; options after --preset override it.
 * ref: gen/model.h.
 */
#include "ss.h"

#include "gen/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fputs("usage: mkmodel DIR [--preset NAME] [--d-model N] [--n-layer N] [--d-state N]\n"
	      "       [--headdim N] [--expand N] [--ngroups N] [--d-conv N] [--vocab N]\n"
	      "       [--pad-multiple N] [--tied|--untied] [--dtype f32|f16|bf16] [--seed N]\n"
	      "       [--shards N]\n"
	      "presets: t1 t2 mamba2-130m mamba2-370m mamba2-780m mamba2-1.3b mamba2-2.7b\n"
	      "         m1 mamba-130m mamba-370m mamba-790m mamba-1.4b mamba-2.8b (Mamba-1)\n",
	      f);
}

static int num(const char *opt, const char *v, long long *out)
{
	char *end;
	long long x = v ? strtoll(v, &end, 10) : 0;
	if (!v || *end || x < 0 || x > (1LL << 40)) {
		fprintf(stderr, "mkmodel: %s: expected a non-negative integer\n", opt);
		return -1;
	}
	*out = x;
	return 0;
}

int main(int argc, char **argv)
{
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	const char *dir = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long long x = 0;
		static const struct { const char *opt; size_t off; } ints[] = {
			{"--d-model", offsetof(ss_mkmodel_opts, d_model)},
			{"--n-layer", offsetof(ss_mkmodel_opts, n_layer)},
			{"--d-state", offsetof(ss_mkmodel_opts, d_state)},
			{"--headdim", offsetof(ss_mkmodel_opts, headdim)},
			{"--expand", offsetof(ss_mkmodel_opts, expand)},
			{"--ngroups", offsetof(ss_mkmodel_opts, ngroups)},
			{"--d-conv", offsetof(ss_mkmodel_opts, d_conv)},
			{"--vocab", offsetof(ss_mkmodel_opts, vocab_size)},
			{"--pad-multiple", offsetof(ss_mkmodel_opts, pad_vocab_multiple)},
			{"--shards", offsetof(ss_mkmodel_opts, n_shards)},
		};
		size_t k = 0;
		while (k < sizeof ints / sizeof ints[0] && strcmp(a, ints[k].opt))
			k++;
		if (k < sizeof ints / sizeof ints[0]) {
			if (num(a, v, &x) || x > (1 << 30))
				return 2;
			*(int *)((char *)&o + ints[k].off) = (int)x;
			i++;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--preset")) {
			if (!v || ss_mkmodel_preset(&o, v)) {
				fprintf(stderr, "mkmodel: --preset: unknown preset\n");
				usage(stderr);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--dtype")) {
			if (!v || ss_dtype_parse_for(v, SS_DTYPE_SAFETENSORS, &o.dtype, NULL)) {
				fprintf(stderr, "mkmodel: --dtype: expected f32, f16 or bf16\n");
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--seed")) {
			if (num(a, v, &x))
				return 2;
			o.seed = (uint64_t)x;
			i++;
		} else if (!strcmp(a, "--tied")) {
			o.tied = 1;
		} else if (!strcmp(a, "--untied")) {
			o.tied = 0;
		} else if (a[0] == '-' || dir) {
			fprintf(stderr, "mkmodel: unexpected argument %s\n", a);
			usage(stderr);
			return 2;
		} else {
			dir = a;
		}
	}
	if (!dir) {
		fprintf(stderr, "mkmodel: missing DIR\n");
		usage(stderr);
		return 2;
	}
	char err[SS_ERRMSG_MAX];
	int rc = ss_mkmodel_write(dir, &o, err);
	if (rc) {
		fprintf(stderr, "mkmodel: %s\n", err);
		return 1;
	}
	return 0;
}
