/*
 * test_shared_forward.c — test_forward.c's golden cases on the models only
 * ../shared holds: t2-hf (bf16, ngroups 2, untied lm_head; also with a small
 * ubatch) and t1-ss (the state-spaces pickle layout). Needs $SS_SHARED;
 * exits 77 "skipped: needs SS_SHARED" without it. One source, two programs:
 * see test_forward.c.
 */
#define SS_TEST_SHARED 1
#include "test_forward.c"
