/*
 * llama_seq.c — a state as llama.cpp's per-sequence state of a recurrent
 * model, and back (contracts in ss_stream.h, "llama.cpp's sequence state").
 *
 * The blob (llama_state_seq_get_data; ref: llama.cpp's
 * src/llama-context.cpp state_seq_get_data and
 * src/llama-memory-recurrent.cpp state_write), all little-endian:
 *   u32 0xaf143cd8 | i32 seq_id | u32 cell_count = 1
 *   i32 pos | u32 n_seq_id = 0                       (the one cell)
 *   u32 s_trans = 0 | u32 n_layer
 *   n_layer × { i32 type = 0 (F32) | u64 row_bytes | conv rows }   ("r")
 *   n_layer × { i32 type = 0 (F32) | u64 row_bytes | ssm rows }    ("s")
 * The conv row of a layer is ggml's {d_conv-1, conv_dim} tensor, i.e. our
 * [conv_dim][d_conv-1]; the ssm row {d_state, headdim, nheads}, i.e. our
 * [nheads][headdim][d_state] (tests/fixtures/golden/README.md §4). The file
 * variant (llama_state_seq_save_file) is u32 'ggsq' (0x67677371) | u32
 * version 2 | u32 n_token_count | i32 tokens[n] and then the blob from
 * cell_count on (no magic, no seq_id).
 */
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "stream/internal.h"

#define SEQ_MAGIC 0xaf143cd8u
#define FILE_MAGIC 0x67677371u /* "ggsq" */
#define FILE_VERSION 2u
#define GGML_TYPE_F32 0

static size_t rows_bytes(const ss_state_dims *d)
{
	return 4 + 4 + 4 + 4 + 4 + (size_t)d->n_layer * 2 * (4 + 8) +
	       4 * (ss_state_conv_len(d) + ss_state_ssm_len(d));
}

size_t ss_llama_seq_size(const ss_state_dims *d, int file, size_t n_tokens)
{
	return (file ? 12 + 4 * n_tokens : 8) + rows_bytes(d);
}

static unsigned char *put(unsigned char *p, const void *v, size_t n)
{
	memcpy(p, v, n);
	return p + n;
}

int ss_llama_seq_write(const ss_state *s, int32_t seq_id, int file, const int32_t *tokens, size_t n_tokens,
		       void *buf, size_t size, char *errmsg)
{
	const ss_state_dims *d = &s->dims;
	if (size < ss_llama_seq_size(d, file, n_tokens) || !s->conv || !s->ssm || (n_tokens && !tokens))
		return ss_errf(errmsg, SS_ERR_INVALID, "llama.cpp sequence state: no room or no arrays");
	if (s->n_tokens < 1 || s->n_tokens > INT32_MAX || n_tokens > UINT32_MAX)
		return ss_errf(errmsg, SS_ERR_INVALID, "llama.cpp sequence state: n_tokens %lld is not in 1..2^31-1",
			       (long long)s->n_tokens);
	unsigned char *p = buf;
	uint32_t u;
	if (file) {
		u = FILE_MAGIC, p = put(p, &u, 4);
		u = FILE_VERSION, p = put(p, &u, 4);
		u = (uint32_t)n_tokens, p = put(p, &u, 4);
		if (n_tokens) /* tokens may be NULL then */
			p = put(p, tokens, 4 * n_tokens);
	} else {
		u = SEQ_MAGIC, p = put(p, &u, 4);
		p = put(p, &seq_id, 4);
	}
	int32_t pos = (int32_t)(s->n_tokens - 1), type = GGML_TYPE_F32;
	u = 1, p = put(p, &u, 4); /* cell_count */
	p = put(p, &pos, 4);
	u = 0, p = put(p, &u, 4); /* n_seq_id */
	u = 0, p = put(p, &u, 4); /* s_trans */
	u = (uint32_t)d->n_layer, p = put(p, &u, 4);
	for (int pass = 0; pass < 2; pass++) { /* conv ("r") then ssm ("s") */
		size_t row = (pass ? ss_state_ssm_len(d) : ss_state_conv_len(d)) / (size_t)d->n_layer;
		const float *a = pass ? s->ssm : s->conv;
		uint64_t row_bytes = 4 * row;
		for (int32_t l = 0; l < d->n_layer; l++) {
			p = put(p, &type, 4);
			p = put(p, &row_bytes, 8);
			p = put(p, a + (size_t)l * row, 4 * row);
		}
	}
	return 0;
}

/* Reads n bytes at *p of the blob [b, b + size), or fails as truncated. */
static int take(const unsigned char *b, size_t size, size_t *at, void *v, size_t n, const char *what, char *errmsg)
{
	if (size - *at < n)
		return ss_errf(errmsg, SS_ERR_TRUNCATED, "truncated at byte %zu (%s)", *at, what);
	memcpy(v, b + *at, n);
	*at += n;
	return 0;
}

int ss_llama_seq_read(const void *buf, size_t size, const ss_state_dims *d, ss_state *s, int32_t *pos,
		      char *errmsg)
{
	const unsigned char *b = buf;
	size_t at = 0;
	uint32_t magic = 0, u = 0, n_tok = 0;
	int32_t seq_id, p = 0;
	int rc;
	if ((rc = take(b, size, &at, &magic, 4, "magic", errmsg)))
		return rc;
	if (magic == FILE_MAGIC) {
		if ((rc = take(b, size, &at, &u, 4, "version", errmsg)) ||
		    (rc = take(b, size, &at, &n_tok, 4, "n_token_count", errmsg)))
			return rc;
		if (u != FILE_VERSION)
			return ss_errf(errmsg, SS_ERR_VERSION, "sequence state file version %u, not %u", u,
				       FILE_VERSION);
		if (n_tok > (size - at) / 4)
			return ss_errf(errmsg, SS_ERR_TRUNCATED, "%u tokens declared, %zu bytes left", n_tok, size - at);
		at += 4 * (size_t)n_tok; /* the prompt's tokens: not part of a state */
	} else if (magic != SEQ_MAGIC) {
		return ss_errf(errmsg, SS_ERR_FORMAT, "magic %08x: not a llama.cpp sequence state (%08x or 'ggsq')",
			       magic, SEQ_MAGIC);
	} else if ((rc = take(b, size, &at, &seq_id, 4, "seq_id", errmsg))) {
		return rc;
	}
	if ((rc = take(b, size, &at, &u, 4, "cell_count", errmsg)))
		return rc;
	if (u != 1)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%u cells: a recurrent sequence state has 1", u);
	if ((rc = take(b, size, &at, &p, 4, "pos", errmsg)) || (rc = take(b, size, &at, &u, 4, "n_seq_id", errmsg)))
		return rc;
	if (u != 0 || p < 0)
		return ss_errf(errmsg, SS_ERR_FORMAT, "cell: pos %d, n_seq_id %u (a sequence's cell has pos >= 0, 0 ids)",
			       p, u);
	/* n_tokens = pos + 1 must be a count a blob can hold again (1..2^31-1,
	 * ss_llama_seq_write): a state imported is one that exports */
	if (p == INT32_MAX)
		return ss_errf(errmsg, SS_ERR_FORMAT, "cell: pos %d makes n_tokens 2^31, over the 2^31-1 a sequence "
			       "state holds", p);
	if ((rc = take(b, size, &at, &u, 4, "s_trans", errmsg)))
		return rc;
	if (u != 0)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "transposed ssm rows (s_trans %u)", u);
	if ((rc = take(b, size, &at, &u, 4, "n_layer", errmsg)))
		return rc;
	if (u != (uint32_t)d->n_layer)
		return ss_errf(errmsg, SS_ERR_MISMATCH, "n_layer %u, the model's is %d", u, d->n_layer);
	/* sizes from the dims before any allocation: the blob must hold them */
	size_t need = (size_t)d->n_layer * 2 * 12 + 4 * (ss_state_conv_len(d) + ss_state_ssm_len(d));
	if (size - at != need)
		return ss_errf(errmsg, size - at < need ? SS_ERR_TRUNCATED : SS_ERR_MISMATCH,
			       "%s: %zu bytes of rows after byte %zu, these dims make %zu",
			       size - at < need ? "truncated" : "too long", size - at, at, need);
	for (int pass = 0; pass < 2; pass++) {
		size_t n = pass ? ss_state_ssm_len(d) : ss_state_conv_len(d), row = n / (size_t)d->n_layer;
		float *a = pass ? s->ssm : s->conv;
		for (int32_t l = 0; l < d->n_layer; l++) {
			int32_t type = -1;
			uint64_t row_bytes = 0;
			take(b, size, &at, &type, 4, "type", NULL); /* the size check above holds them */
			take(b, size, &at, &row_bytes, 8, "row size", NULL);
			if (type != GGML_TYPE_F32 || row_bytes != 4 * row)
				return ss_errf(errmsg, SS_ERR_MISMATCH,
					       "layer %d %s: type %d, %llu bytes a row; these dims make F32 (0), %zu", l,
					       pass ? "ssm" : "conv", type, (unsigned long long)row_bytes, 4 * row);
			take(b, size, &at, a + (size_t)l * row, 4 * row, "rows", NULL);
		}
		size_t bad = ss_nonfinite_find(a, SS_DTYPE_F32, n);
		if (bad < n)
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s element %zu is not finite", pass ? "ssm" : "conv", bad);
	}
	*pos = p;
	return 0;
}
