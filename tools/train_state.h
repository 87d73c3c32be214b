/*
 * train_state.h — ss-train's run state and its file, DIR/trainer_state.json
 * (tools/ss-train.c writes and resumes it; lib/train/run.c runs it): the
 * objective, the step, the hyperparameters, the data position and the RNG. Parsing never exits, so
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

/* The run state is the library's (lib/ss_train.h, ss_train_run_*); these
 * are its names here and in tests/fuzz/trainstate.c. The strings are
 * malloc'd (freed by train_state_free). */
typedef ss_train_state run_state;
enum {
	OBJ_LM = SS_TRAIN_LM,
	OBJ_BP2C = SS_TRAIN_BP2C,
	OBJ_BPTC = SS_TRAIN_BPTC,
	OBJ_BIRDIE = SS_TRAIN_BIRDIE,
	OBJ_COUNT = SS_TRAIN_OBJECTIVES
};
/* "lm", "bp2c", "bptc", "birdie", by OBJ_*. */
extern const char *const train_objective_names[OBJ_COUNT];

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
