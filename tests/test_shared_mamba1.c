/*
 * test_shared_mamba1.c — test_forward.c's golden cases and properties on
 * the Mamba-1 model m1 of ../shared/golden-mamba1 (HF safetensors and
 * state-spaces pickle layouts). Needs $SS_SHARED; exits 77 "skipped: needs
 * SS_SHARED" without it. One source, three programs: see test_forward.c.
 */
#define SS_TEST_SHARED 2
#include "test_forward.c"
