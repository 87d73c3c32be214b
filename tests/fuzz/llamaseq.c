/* Fuzz target: llama.cpp's per-sequence state (ss_llama_seq_read, both the
 * blob and the 'ggsq' file variant) for one of three dims, picked by the
 * input's first byte: t1's, a small Mamba-2 and a small Mamba-1. Whatever
 * the bytes, the reader checks every field against the dims before it reads
 * a row (ASan: no read past the input). What it accepts has finite rows and
 * 0 <= pos < 2^31-1 (n_tokens = pos + 1 a blob can hold), and writes back (ss_llama_seq_write, both variants) into bytes
 * that read again as the same arrays and pos; a blob it wrote reads back.
 * Any disagreement aborts. */
#include "fuzz.h"
#include "ss.h"

#include <math.h>

static const ss_state_dims dims[3] = {
	{"mamba2", 2, 8, 16, 16, 160, 4}, /* t1 */
	{"mamba2", 1, 2, 2, 2, 8, 4},
	{"mamba1", 2, 3, 1, 2, 3, 3},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const ss_state_dims *d = &dims[data[0] % 3];
	ss_state s, t;
	char err[SS_ERRMSG_MAX];
	if (ss_state_alloc(&s, d) || ss_state_alloc(&t, d))
		abort();
	int32_t pos = -1, pos2 = -1;
	if (ss_llama_seq_read(data + 1, size - 1, d, &s, &pos, err) == 0) {
		size_t nc = ss_state_conv_len(d), ns = ss_state_ssm_len(d);
		for (size_t i = 0; i < nc; i++)
			if (!isfinite(s.conv[i]))
				abort();
		for (size_t i = 0; i < ns; i++)
			if (!isfinite(s.ssm[i]))
				abort();
		if (pos < 0)
			abort();
		s.n_tokens = (int64_t)pos + 1;
		for (int file = 0; file < 2; file++) {
			size_t n = ss_llama_seq_size(d, file, 0);
			unsigned char *b = malloc(n);
			if (!b || ss_llama_seq_write(&s, 7, file, NULL, 0, b, n, err) ||
			    ss_llama_seq_read(b, n, d, &t, &pos2, err) || pos2 != pos ||
			    memcmp(t.conv, s.conv, nc * sizeof(float)) || memcmp(t.ssm, s.ssm, ns * sizeof(float)))
				abort();
			/* one byte short is refused, never read past */
			if (ss_llama_seq_read(b, n - 1, d, &t, &pos2, err) != SS_ERR_TRUNCATED)
				abort();
			free(b);
		}
	}
	ss_state_free(&s);
	ss_state_free(&t);
	return 0;
}
