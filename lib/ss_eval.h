/*
 * ss_eval.h — the paper's evaluation methods as library calls (part of
 * libss; include "ss.h", not this file): the context state each method
 * builds from retrieved documents, and the mean NLL (and exact match under
 * greedy decoding) of a continuation given a state and a query. ss-eval(1)
 * runs them over WikiText (PICASO §6.1, Fig. 3), MS MARCO attribution
 * (Appendix C, Table 4) and key-value recall.
 * Public: part of libss's interface (ss.h says what that means).
 *
 * Methods (documents in concatenation order 0..n-1, n-1 nearest the query;
 * the WikiText protocol puts the most relevant last):
 *   naive       the zero state (no documents)
 *   concat      re-encode the documents concatenated, starting from the
 *               first document's stored state (picaso.txt §6.2 "Concatenation")
 *   soup, caso, picaso-s, picaso-r
 *               compose the stored states (ss_compose, conv averaged, no
 *               normalisation; picaso.txt §3-4, docs/DESIGN.md §3)
 *   piconcat-r  mean of the states of the n cyclic concatenations: rotation r
 *               starts from document r's stored state and re-encodes the
 *               others in cyclic order; the n re-encodings run as one batched
 *               prefill (picaso.txt §6.3.1 "PIConcat", Appendix B.1). ssm and
 *               conv are averaged; logdecay is log of the mean decay (soup's
 *               rule): past layer 0 the rotations' decays differ, since dt
 *               comes from layer inputs that depend on the context.
 *   soup-sum, soup-max (any norm), soup with a norm
 *               ss_compose modes sum, max, soup with norm flags
 *               (document-souping.txt §2.2-2.3)
 * With n = 0 every method gives the zero state; with n = 1 every method
 * without a norm flag gives the document's stored state bit for bit.
 */
#ifndef SS_EVAL_H
#define SS_EVAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	SS_EVAL_NAIVE = 0,
	SS_EVAL_CONCAT = 1,
	SS_EVAL_SOUP = 2,
	SS_EVAL_CASO = 3,
	SS_EVAL_PICASO_S = 4,
	SS_EVAL_PICASO_R = 5,
	SS_EVAL_PICONCAT_R = 6,
	SS_EVAL_N_PAPER = 7, /* the PICASO paper's methods: 0..6 */
	SS_EVAL_SOUP_SUM = 7,
	SS_EVAL_SOUP_MAX = 8,
	SS_EVAL_N_METHODS = 9,
	/* Flags OR-ed into soup, soup-sum and soup-max: the souping paper's L2
	 * normalisation of each layer's ssm block (SS_COMPOSE_NORM_*) before
	 * pooling, after it, or both. */
	SS_EVAL_NORM_BEFORE = 0x100,
	SS_EVAL_NORM_AFTER = 0x200,
} ss_eval_method;

/* "naive" "concat" "soup" "caso" "picaso-s" "picaso-r" "piconcat-r", and the
 * souping paper's pooling variants (document-souping.txt §2.2) "soup-sum"
 * "soup-max", each of the three soups with an optional normalisation
 * suffix ":before" ":after" ":both" (e.g. "soup-max:both"); NULL for an
 * unknown value (a norm flag on another method included). _parse returns 0
 * and sets *out, or SS_ERR_INVALID. */
const char *ss_eval_method_name(ss_eval_method m);
int ss_eval_method_parse(const char *s, ss_eval_method *out);

/* One retrieved document: its stored state (borrowed, f32 arrays of the
 * model's dims) and its tokens (borrowed, [n_tokens] ids; read by concat
 * and piconcat-r only, may be NULL for the other methods). */
typedef struct {
	const ss_state *state;
	const int32_t *tokens;
	int64_t n_tokens;
} ss_eval_doc;

/* The zero state of model m (dims, fingerprint, id "zero"). The caller
 * frees it with ss_state_free. Returns 0 or SS_ERR_NOMEM. */
int ss_eval_zero_state(const ss_model *m, ss_state *out);

/* The context state of method `meth` for docs[0..n) (see the top of this
 * file) into *out (caller frees with ss_state_free).
 *   ctx: a forward context of model m (used by concat and piconcat-r only;
 *        may be NULL for the others).
 * Every document state must have m's dims and fingerprint.
 * Returns 0; SS_ERR_INVALID (unknown method, NULL argument, concat or
 * piconcat-r without ctx or tokens), SS_ERR_MISMATCH (dims or fingerprint),
 * the errors of ss_compose and ss_forward_prefill, SS_ERR_NOMEM; errmsg
 * (SS_ERRMSG_MAX bytes or NULL) says which document.
 * Cost: compositions read the n states once; concat prefills
 * Σ_{i≥1} n_tokens_i tokens; piconcat-r (n-1)·Σ_i n_tokens_i tokens.
 * ref: picaso.txt §6.1-6.2, Props. 1-3, Appendix B.1; docs/DESIGN.md §3. */
int ss_eval_context(ss_forward_ctx *ctx, const ss_model *m, ss_eval_method meth,
		    const ss_eval_doc *docs, size_t n, ss_state *out, char *errmsg);

/* Scratch (logit rows) for scoring up to max_seqs states at once. */
typedef struct ss_eval_scorer ss_eval_scorer;

/* Creates a scorer on forward context ctx of model m (both borrowed: they
 * must outlive it). max_seqs >= 1: the most start states per
 * ss_eval_nll call. Memory: max_seqs · SS_EVAL_ROWS · vocab_padded floats,
 * and a working copy of each start state of the largest call, kept until
 * ss_eval_scorer_free (reused by the next call of the same dims).
 * The ids greedy decoding picks among (ss_eval_nll's exact) are [0,
 * vocab_size) (vocab_padded when vocab_size is not in 1..vocab_padded)
 * until ss_eval_scorer_set_vocab says otherwise.
 * Returns 0 and sets *out (free with ss_eval_scorer_free), SS_ERR_INVALID,
 * SS_ERR_NOMEM. */
#define SS_EVAL_ROWS 32
int ss_eval_scorer_init(ss_eval_scorer **out, ss_forward_ctx *ctx, const ss_model *m,
			int max_seqs);
void ss_eval_scorer_free(ss_eval_scorer *sc);

/* Limits the ids greedy decoding picks among to [0, n_vocab), 1 <= n_vocab
 * <= vocab_padded: ss-decode(1) generates only ids its tokenizer can print,
 * min(vocab_size, the tokenizer's vocabulary). The NLL still normalises over
 * all vocab_padded logits. Returns 0 or SS_ERR_INVALID. */
int ss_eval_scorer_set_vocab(ss_eval_scorer *sc, int32_t n_vocab);

/* The scorer's max_seqs working states (owned by it; zeroed until a call
 * or the caller fills them). A caller that reads its start states itself
 * reads them into these (f32 arrays of the model's dims; e.g.
 * ss_index_read_state, which keeps their arrays from one read to the next)
 * and passes starts NULL to ss_eval_nll or ss_eval_entropy, which then run
 * from them in place, with no copy: they hold the run's end states
 * afterwards. */
ss_state *ss_eval_scorer_states(ss_eval_scorer *sc);

/* Mean negative log-likelihood (nats per token) of the continuation
 * c[0..nc) after the query q[0..nq), starting from each of starts[0..n)
 * (only read; starts NULL: the scorer's working states [0, n), as
 * ss_eval_scorer_states says): nll[i] = (1/nc) Σ_j -log
 * softmax(logits_j)[c_j], where logits_j is the output at q's last token
 * (j = 0) or at c_{j-1}, over all vocab_padded logits — the definition
 * ss-score(1) prints. The n states run as one batch (one prefill call per
 * SS_EVAL_ROWS continuation tokens).
 * exact (NULL: not computed): exact[i] = 1 when for every j the argmax of
 * logits_j over the scorer's vocabulary (ss_eval_scorer_set_vocab; ties to
 * the lowest id, NaN never wins: ss_argmax) is c_j, else 0. Teacher forcing
 * that is exactly greedy decoding: greedy decoding of nc tokens after q
 * (ss-decode --greedy --ignore-eos) gives c exactly when exact[i] = 1.
 *   n <= max_seqs; nq >= 1 (a stored state carries no logits), nc >= 1;
 *   ids in [0, vocab_padded).
 * Returns 0; SS_ERR_INVALID (sizes, ids, a working state holding no state
 * when starts is NULL, or an NLL that is NaN or infinite: errmsg names the
 * start state), the errors of
 * ss_forward_prefill, SS_ERR_NOMEM; errmsg says which.
 * ref: picaso.txt §6.2 (log-perplexity of the continuation);
 *      tests/fixtures/golden/README.md §4 nll.f32; exact match as in key-value recall
 *      (issue 30). */
int ss_eval_nll(ss_eval_scorer *sc, const ss_state *const *starts, size_t n, const int32_t *q,
		int64_t nq, const int32_t *c, int64_t nc, double *nll, int *exact, char *errmsg);

/* Entropy (nats) of the next token after the query q[0..nq) from each of
 * starts[0..n) (only read; NULL as for ss_eval_nll): entropy[i] =
 * -Σ_v p_v log p_v, p = softmax(logits at q's last token) over all
 * vocab_padded logits. The n
 * states run as one batch (one prefill). The lower it is, the surer the
 * state makes the model of what follows q: ss-retrieve query --rerank
 * --rerank-score entropy ranks documents by it.
 *   n <= max_seqs; nq >= 1; ids in [0, vocab_padded).
 * Returns 0; SS_ERR_INVALID (sizes, or an entropy that is not finite:
 * errmsg names the start state), the errors of ss_forward_prefill,
 * SS_ERR_NOMEM.
 * ref: Shannon entropy of the predictive distribution, as the
 * uncertainty signal of Kuhn et al., "Semantic Uncertainty" (ICLR 2023) §2. */
int ss_eval_entropy(ss_eval_scorer *sc, const ss_state *const *starts, size_t n, const int32_t *q,
		    int64_t nq, double *entropy, char *errmsg);

/* Retrieval quality of one ranked list (picaso.txt §B.5: the retriever
 * decides what gets composed), binary relevance. */
typedef struct {
	double recall_1, recall_5, recall_10; /* relevant documents in the top k / n_rel */
	double rr_10;   /* 1 / rank of the first relevant one in the top 10, else 0 (MRR@10) */
	double ndcg_10; /* DCG@10 / ideal DCG@10, gains 1 / log2(rank + 1) */
} ss_eval_ranking;

/* rel[0..n): 1 when the i-th result (best first) is a relevant document not
 * seen earlier in the list, else 0; n_rel >= 1: the relevant documents that
 * exist. Returns 0 and fills *out, or SS_ERR_INVALID (n < 0, n_rel < 1, NULL
 * arguments, more relevant results than n_rel).
 * ref: Järvelin & Kekäläinen, "Cumulated gain-based evaluation of IR
 * techniques" (2002); TREC's recall@k, MRR@10 (MS MARCO's metric). */
int ss_eval_rank(const int *rel, int n, int n_rel, ss_eval_ranking *out);

#ifdef __cplusplus
}
#endif
#endif /* SS_EVAL_H */
