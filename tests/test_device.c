/*
 * test_device.c — lib/forward/device.c's acceptance of a CUDA plugin's table
 * (ss_cuda_api_check), with fake tables: no plugin, no GPU needed. A
 * plugin compiled from other headers than libss (a stale build, an old
 * install) must be refused with SS_ERR_VERSION and a message naming the
 * first type whose layout differs, not run on misread structs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "forward/device_plugin.h"

/* This build's layout list, as the real plugin carries nvcc's. */
static const ss_cuda_layout ours[] = SS_CUDA_LAYOUT_INIT;
#define N_LAYOUT (sizeof ours / sizeof ours[0]) /* with the terminator */

static ss_cuda_api fake_table(const ss_cuda_layout *layout)
{
	ss_cuda_api a;
	memset(&a, 0, sizeof a);
	a.abi = SS_CUDA_ABI;
	a.size = sizeof a;
	a.build = "fake";
	a.layout = layout;
	return a;
}

/* Index of entry `what` in ours; fails the test when absent. */
static size_t entry(const char *what)
{
	for (size_t i = 0; ours[i].what; i++)
		if (!strcmp(ours[i].what, what))
			return i;
	fail_msg("no layout entry %s", what);
	return 0;
}

static void test_same_layout_accepted(void **st)
{
	(void)st;
	char em[SS_ERRMSG_MAX] = "";
	ss_cuda_layout copy[N_LAYOUT];
	memcpy(copy, ours, sizeof copy);
	ss_cuda_api a = fake_table(copy);
	assert_int_equal(ss_cuda_api_check(&a, "p.so", em), 0);
	/* A larger table (a plugin with entries appended) passes the size
	 * check, not the layout's. */
	a.size = sizeof a + 8;
	copy[entry("sizeof(ss_cuda_api)")].value += 8;
	assert_int_equal(ss_cuda_api_check(&a, "p.so", em), SS_ERR_VERSION);
	assert_non_null(strstr(em, "sizeof(ss_cuda_api) is"));
}

static void test_abi_and_size_refused(void **st)
{
	(void)st;
	char em[SS_ERRMSG_MAX] = "";
	assert_int_equal(ss_cuda_api_check(NULL, "p.so", em), SS_ERR_VERSION);
	assert_non_null(strstr(em, "p.so: not a CUDA plugin of ABI"));
	ss_cuda_api a = fake_table(ours);
	a.abi = SS_CUDA_ABI - 1;
	assert_int_equal(ss_cuda_api_check(&a, "p.so", em), SS_ERR_VERSION);
	a = fake_table(ours);
	a.size = sizeof a - sizeof(void *);
	assert_int_equal(ss_cuda_api_check(&a, "p.so", NULL), SS_ERR_VERSION);
}

/* What a plugin compiled before a field was added to ss_state reports. */
static void test_stale_layout_refused(void **st)
{
	(void)st;
	char em[SS_ERRMSG_MAX] = "";
	const char *const changed[] = { "sizeof(ss_state)", "offsetof(ss_state, ssm)",
					"offsetof(ss_state, conv_scale)", "offsetof(ss_model, layers)",
					"offsetof(ss_model, weights_dtype)",
					"offsetof(ss_forward_seq, state)",
					"offsetof(ss_layer, A_log)", "offsetof(ss_cuda_api, backend_init)",
					/* an op slot: its entry comes from SS_CUDA_OPS */
					"offsetof(ss_cuda_api, dt_softplus)" };
	for (size_t k = 0; k < sizeof changed / sizeof *changed; k++) {
		ss_cuda_layout stale[N_LAYOUT];
		memcpy(stale, ours, sizeof stale);
		size_t i = entry(changed[k]);
		stale[i].value += 8;
		ss_cuda_api a = fake_table(stale);
		assert_int_equal(ss_cuda_api_check(&a, "/x/libss_cuda.so", em), SS_ERR_VERSION);
		char want[200];
		snprintf(want, sizeof want, "/x/libss_cuda.so: built from other headers: %s is %llu in the plugin, %llu in this libss",
			 changed[k], (unsigned long long)ours[i].value + 8, (unsigned long long)ours[i].value);
		assert_non_null(strstr(em, want));
	}
}

/* A list with other entries: one missing, one extra, none at all. */
static void test_other_list_refused(void **st)
{
	(void)st;
	char em[SS_ERRMSG_MAX] = "";
	size_t i = entry("offsetof(ss_state, ssm)");
	ss_cuda_layout other[N_LAYOUT + 1];
	/* ssm's entry missing (a plugin from before the field existed) */
	memcpy(other, ours, i * sizeof *other);
	memcpy(other + i, ours + i + 1, (N_LAYOUT - i - 1) * sizeof *other);
	ss_cuda_api a = fake_table(other);
	assert_int_equal(ss_cuda_api_check(&a, "p.so", em), SS_ERR_VERSION);
	assert_non_null(strstr(em, "in the plugin, offsetof(ss_state, ssm) in this libss"));
	/* the list cut short */
	memcpy(other, ours, sizeof ours);
	other[i].what = NULL;
	assert_int_equal(ss_cuda_api_check(&a, "p.so", em), SS_ERR_VERSION);
	assert_non_null(strstr(em, "its layout list ends before offsetof(ss_state, ssm)"));
	/* an entry this libss does not know, at the end */
	memcpy(other, ours, sizeof ours);
	other[N_LAYOUT - 1] = (ss_cuda_layout){ "offsetof(ss_state, extra)", 8 };
	other[N_LAYOUT] = (ss_cuda_layout){ NULL, 0 };
	assert_int_equal(ss_cuda_api_check(&a, "p.so", em), SS_ERR_VERSION);
	assert_non_null(strstr(em, "longer"));
	/* no list */
	a = fake_table(NULL);
	assert_int_equal(ss_cuda_api_check(&a, "p.so", em), SS_ERR_VERSION);
	assert_non_null(strstr(em, "no layout list"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_layout_accepted),
		cmocka_unit_test(test_abi_and_size_refused),
		cmocka_unit_test(test_stale_layout_refused),
		cmocka_unit_test(test_other_list_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
