/*
 * checkpoint.c — model weight files: safetensors (single or sharded) and
 * torch.save zips, listed and read through one request interface.
 *
 * A torch zip is read with libarchive in two passes: the first reads only
 * <prefix>/data.pkl (parsed by the restricted unpickler in pickle.c), the
 * second streams <prefix>/data/<key> entries in archive order and serves every
 * request that views that storage (two state_dict keys may share one storage,
 * e.g. a tied lm_head).
 * ref: torch/serialization.py _save/_load (zip layout, persistent ids);
 *      transformers modeling_utils.py (safetensors index format).
 */
#include "model/checkpoint.h"

#include "model/pickle.h"
#include "model/safetensors.h"
#include "stream/gguf.h"

#include <archive.h>
#include <archive_entry.h>
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_INDEX_JSON (64u << 20)
#define MAX_PICKLE (256u << 20)
#define CHUNK ((size_t)1 << 16)

struct ss_checkpoint {
	char *dir;
	char *main_path;              /* the file that names the weights */
	ss_safetensors *shards;
	size_t nshards;
	/* torch zip */
	char *bin_path;
	char *prefix;                 /* entry-name prefix before "data.pkl" */
	ss_pickle_tensor *pt;
	size_t npt;
	/* GGUF */
	ss_gguf *gguf;
	char **canon;                 /* [n] HF names of the GGUF's tensors (owned) */
	/* unified list */
	ss_checkpoint_tensor *t;
	size_t n;
};

static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (p) {
		memcpy(p, dir, a);
		p[a] = '/';
		memcpy(p + a + 1, name, b + 1);
	}
	return p;
}

static int exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

/* Opens path for reading if it is a regular file (a FIFO would block
 * forever): NULL with errmsg filled and *code set otherwise. */
static FILE *open_regular(const char *path, char *errmsg, int *code)
{
	int fd = ss_open_regular(path);
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
	if (f)
		return f;
	if (fd >= 0)
		close(fd);
	*code = fd == -2 ? SS_ERR_IO : errno == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO;
	ss_errf(errmsg, *code, "%s: %s", path, fd == -2 ? "not a regular file" : strerror(errno));
	return NULL;
}

/* Reads a whole small file (≤ max bytes) into a NUL-terminated buffer. */
static int slurp(const char *path, size_t max, char **out, size_t *len, char *errmsg)
{
	int code;
	FILE *f = open_regular(path, errmsg, &code);
	if (!f)
		return code;
	struct stat sb;
	if (fstat(fileno(f), &sb) || (uint64_t)sb.st_size > max) {
		fclose(f);
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: larger than %zu bytes", path, max);
	}
	char *buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		fclose(f);
		return ss_errf(errmsg, SS_ERR_NOMEM, "%s: out of memory", path);
	}
	size_t got = fread(buf, 1, (size_t)sb.st_size, f);
	int bad = ferror(f);
	fclose(f);
	if (bad || got != (size_t)sb.st_size) {
		free(buf);
		return ss_errf(errmsg, SS_ERR_IO, "%s: read failed", path);
	}
	buf[got] = 0;
	*out = buf;
	*len = got;
	return 0;
}

static int add_tensor(ss_checkpoint *c, const char *name, const char *file, ss_dtype dt,
                      int ndim, const int64_t *shape, int src, size_t idx, char *errmsg)
{
	for (size_t i = 0; i < c->n && src != -2; i++) /* GGUF names were checked */
		if (!strcmp(c->t[i].name, name))
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: tensor %s appears twice", file, name);
	ss_checkpoint_tensor *t = &c->t[c->n++];
	t->name = name;
	t->file = file;
	t->dtype = dt;
	t->ndim = ndim;
	t->numel = 1;
	for (int d = 0; d < ndim; d++) {
		t->shape[d] = shape[d];
		t->numel *= (uint64_t)shape[d];
	}
	t->src = src;
	t->idx = idx;
	return 0;
}

/* Lists the shards' tensors; unsupported dtypes are left out here and
 * reported by name if the model asks for them. */
static int list_shards(ss_checkpoint *c, char *errmsg)
{
	size_t total = 0;
	for (size_t s = 0; s < c->nshards; s++)
		total += c->shards[s].n;
	c->t = calloc(total + 1, sizeof *c->t);
	if (!c->t)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	for (size_t s = 0; s < c->nshards; s++)
		for (size_t i = 0; i < c->shards[s].n; i++) {
			const ss_safetensors_tensor *e = &c->shards[s].t[i];
			int rc = add_tensor(c, e->name, c->shards[s].path,
			                    e->supported ? e->dtype : SS_DTYPE_F32, e->ndim, e->shape,
			                    (int)s, i, errmsg);
			if (rc)
				return rc;
		}
	return 0;
}

static int open_single(ss_checkpoint *c, const char *path, char *errmsg)
{
	c->shards = calloc(1, sizeof *c->shards);
	if (!c->shards)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	int rc = ss_safetensors_open(&c->shards[0], path, errmsg);
	if (rc)
		return rc;
	c->nshards = 1;
	return list_shards(c, errmsg);
}

static int open_sharded(ss_checkpoint *c, const char *ipath, char *errmsg)
{
	char *text = NULL;
	size_t len = 0;
	int rc = slurp(ipath, MAX_INDEX_JSON, &text, &len, errmsg);
	if (rc)
		return rc;
	cJSON *root = cJSON_ParseWithLength(text, len);
	free(text);
	const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(wm)) {
		cJSON_Delete(root);
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: not JSON with a \"weight_map\" object", ipath);
	}
	/* Distinct shard names, in first-seen order. */
	size_t cap = (size_t)cJSON_GetArraySize(wm) + 1;
	const char **names = calloc(cap, sizeof *names);
	c->shards = calloc(cap, sizeof *c->shards);
	if (!names || !c->shards) {
		free(names);
		cJSON_Delete(root);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	size_t nn = 0;
	for (const cJSON *e = wm->child; e && !rc; e = e->next) {
		if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') ||
		    !strcmp(e->valuestring, "..")) {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s: bad shard file name", ipath,
			          e->string ? e->string : "?");
			break;
		}
		size_t k = 0;
		while (k < nn && strcmp(names[k], e->valuestring))
			k++;
		if (k == nn)
			names[nn++] = e->valuestring;
	}
	for (size_t k = 0; k < nn && !rc; k++) {
		char *path = join(c->dir, names[k]);
		if (!path) {
			rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
			break;
		}
		rc = ss_safetensors_open(&c->shards[k], path, errmsg);
		free(path);
		if (!rc)
			c->nshards++;
	}
	/* Every name in the index must be in the shard it names. */
	for (const cJSON *e = wm->child; e && !rc; e = e->next) {
		size_t k = 0;
		while (k < nn && strcmp(names[k], e->valuestring))
			k++;
		if (!ss_safetensors_find(&c->shards[k], e->string))
			rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "%s: %s: missing (the index names this shard)",
			          c->shards[k].path, e->string);
	}
	free(names);
	cJSON_Delete(root);
	if (rc)
		return rc;
	return list_shards(c, errmsg);
}

static int archive_fail(struct archive *a, const char *path, char *errmsg)
{
	const char *s = archive_error_string(a);
	int e = archive_errno(a);
	/* Only files starting with a zip local header get here, so an
	 * unrecognised archive is one whose central directory is missing. */
	if (s && strstr(s, "Unrecognized archive format"))
		return ss_errf(errmsg, SS_ERR_TRUNCATED,
		            "%s: zip archive truncated or damaged (no central directory)", path);
	int code = (s && (strstr(s, "runcated") || strstr(s, "premature"))) ? SS_ERR_TRUNCATED
	           : e == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_FORMAT;
	return ss_errf(errmsg, code, "%s: %s", path, s ? s : "cannot read zip archive");
}

static struct archive *zip_open(const char *path, char *errmsg, int *rc)
{
	struct archive *a = archive_read_new();
	if (!a) {
		*rc = ss_errf(errmsg, SS_ERR_NOMEM, "%s: out of memory", path);
		return NULL;
	}
	archive_read_support_format_zip_seekable(a);
	if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
		*rc = archive_fail(a, path, errmsg);
		archive_read_free(a);
		return NULL;
	}
	*rc = 0;
	return a;
}

/* Reads exactly n bytes of the current entry. */
static int entry_read(struct archive *a, void *buf, size_t n, const char *path,
                      const char *entry, char *errmsg)
{
	uint8_t *p = buf;
	while (n) {
		la_ssize_t r = archive_read_data(a, p, n);
		if (r < 0) {
			archive_fail(a, path, errmsg);
			size_t k = strlen(errmsg);
			snprintf(errmsg + k, SS_ERRMSG_MAX - k, " (entry %s)", entry);
			return SS_ERR_TRUNCATED;
		}
		if (r == 0)
			return ss_errf(errmsg, SS_ERR_TRUNCATED, "%s: entry %s ends early", path, entry);
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Calls each(ctx, a, e, name) for every entry of the zip at path, in
 * order, until one returns nonzero (that is the result) or the archive
 * ends (0); a damaged archive is archive_fail's error. */
typedef int zip_entry_fn(void *ctx, struct archive *a, struct archive_entry *e, const char *name,
			 char *errmsg);
static int zip_walk(const char *path, zip_entry_fn *each, void *ctx, char *errmsg)
{
	int rc;
	struct archive *a = zip_open(path, errmsg, &rc);
	if (!a)
		return rc;
	struct archive_entry *e;
	for (;;) {
		int ar = archive_read_next_header(a, &e);
		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN) {
			rc = archive_fail(a, path, errmsg);
			break;
		}
		if ((rc = each(ctx, a, e, archive_entry_pathname(e), errmsg)))
			break;
	}
	archive_read_free(a);
	return rc;
}

/* open_torch's walk: the first data.pkl (read whole, its folder the
 * prefix) and the byteorder entry. */
typedef struct {
	ss_checkpoint *c;
	uint8_t *pkl;
	size_t pkl_len;
	int big_endian;
} pkl_find;

static int on_pkl_entry(void *ctx, struct archive *a, struct archive_entry *e, const char *name,
			char *errmsg)
{
	pkl_find *x = ctx;
	const char *path = x->c->bin_path;
	size_t ln = name ? strlen(name) : 0;
	int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
	if (ln >= 8 && !strcmp(name + ln - 8, "data.pkl") && (ln == 8 || name[ln - 9] == '/') &&
	    !x->pkl) {
		if (size < 0 || (uint64_t)size > MAX_PICKLE)
			return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: %s: size %lld not allowed", path, name,
				       (long long)size);
		if (!(x->c->prefix = strndup(name, ln - 8)) || !(x->pkl = malloc((size_t)size + 1)))
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		x->pkl_len = (size_t)size;
		return entry_read(a, x->pkl, x->pkl_len, path, name, errmsg);
	}
	if (ln >= 9 && !strcmp(name + ln - 9, "byteorder") && size > 0 && size < 16) {
		char bo[16] = {0};
		int rc = entry_read(a, bo, (size_t)size, path, name, errmsg);
		x->big_endian = !strncmp(bo, "big", 3);
		return rc;
	}
	return 0;
}

static int open_torch(ss_checkpoint *c, const char *path, char *errmsg)
{
	int code;
	FILE *f = open_regular(path, errmsg, &code);
	if (!f)
		return code;
	unsigned char magic[4] = {0};
	size_t got = fread(magic, 1, 4, f);
	fclose(f);
	if (got == 4 && magic[0] == 0x80 && magic[1] <= 5)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED,
		            "%s: legacy (pre-zip) torch format is not supported; re-save with torch >= 1.6",
		            path);
	if (got < 4 || memcmp(magic, "PK\003\004", 4))
		return ss_errf(errmsg, got < 4 ? SS_ERR_TRUNCATED : SS_ERR_FORMAT,
		            "%s: not a zip archive", path);
	if (!(c->bin_path = strdup(path)))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");

	pkl_find x = { c, NULL, 0, 0 };
	int rc = zip_walk(path, on_pkl_entry, &x, errmsg);
	uint8_t *pkl = x.pkl;
	size_t pkl_len = x.pkl_len;
	if (!rc && !pkl)
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: no data.pkl entry (not a torch.save file)", path);
	if (!rc && x.big_endian)
		rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: big-endian tensor data is not supported", path);
	if (rc) {
		free(pkl);
		return rc;
	}
	rc = ss_pickle_load_state_dict(pkl, pkl_len, &c->pt, &c->npt, errmsg);
	free(pkl);
	if (rc) {
		char inner[SS_ERRMSG_MAX];
		memcpy(inner, errmsg, SS_ERRMSG_MAX);
		inner[SS_ERRMSG_MAX - 1] = 0;
		return ss_errf(errmsg, rc, "%s: %sdata.pkl: %s", path, c->prefix, inner);
	}
	c->t = calloc(c->npt + 1, sizeof *c->t);
	if (!c->t)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < c->npt; i++)
		if ((rc = add_tensor(c, c->pt[i].name, c->bin_path, c->pt[i].dtype, c->pt[i].ndim,
		                     c->pt[i].shape, -1, i, errmsg)))
			return rc;
	return 0;
}

int ss_gguf_mamba_arch(const ss_gguf *g, int *mamba1, char *errmsg)
{
	const char *arch;
	size_t la;
	int rc = ss_gguf_get_str(g, "general.architecture", &arch, &la, errmsg);
	if (rc)
		return rc == SS_ERR_NOTFOUND
		       ? ss_errf(errmsg, SS_ERR_FORMAT, "%s: no general.architecture", g->path) : rc;
	*mamba1 = la == 5 && !memcmp(arch, "mamba", 5);
	if (!*mamba1 && !(la == 6 && !memcmp(arch, "mamba2", 6)))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: architecture %.*s is not supported "
		            "(mamba, mamba2)", g->path, (int)(la > 64 ? 64 : la), arch);
	return 0;
}

/* GGUF names (blk.N.<suffix> and the top level) and the HF names they
 * stand for (ref: llama.cpp gguf-py/gguf/tensor_mapping.py, MODEL_TENSOR
 * SSM_*; conversion/mamba.py). ssm_dt.bias is dt_proj.bias in Mamba-1. */
static const char *const gguf_layer[][2] = {
	{"attn_norm.weight", "norm.weight"},      {"ssm_in.weight", "mixer.in_proj.weight"},
	{"ssm_conv1d.weight", "mixer.conv1d.weight"}, {"ssm_conv1d.bias", "mixer.conv1d.bias"},
	{"ssm_dt.bias", "mixer.dt_bias"},         {"ssm_a", "mixer.A_log"},
	{"ssm_d", "mixer.D"},                     {"ssm_norm.weight", "mixer.norm.weight"},
	{"ssm_out.weight", "mixer.out_proj.weight"}, {"ssm_x.weight", "mixer.x_proj.weight"},
	{"ssm_dt.weight", "mixer.dt_proj.weight"},
};
static const char *const gguf_top[][2] = {
	{"token_embd.weight", "backbone.embeddings.weight"},
	{"output_norm.weight", "backbone.norm_f.weight"},
	{"output.weight", "lm_head.weight"},
};

/* The layer number of a layer tensor's name "blk.N.<suffix>": 1 with
 * *layer = N and *at = the suffix's offset when N is a layer number in
 * canonical decimal (digits, no sign, no leading zero, below 2^31), as
 * llama.cpp writes and looks names up ("blk.%d."); 0 otherwise. */
static int blk_layer(const char *name, unsigned *layer, size_t *at)
{
	const char *p = name + 4;
	unsigned long v = 0;
	size_t n = 0;
	for (; p[n] >= '0' && p[n] <= '9' && n < 10; n++)
		v = v * 10 + (unsigned long)(p[n] - '0');
	if (n == 0 || p[n] != '.' || (n > 1 && p[0] == '0') || v > INT32_MAX)
		return 0;
	*layer = (unsigned)v;
	*at = 4 + n + 1;
	return 1;
}

/* Sets *hf to the HF name of GGUF tensor `name` (malloc'd), or NULL when
 * the model does not use it. Returns 0, SS_ERR_FORMAT (errmsg "PATH:
 * tensor NAME: ...") for a name that begins with "blk." but has no
 * canonical layer number ("blk.00.", "blk.+0.": the same layer's tensor
 * under another name, which one would be meant is unknowable), or
 * SS_ERR_NOMEM. */
static int gguf_canon(const char *name, int mamba1, const char *path, char **hf, char *errmsg)
{
	*hf = NULL;
	for (size_t i = 0; i < sizeof gguf_top / sizeof *gguf_top; i++)
		if (!strcmp(name, gguf_top[i][0]))
			return (*hf = strdup(gguf_top[i][1])) ? 0 : ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	unsigned layer;
	size_t at;
	if (strncmp(name, "blk.", 4))
		return 0;
	if (!blk_layer(name, &layer, &at))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: tensor %s: not blk.N.<name> with N a layer number "
			       "in canonical decimal", path, name);
	if (layer > 65535)
		return 0;
	for (size_t i = 0; i < sizeof gguf_layer / sizeof *gguf_layer; i++)
		if (!strcmp(name + at, gguf_layer[i][0])) {
			const char *h = mamba1 && !strcmp(gguf_layer[i][0], "ssm_dt.bias")
			                ? "mixer.dt_proj.bias" : gguf_layer[i][1];
			char buf[96];
			snprintf(buf, sizeof buf, "backbone.layers.%u.%s", layer, h);
			return (*hf = strdup(buf)) ? 0 : ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		}
	return 0;
}

static int open_gguf(ss_checkpoint *c, const char *path, char *errmsg)
{
	if (!(c->gguf = calloc(1, sizeof *c->gguf)))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	int rc = ss_gguf_open(c->gguf, path, errmsg);
	if (rc)
		return rc;
	const ss_gguf *g = c->gguf;
	int mamba1;
	if ((rc = ss_gguf_mamba_arch(g, &mamba1, errmsg)))
		return rc;
	c->t = calloc(g->n_t + 1, sizeof *c->t);
	c->canon = calloc(g->n_t + 1, sizeof *c->canon);
	if (!c->t || !c->canon)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < g->n_t; i++) {
		const ss_gguf_tensor *e = &g->t[i];
		char *hf;
		if ((rc = gguf_canon(e->name, mamba1, path, &hf, errmsg)))
			return rc;
		if (!hf)
			continue; /* not a weight of the model (or another layer's count) */
		c->canon[c->n] = hf;
		/* HF shape: ggml's dims reversed; the converter's reshapes undone:
		 * Mamba-2's ssm_a and ssm_d {1, nheads} and ssm_norm
		 * {d_inner/ngroups, ngroups} flat, conv1d.weight {d_conv,
		 * conv_dim} as torch's [conv_dim][1][d_conv] */
		int64_t shape[4];
		int nd = e->n_dims;
		for (int d = 0; d < nd; d++)
			shape[d] = e->ne[nd - 1 - d];
		if (!mamba1 && (strstr(hf, ".A_log") || strstr(hf, ".D") || strstr(hf, ".norm.weight")) &&
		    strstr(hf, ".mixer.")) {
			shape[0] = (int64_t)e->numel;
			nd = 1;
		} else if (strstr(hf, "conv1d.weight") && nd == 2) {
			shape[2] = shape[1];
			shape[1] = 1;
			nd = 3;
		}
		/* a Q8_0 embedding makes the model's matrices q8_0 (model.c: the
		 * checkpoint's dtype), re-quantized from the widened values into
		 * the same blocks (ggml's quantizer gives back d and q) */
		ss_dtype dt = e->type == SS_GGML_F16 ? SS_DTYPE_F16
		              : e->type == SS_GGML_BF16 ? SS_DTYPE_BF16
		              : e->type == SS_GGML_Q8_0 ? SS_DTYPE_Q8_0 : SS_DTYPE_F32;
		if ((rc = add_tensor(c, e->name, path, dt, nd, shape, -2, i, errmsg)))
			return rc;
		c->t[c->n - 1].canon = hf;
		c->t[c->n - 1].neglog = strstr(hf, ".A_log") != NULL;
	}
	return 0;
}

int ss_checkpoint_open(ss_checkpoint **out, const char *dir, char *errmsg)
{
	*out = NULL;
	ss_checkpoint *c = calloc(1, sizeof *c);
	if (!c || !(c->dir = strdup(dir))) {
		free(c);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	struct stat sb;
	if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
		int rc = (c->main_path = strdup(dir)) ? open_gguf(c, dir, errmsg)
		                                      : ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		if (rc) {
			ss_checkpoint_close(c);
			return rc;
		}
		*out = c;
		return 0;
	}
	static const char *const cand[] = {
		"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
		"pytorch_model.bin.index.json",
	};
	char *path = NULL;
	int which = -1, rc;
	for (int i = 0; i < 4 && which < 0; i++) {
		free(path);
		if (!(path = join(dir, cand[i]))) {
			ss_checkpoint_close(c);
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		}
		if (exists(path))
			which = i;
	}
	switch (which) {
	case 0: rc = open_single(c, path, errmsg); break;
	case 1: rc = open_sharded(c, path, errmsg); break;
	case 2: rc = open_torch(c, path, errmsg); break;
	case 3:
		rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED,
		          "%s: sharded pytorch_model.bin is not supported; convert to safetensors", path);
		break;
	default:
		rc = ss_errf(errmsg, SS_ERR_NOTFOUND,
		          "%s: no model.safetensors, model.safetensors.index.json or pytorch_model.bin",
		          dir);
	}
	c->main_path = path;
	if (rc) {
		ss_checkpoint_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

const ss_checkpoint_tensor *ss_checkpoint_find(const ss_checkpoint *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (!strcmp(c->t[i].canon ? c->t[i].canon : c->t[i].name, name))
			return &c->t[i];
	return NULL;
}

const char *ss_checkpoint_path(const ss_checkpoint *c)
{
	return c->main_path;
}

const float *ss_checkpoint_map_f32(ss_checkpoint *c, const ss_checkpoint_tensor *t)
{
	if (t->src == -2) {
		const ss_gguf_tensor *e = &c->gguf->t[t->idx];
		if (e->type != SS_GGML_F32 || t->neglog || e->offset % sizeof(float))
			return NULL;
		return (const float *)(c->gguf->map + e->offset);
	}
	if (t->src < 0)
		return NULL;
	ss_safetensors *st = &c->shards[t->src];
	return ss_safetensors_map_f32(st, &st->t[t->idx]);
}

/* Widens elements [first, first + n) of one tensor of a source into dst. */
typedef int (*range_fn)(const void *src, uint64_t first, size_t n, float *dst, char *errmsg);

/* Serves request r by read: the whole tensor into r->dst, or in chunks of
 * CHUNK elements to r->visit. */
static int serve(const ss_checkpoint_req *r, range_fn read, const void *src, char *errmsg)
{
	size_t n = (size_t)r->t->numel;
	int rc;
	if (r->dst) {
		if ((rc = read(src, 0, n, r->dst, errmsg)))
			return rc;
		if (r->visit)
			r->visit(r->ctx, r->dst, n);
		return 0;
	}
	float *buf = malloc(CHUNK * sizeof *buf);
	if (!buf)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	rc = 0;
	for (size_t i = 0; i < n && !rc; i += CHUNK) {
		size_t k = n - i < CHUNK ? n - i : CHUNK;
		if (!(rc = read(src, i, k, buf, errmsg)) && r->visit)
			r->visit(r->ctx, buf, k);
	}
	free(buf);
	return rc;
}

struct st_src {
	ss_safetensors *st;
	const ss_safetensors_tensor *e;
};

static int st_range(const void *src, uint64_t first, size_t n, float *dst, char *errmsg)
{
	const struct st_src *s = src;
	return ss_safetensors_read_f32(s->st, s->e, (size_t)first, n, dst, errmsg);
}

static int read_safetensors(ss_checkpoint *c, const ss_checkpoint_req *r, char *errmsg)
{
	ss_safetensors *st = &c->shards[r->t->src];
	const ss_safetensors_tensor *e = &st->t[r->t->idx];
	if (!e->supported)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: %s: dtype %s is not supported (F32, F16, BF16)",
		            st->path, e->name, e->dtype_name);
	struct st_src src = {st, e};
	return serve(r, st_range, &src, errmsg);
}

/* Copies tensor view p out of raw storage bytes into dst (f32), following
 * strides. Contiguous views are one conversion. */
static void gather(const ss_pickle_tensor *p, const uint8_t *raw, float *dst, size_t first,
                   size_t n)
{
	size_t esz = ss_dtype_size(p->dtype);
	int contiguous = 1;
	int64_t expect = 1;
	for (int d = p->ndim - 1; d >= 0; d--) {
		if (p->shape[d] != 1 && p->stride[d] != expect)
			contiguous = 0;
		expect *= p->shape[d];
	}
	if (contiguous) {
		ss_to_f32(dst, raw + (size_t)(p->offset + (int64_t)first) * esz, p->dtype, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		/* Flat index first+i → storage index through the strides. */
		uint64_t flat = first + i;
		int64_t off = p->offset;
		for (int d = p->ndim - 1; d >= 0; d--) {
			uint64_t k = flat % (uint64_t)p->shape[d];
			flat /= (uint64_t)p->shape[d];
			off += (int64_t)k * p->stride[d];
		}
		ss_to_f32(dst + i, raw + (size_t)off * esz, p->dtype, 1);
	}
}

struct raw_src {
	const ss_pickle_tensor *p;
	const uint8_t *raw;
};

static int raw_range(const void *src, uint64_t first, size_t n, float *dst, char *errmsg)
{
	(void)errmsg;
	const struct raw_src *s = src;
	gather(s->p, s->raw, dst, (size_t)first, n);
	return 0;
}

static int serve_from_raw(const ss_checkpoint_req *r, const ss_pickle_tensor *p,
                          const uint8_t *raw, char *errmsg)
{
	struct raw_src src = {p, raw};
	return serve(r, raw_range, &src, errmsg);
}

/* Zip entry e (name, its storage key) of the archive a, when some of the
 * n requests view its storage: checked against their dtype and size, read
 * straight into the one destination when it is a plain f32 tensor, else
 * whole and served to every request viewing it; done[i] set for each. */
static int read_torch_entry(const ss_checkpoint *c, const ss_checkpoint_req *req, size_t n,
			    struct archive *a, struct archive_entry *e, const char *name,
			    const char *key, char *done, char *errmsg)
{
	const char *path = c->bin_path;
	size_t users = 0, first = 0;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(c->pt[req[i].t->idx].storage_key, key) && !users++)
			first = i;
	if (!users)
		return 0;
	const ss_pickle_tensor *p0 = &c->pt[req[first].t->idx];
	uint64_t want = (uint64_t)p0->storage_numel * ss_dtype_size(p0->dtype);
	int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
	if (size >= 0 && (uint64_t)size != want)
		return ss_errf(errmsg, (uint64_t)size < want ? SS_ERR_TRUNCATED : SS_ERR_FORMAT,
			       "%s: %s: %lld bytes, storage of %s needs %llu", path, name,
			       (long long)size, p0->name, (unsigned long long)want);
	for (size_t i = 0; i < n; i++) {
		const ss_pickle_tensor *p = &c->pt[req[i].t->idx];
		if (!strcmp(p->storage_key, key) &&
		    (p->dtype != p0->dtype || p->storage_numel != p0->storage_numel))
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s and %s view storage %s differently",
				       path, p0->name, p->name, key);
	}
	/* The common case reads straight into the destination. */
	const ss_checkpoint_req *r0 = &req[first];
	int direct = users == 1 && r0->dst && p0->dtype == SS_DTYPE_F32 && p0->offset == 0 &&
	             (uint64_t)p0->storage_numel == r0->t->numel;
	for (int64_t d = p0->ndim - 1, expect = 1; direct && d >= 0; expect *= p0->shape[d], d--)
		if (p0->shape[d] != 1 && p0->stride[d] != expect)
			direct = 0;
	int rc;
	if (direct) {
		if ((rc = entry_read(a, r0->dst, (size_t)want, path, name, errmsg)))
			return rc;
		if (r0->visit)
			r0->visit(r0->ctx, r0->dst, (size_t)r0->t->numel);
		done[first] = 1;
		return 0;
	}
	uint8_t *raw = malloc(want ? (size_t)want : 1);
	if (!raw)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	rc = entry_read(a, raw, (size_t)want, path, name, errmsg);
	for (size_t i = 0; i < n && !rc; i++)
		if (!strcmp(c->pt[req[i].t->idx].storage_key, key)) {
			rc = serve_from_raw(&req[i], &c->pt[req[i].t->idx], raw, errmsg);
			done[i] = 1;
		}
	free(raw);
	return rc;
}

/* read_torch's walk: every entry under the prefix's data/ folder. */
typedef struct {
	const ss_checkpoint *c;
	const ss_checkpoint_req *req;
	size_t n;
	char *done;
} data_walk;

static int on_data_entry(void *ctx, struct archive *a, struct archive_entry *e, const char *name,
			 char *errmsg)
{
	const data_walk *x = ctx;
	size_t lp = strlen(x->c->prefix);
	if (!name || strncmp(name, x->c->prefix, lp) || strncmp(name + lp, "data/", 5))
		return 0;
	return read_torch_entry(x->c, x->req, x->n, a, e, name, name + lp + 5, x->done, errmsg);
}

static int read_torch(ss_checkpoint *c, const ss_checkpoint_req *req, size_t n, char *errmsg)
{
	char *done = calloc(n + 1, 1);
	if (!done)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	data_walk x = { c, req, n, done };
	int rc = zip_walk(c->bin_path, on_data_entry, &x, errmsg);
	for (size_t i = 0; i < n && !rc; i++)
		if (!done[i])
			rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "%s: %s: storage entry %sdata/%s is missing",
			          c->bin_path, req[i].t->name, c->prefix, c->pt[req[i].t->idx].storage_key);
	free(done);
	return rc;
}

/* A = -exp(A_log) back to A_log = log(-A), in place; A must be negative. */
static int gguf_neglog(const ss_checkpoint *c, const ss_checkpoint_tensor *t, float *x, size_t n,
                       uint64_t first, char *errmsg)
{
	for (size_t i = 0; i < n; i++) {
		if (!(x[i] < 0.0f) || !isfinite(x[i]))
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s: element %llu is %g, not a finite "
			            "negative A (ssm_a holds A = -exp(A_log))", c->gguf->path, t->name,
			            (unsigned long long)(first + i), (double)x[i]);
		x[i] = logf(-x[i]);
	}
	return 0;
}

struct gguf_src {
	const ss_checkpoint *c;
	const ss_checkpoint_tensor *t;
};

static int gguf_range(const void *src, uint64_t first, size_t n, float *dst, char *errmsg)
{
	const struct gguf_src *s = src;
	int rc = ss_gguf_read_f32(s->c->gguf, &s->c->gguf->t[s->t->idx], first, n, dst, errmsg);
	if (!rc && s->t->neglog)
		rc = gguf_neglog(s->c, s->t, dst, n, first, errmsg);
	return rc;
}

static int read_gguf(ss_checkpoint *c, const ss_checkpoint_req *r, char *errmsg)
{
	struct gguf_src src = {c, r->t};
	return serve(r, gguf_range, &src, errmsg);
}

int ss_checkpoint_read(ss_checkpoint *c, const ss_checkpoint_req *req, size_t n, char *errmsg)
{
	if (c->gguf) {
		for (size_t i = 0; i < n; i++) {
			int rc = req[i].t->src == -2 ? read_gguf(c, &req[i], errmsg)
			                             : ss_errf(errmsg, SS_ERR_INVALID, "bad request");
			if (rc)
				return rc;
		}
		return 0;
	}
	if (c->bin_path) {
		for (size_t i = 0; i < n; i++)
			if (req[i].t->src >= 0)
				return ss_errf(errmsg, SS_ERR_INVALID, "bad request");
		return read_torch(c, req, n, errmsg);
	}
	for (size_t i = 0; i < n; i++) {
		int rc = read_safetensors(c, &req[i], errmsg);
		if (rc)
			return rc;
	}
	return 0;
}

void ss_checkpoint_close(ss_checkpoint *c)
{
	if (!c)
		return;
	for (size_t s = 0; s < c->nshards; s++)
		ss_safetensors_close(&c->shards[s]);
	free(c->shards);
	ss_pickle_tensors_free(c->pt, c->npt);
	free(c->t);
	if (c->canon)
		for (size_t i = 0; c->canon[i]; i++)
			free(c->canon[i]);
	free(c->canon);
	ss_gguf_close(c->gguf);
	free(c->gguf);
	free(c->bin_path);
	free(c->prefix);
	free(c->dir);
	free(c->main_path);
	free(c);
}
