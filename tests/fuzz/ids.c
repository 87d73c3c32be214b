/* Fuzz target: ss-encode's --ids FILE (selection_load and selection_find
 * in tools/ss-encode.c, built in with its main renamed): every listed id is
 * found, at the position of its first occurrence. */
#include "fuzz.h"

#define main ss_encode_main
#include "../../tools/ss-encode.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A list without ids is an error the tool reports and exits on. */
	int any = 0;
	for (size_t i = 0; i < size && !any; i++)
		any = data[i] != '\n' && data[i] != '\r';
	if (!any)
		return 0;
	selection sel = { .shard_n = 1, .ids_path = fuzz_file("ids.txt", data, size) };
	selection_load(&sel);
	for (size_t k = 0; k < sel.n_ids; k++) {
		long p = selection_find(&sel, sel.ids[k]);
		if (p < 0 || (size_t)p > k || strcmp(sel.ids[p], sel.ids[k]))
			abort();
		for (size_t j = 0; j < (size_t)p; j++)
			if (!strcmp(sel.ids[j], sel.ids[k]))
				abort(); /* not the first occurrence */
	}
	selection_free(&sel);
	return 0;
}
