/*
 * test_shared_model_load.c — test_model_load.c's golden checks of the
 * checkpoints only ../shared holds: t1-ss (the state-spaces pickle layout,
 * also cut short) and t2-hf (bf16, untied lm_head). Needs $SS_SHARED; exits
 * 77 "skipped: needs SS_SHARED" without it. One source, two programs: see
 * test_model_load.c.
 */
#define SS_TEST_SHARED 1
#include "test_model_load.c"
