/* Fuzz target: ss-train's trainer_state.json (tools/train_state.c), as
 * --resume reads it: a file that parses is within every field's bounds and
 * reads back the same after train_state_json writes it again. */
#include <math.h>

#include "fuzz.h"
#include "train_state.h"

static void same(const run_state *a, const run_state *b)
{
	int s = a->objective == b->objective && a->step == b->step && a->steps == b->steps &&
		a->lr == b->lr && a->min_lr == b->min_lr && a->weight_decay == b->weight_decay &&
		a->clip == b->clip && a->warmup == b->warmup && a->seq_len == b->seq_len &&
		a->batch_tokens == b->batch_tokens && a->batch_seqs == b->batch_seqs &&
		a->max_k == b->max_k && a->seed == b->seed && a->rng == b->rng && a->mode == b->mode &&
		a->save_dtype == b->save_dtype && a->epoch == b->epoch && a->offset == b->offset &&
		a->pos == b->pos && !strcmp(a->base_fingerprint, b->base_fingerprint) &&
		!strcmp(a->data, b->data) && !a->states == !b->states &&
		(!a->states || !strcmp(a->states, b->states)) && !a->chunk_tokens == !b->chunk_tokens &&
		(!a->chunk_tokens || !strcmp(a->chunk_tokens, b->chunk_tokens)) &&
		!a->loss_after == !b->loss_after && (!a->loss_after || !strcmp(a->loss_after, b->loss_after));
	if (!s)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[SS_ERRMSG_MAX] = "";
	run_state r = { 0 }, back = { 0 };
	if (train_state_parse((const char *)data, size, "trainer_state.json", &r, err) == 0) {
		/* the bounds ss-train relies on (lm_take indexes tokens + pos) */
		if (r.step < 0 || r.step > r.steps || r.pos < 0 || r.offset < -1 || !(r.lr >= 0) ||
		    !(r.lr <= 10) || r.seq_len < 1 || r.batch_tokens < 1 || r.batch_seqs < 1 ||
		    !r.data || !r.data[0] || (r.objective == OBJ_BP2C && !r.states) ||
		    (r.objective == OBJ_BPTC && !r.chunk_tokens))
			abort();
		cJSON *o = train_state_json(&r);
		char *text = cJSON_PrintUnformatted(o);
		if (!text || train_state_parse(text, strlen(text), "again", &back, err))
			abort();
		same(&r, &back);
		free(text);
		cJSON_Delete(o);
	} else if (strncmp(err, "trainer_state.json: ", 20)) {
		abort(); /* every refusal names the file */
	}
	train_state_free(&r);
	train_state_free(&back);
	return 0;
}
