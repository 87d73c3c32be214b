/*
 * train_state.h — ss-train's run state and its file, DIR/trainer_state.json
 * (tools/ss-train.c writes and resumes it): the objective, the step, the
 * hyperparameters, the data position and the RNG. Parsing never exits, so
 * the fuzz harness tests/fuzz/trainstate.c drives it.
 * ref: transformers trainer_callback.py (TrainerState saved as
 *      trainer_state.json beside the checkpoint: the same idea, our fields).
 */
#ifndef SS_TRAIN_STATE_H
#define SS_TRAIN_STATE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "ss.h"

enum { OBJ_LM, OBJ_BP2C, OBJ_BPTC, OBJ_COUNT };
/* "lm", "bp2c", "bptc", by OBJ_*. */
extern const char *const train_objective_names[OBJ_COUNT];

/* Everything trainer_state.json records. The strings are malloc'd (freed by
 * train_state_free). */
typedef struct {
	int objective; /* OBJ_* */
	int64_t step, steps;
	double lr, min_lr, weight_decay, clip;
	int64_t warmup, seq_len, batch_tokens, batch_seqs, max_k;
	uint64_t seed, rng;
	ss_compose_mode mode;
	ss_dtype save_dtype;
	char *data, *states, *chunk_tokens;
	char *loss_after; /* lm: --loss-after's text, or NULL */
	char base_fingerprint[SS_FINGERPRINT_MAX];
	/* data position: the next item to read */
	int64_t epoch;
	int64_t offset; /* byte offset of the record (lm) or line (bp2c); -1: the start */
	int64_t pos;    /* lm: token position in that record */
} run_state;

/* r as trainer_state.json's object (64-bit seed and RNG as decimal
 * strings: a JSON number holds 53 bits). Caller frees (cJSON_Delete); NULL
 * when out of memory. */
cJSON *train_state_json(const run_state *r);

/* Parses text[0..len) (trainer_state.json's bytes; `path` names it in
 * messages) into r, every field checked against the bounds of its
 * command-line option: a hand-edited or damaged file would otherwise index
 * out of the data or train with nonsense (issue 32 item 2). Fields already
 * set in r (data, states, chunk_tokens given on the command line) are kept.
 * Returns 0; SS_ERR_FORMAT with errmsg "PATH: "FIELD" is ..." naming the
 * first bad field (r then holds what was read, to be freed);
 * SS_ERR_NOMEM. */
int train_state_parse(const char *text, size_t len, const char *path, run_state *r,
		      char *errmsg);

/* Frees r's strings (NULL after). */
void train_state_free(run_state *r);

#endif
