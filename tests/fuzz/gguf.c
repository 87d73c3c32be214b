/* Fuzz target: GGUF model files — the reader (lib/stream/gguf.c), the
 * model's config and weights from a GGUF (lib/model/model.c,
 * lib/model/checkpoint.c) and its tokenizer (lib/tokenizer/gguf.c). Whatever
 * the bytes: ss_gguf_open either fails with a message or lists tensors
 * whose data lie in the file (ASan: every read below stays in the mapping)
 * and whose byte counts are their elements' (none wrapped), no key or
 * tensor name twice,
 * each element range of a supported type reads, every key's value and
 * every string of an array of strings can be walked; the model and the
 * tokenizer load or fail with a message; a model that loads has the dims
 * its config says; a tokenizer that loads round-trips ASCII text. */
#include "fuzz.h"
#include "ss.h"
#include "stream/gguf.h"

static void walk(const ss_gguf *g)
{
	char err[SS_ERRMSG_MAX];
	for (size_t i = 0; i < g->n_kv; i++) {
		const char *key = g->kv[i].key, *s;
		uint64_t u, n;
		double f;
		size_t len;
		const uint8_t *p;
		ss_gguf_get_uint(g, key, &u, err);
		ss_gguf_get_float(g, key, &f, err);
		ss_gguf_get_str(g, key, &s, &len, err);
		if (ss_gguf_get_strs(g, key, &p, &n, err) == 0)
			for (uint64_t k = 0; k < n; k++)
				ss_gguf_str_next(&p, &s, &len);
		if (ss_gguf_find_kv(g, key) != &g->kv[i]) /* no key twice */
			abort();
	}
	for (size_t i = 0; i < g->n_t; i++) {
		const ss_gguf_tensor *t = &g->t[i];
		if (ss_gguf_find(g, t->name) != t || (t->nbytes && t->offset + t->nbytes > g->size))
			abort();
		/* a widened type's bytes are its elements' exactly, never wrapped */
		uint64_t es = t->type == SS_GGML_F32 ? 4 : t->type == SS_GGML_F16 || t->type == SS_GGML_BF16 ? 2 : 0;
		if (es && (t->nbytes % es || t->nbytes / es != t->numel))
			abort();
		if (t->type == SS_GGML_Q8_0 && (t->nbytes % 34 || t->nbytes / 34 * 32 != t->numel))
			abort();
		if (!t->nbytes || t->numel > (1u << 20))
			continue;
		float *x = malloc(t->numel * sizeof *x);
		if (!x)
			abort();
		if (ss_gguf_read_f32(g, t, 0, t->numel, x, err) ||
		    ss_gguf_read_f32(g, t, t->numel / 2, t->numel - t->numel / 2, x, err))
			abort();
		free(x);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = fuzz_file("m.gguf", data, size);
	char err[SS_ERRMSG_MAX] = "";
	ss_gguf g;
	if (ss_gguf_open(&g, p, err) == 0)
		walk(&g);
	else if (!err[0])
		abort();
	ss_gguf_close(&g);

	ss_model *m;
	err[0] = 0;
	if (ss_model_load(&m, p, err) == 0) {
		if (m->cfg.d_inner != m->cfg.expand * m->cfg.d_model || !m->embedding || !m->lm_head)
			abort();
		ss_model_free(m);
	} else if (!err[0]) {
		abort();
	}
	ss_tokenizer *tok;
	err[0] = 0;
	if (ss_tokenizer_load(&tok, p, err) == 0) {
		int32_t *ids = NULL;
		size_t n = 0;
		if (ss_tokenizer_encode(tok, "hello world", 11, &ids, &n, err) == 0) {
			char *back = NULL;
			size_t len = 0;
			if (ss_tokenizer_decode(tok, ids, n, &back, &len, err) == 0 &&
			    (len != 11 || memcmp(back, "hello world", 11)))
				abort();
			free(back);
		}
		free(ids);
		ss_tokenizer_free(tok);
	} else if (!err[0]) {
		abort();
	}
	return 0;
}
