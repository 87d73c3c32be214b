/* Fuzz target: a model's config.json (lib/model/model.c ss_model_config_load). */
#include <sys/stat.h>

#include "fuzz.h"
#include "ss.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char dir[600];
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "%s", fuzz_path("model"));
		mkdir(dir, 0700);
	}
	fuzz_file("model/config.json", data, size);
	char err[SS_ERRMSG_MAX];
	ss_model_config cfg;
	ss_model_config_load(&cfg, dir, err);
	return 0;
}
