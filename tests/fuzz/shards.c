/* Fuzz target: a sharded checkpoint's model.safetensors.index.json
 * (lib/model/checkpoint.c), next to two small valid shards a.safetensors and
 * b.safetensors that the index may name. */
#include <sys/stat.h>

#include "fuzz.h"
#include "ss.h"
#include "model/checkpoint.h"

/* A safetensors file with one F32 tensor `name` of 2 values. */
static void shard(const char *dir, const char *file, const char *name)
{
	char hdr[128], path[1024];
	int n = snprintf(hdr, sizeof hdr, "{\"%.32s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", name);
	unsigned char len[8] = { (unsigned char)n };
	float v[2] = { 1, 2 };
	snprintf(path, sizeof path, "%s/%s", dir, file);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	fwrite(len, 1, 8, f);
	fwrite(hdr, 1, (size_t)n, f);
	fwrite(v, 1, sizeof v, f);
	fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char dir[600];
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "%s", fuzz_path("ckpt"));
		mkdir(dir, 0700);
		shard(dir, "a.safetensors", "x.weight");
		shard(dir, "b.safetensors", "y.weight");
	}
	char name[700];
	snprintf(name, sizeof name, "ckpt/model.safetensors.index.json");
	fuzz_file(name, data, size);
	char err[SS_ERRMSG_MAX];
	ss_checkpoint *c;
	if (ss_checkpoint_open(&c, dir, err) == 0) {
		const ss_checkpoint_tensor *t = ss_checkpoint_find(c, "x.weight");
		if (t)
			ss_checkpoint_map_f32(c, t);
		ss_checkpoint_close(c);
	}
	return 0;
}
