/* Fuzz target: the safetensors reader (lib/model/safetensors.c): header JSON,
 * entry validation, reading every supported tensor, and reading one by
 * name as ss-train reads its optimiser state. */
#include "fuzz.h"
#include "ss.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = fuzz_file("model.safetensors", data, size);
	char err[SS_ERRMSG_MAX];
	ss_safetensors st;
	if (ss_safetensors_open(&st, p, err) == 0) {
		for (size_t i = 0; i < st.n; i++) {
			const ss_safetensors_tensor *t = &st.t[i];
			if (ss_safetensors_find(&st, t->name) == NULL)
				abort();
			if (!t->supported)
				continue;
			size_t n = (size_t)(t->end - t->begin) / ss_dtype_size(t->dtype);
			if (n > (1u << 20))
				continue;
			float *dst = malloc(n ? n * sizeof *dst : 1);
			ss_safetensors_read_f32(&st, t, 0, n, dst, err);
			free(dst);
			ss_safetensors_map_f32(&st, t);
		}
		ss_safetensors_close(&st);
	}
	/* ss-train --resume's reads of optimizer.safetensors (lib/train/train_ckpt.c):
	 * one tensor by name and element count */
	float a[4];
	ss_safetensors_load_f32(p, "a", a, 4, err);
	return 0;
}
