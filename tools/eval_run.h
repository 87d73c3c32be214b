/*
 * eval_run.h — what ss-eval's parts share (tools/ss-eval.c: options and
 * main; eval_wikitext.c, eval_attribution.c, eval_timing.c, eval_recall.c:
 * the protocols): one run's options, model and per-row output. Every
 * function reports through cli.h and exits on failure.
 */
#ifndef SS_EVAL_RUN_H
#define SS_EVAL_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rerank.h"
#include "ss.h"

/* One run: the options, the model and its forward context, and the
 * per-row output (--per-passage / --per-query), kept in memory and written
 * at the end: cli_out_open() has one output file at a time. */
#define EVAL_MAX_METHODS 32
/* recall's retrievers (--retrievers): how the key finds its documents,
 * each a context of its own named by eval_retriever_names[r]. */
enum { EVAL_R_BM25, EVAL_R_PHRASE, EVAL_R_AND, EVAL_R_PROXIMITY, EVAL_R_RERANK, EVAL_N_RETRIEVERS };
extern const char *const eval_retriever_names[EVAL_N_RETRIEVERS];
typedef struct {
	const char *model_dir, *index, *tokens, *qa, *out, *per, *summary;
	char **indexes; /* --index, repeated or @FILE: [n_indexes] shards read as one;
			 * index names them in messages (the path, or "N shards") */
	int n_indexes;
	cli_model_opts mo; /* --model, --tokenizer, --device, --threads, --weights-dtype */
	long passages, min_tokens, kmax, queries, gen, repeat;
	long *lengths; /* timing: --lengths, [n_lengths] */
	int n_lengths;
	long *ks;      /* recall: --ks, [n_ks], ascending */
	int n_ks;
	unsigned retrieve; /* recall: --retrieve / --retrievers: bit r set for
			    * retriever r (EVAL_R_*) */
	rerank_opts rr;    /* recall: --rerank N (the retriever rerank), its score
			    * and template */
	uint64_t seed;
	int exactly_one;
	int methods[EVAL_MAX_METHODS], n_methods; /* ss_eval_method values */
	ss_model *model;
	ss_device *dev;
	ss_forward_ctx *fctx;
	const char *usage; /* for usage errors */
	FILE *per_out; /* NULL without --per-passage / --per-query */
	char *per_buf;
	size_t per_len;
} eval_run;

/* calloc and realloc that die on failure; a size of 0 still gives a pointer. */
static inline void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		cli_die("out of memory");
	return p;
}

static inline void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size ? size : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

/* The name of the j-th method of --methods. */
static inline const char *method_name(const eval_run *run, int j)
{
	return ss_eval_method_name((ss_eval_method)run->methods[j]);
}

/* Bitwise equality of two states' arrays: equal states give equal NLLs, so
 * the protocols score each distinct state of a query once (k = 0 gives the
 * zero state for every method, k = 1 the single document's state for every
 * composition). Nothing is shared between states that merely agree to
 * rounding: those are scored, which is what the invariant tests look at. */
static inline int eval_same_state(const ss_state *a, const ss_state *b)
{
	return a->n_tokens == b->n_tokens &&
	       !memcmp(a->logdecay, b->logdecay, ss_state_logdecay_len(&a->dims) * sizeof(float)) &&
	       !memcmp(a->conv, b->conv, ss_state_conv_len(&a->dims) * sizeof(float)) &&
	       !memcmp(a->ssm, b->ssm, ss_state_ssm_len(&a->dims) * sizeof(float));
}

/* Which of the context states ctxs[0..M) must be scored: src[j] = i >= 0
 * when ctxs[j] equals an earlier ctxs[i] that is scored, -2 - e when it
 * equals cache[e] (already scored), else -1, and then ctxs[j] is appended
 * to starts. Returns the number appended. */
static inline int eval_distinct_states(const ss_state *ctxs, int M, const ss_state *cache,
				       size_t n_cache, int *src, const ss_state **starts)
{
	int nu = 0;
	for (int j = 0; j < M; j++) {
		src[j] = -1;
		for (size_t e = 0; e < n_cache && src[j] == -1; e++)
			if (eval_same_state(&ctxs[j], &cache[e]))
				src[j] = -2 - (int)e;
		for (int i = 0; i < j && src[j] == -1; i++)
			if (src[i] == -1 && eval_same_state(&ctxs[j], &ctxs[i]))
				src[j] = i;
		if (src[j] == -1)
			starts[nu++] = &ctxs[j];
	}
	return nu;
}

/* The token ids of text s (malloc'd, *n of them); dies naming run->qa and
 * `where` on a tokenizer error or an id outside the model's vocabulary
 * (eval_attribution.c). */
int32_t *encode_text(const eval_run *run, ss_tokenizer *tok, const char *s, int64_t *n,
		     const char *where);

/* Opens run->indexes as one (ss_index_open_shards; dies naming the shard) and dies, before anything is written,
 * when an output (-o, --per-*, --summary) is a state file the index reads
 * (cli_out_not_input). The caller closes it (eval_attribution.c). */
ss_index *eval_index_open(const eval_run *run);

/* Appendix B.6, Table 3: OpenBookQA accuracy with k = 0..K retrieved
 * documents composed per method; writes the TSV method, k, n, accuracy,
 * accuracy_norm, mean_time_ms (eval_wikitext.c). */
void eval_openbookqa(eval_run *run);

/* PICASO §6.1, Fig. 3: WikiText continuation NLL vs k per method; writes the
 * TSV method, k, mean_nll, n, mean_time_ms (eval_wikitext.c). */
void eval_wikitext(eval_run *run);

/* Table 1 row 1: MS MARCO answer NLL per method with all of a query's
 * passages composed; writes the TSV method, n, mean_nll, mean_time_ms,
 * mean_infer_ms (eval_attribution.c). */
void eval_msmarco(eval_run *run);

/* Appendix B.3, Fig. 7: processing (prefill of L tokens) vs inference
 * (decoding --gen tokens from the state) time; writes the TSV tokens,
 * processing_ms, inference_ms (eval_timing.c). */
void eval_timing(eval_run *run);

/* Appendix C, Table 4: MS MARCO attribution by Leave-One-In and
 * Leave-One-Out per method; writes the TSV method, n, correct, precision,
 * mean_time_ms (eval_attribution.c). */
void eval_attribution(eval_run *run);

/* Key-value recall (issue 30): for each query of the recall JSONL and each
 * k of --ks, each method's context from the query's first k chunks with the
 * gold at its position (and, with --retrieve, from the BM25 top k of the
 * key); the continuation's exact match under greedy decoding and its NLL.
 * Writes the TSV context, method, k, pos, n, em, mean_nll, em_share,
 * nll_share, recall, mean_time_ms (eval_recall.c). */
void eval_recall(eval_run *run);

#endif /* SS_EVAL_RUN_H */
