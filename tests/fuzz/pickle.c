/* Fuzz target: the torch pickle reader (lib/model/pickle.c) on a data.pkl. */
#include "fuzz.h"
#include "ss.h"
#include "model/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ss_pickle_tensor *t;
	size_t n;
	char err[SS_ERRMSG_MAX];
	if (ss_pickle_load_state_dict(data, size, &t, &n, err) == 0)
		ss_pickle_tensors_free(t, n);
	else if (strncmp(err, "pickle: ", 8))
		abort(); /* the contract: messages start with "pickle: " */
	return 0;
}
