/*
 * safetensors.c — validated reader for .safetensors files.
 *
 * The header is read with pread after checking its length against the file
 * size and a 100 MB cap; every entry's offsets are checked against the data
 * region and against shape x dtype size before any tensor is read. Tensor
 * data is read with pread (chunked widening for f16/bf16), or, for aligned
 * F32 tensors, exposed straight from a private mapping of the file.
 * ref: huggingface/safetensors docs "Format".
 */
#include "model/safetensors.h"
#include "base/internal.h" /* ss_ckd_mul */

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int err(char *errmsg, int code, const char *path, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(errmsg, SS_ERRMSG_MAX, "%s: ", path);
	if (k < 0 || k >= SS_ERRMSG_MAX)
		return code;
	va_start(ap, fmt);
	vsnprintf(errmsg + k, SS_ERRMSG_MAX - (size_t)k, fmt, ap);
	va_end(ap);
	return code;
}

/* Reads exactly n bytes at off; SS_ERR_TRUNCATED at EOF. */
static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return SS_ERR_IO;
		}
		if (r == 0)
			return SS_ERR_TRUNCATED;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Element size of a safetensors dtype name; 0 if the name is unknown. */
static size_t dtype_size(const char *s, int *supported, ss_dtype *dt)
{
	static const struct { const char *name; size_t size; int ss; } tab[] = {
		{"F32", 4, SS_DTYPE_F32}, {"F16", 2, SS_DTYPE_F16}, {"BF16", 2, SS_DTYPE_BF16},
		{"F64", 8, -1}, {"I64", 8, -1}, {"U64", 8, -1}, {"I32", 4, -1}, {"U32", 4, -1},
		{"I16", 2, -1}, {"U16", 2, -1}, {"I8", 1, -1}, {"U8", 1, -1}, {"BOOL", 1, -1},
		{"F8_E4M3", 1, -1}, {"F8_E5M2", 1, -1},
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (!strcmp(s, tab[i].name)) {
			*supported = tab[i].ss >= 0;
			if (*supported)
				*dt = (ss_dtype)tab[i].ss;
			return tab[i].size;
		}
	return 0;
}

/* JSON number → non-negative integer (exact), else -1. */
static int64_t json_u64(const cJSON *j)
{
	if (!cJSON_IsNumber(j))
		return -1;
	double v = j->valuedouble;
	if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(int64_t)v)
		return -1;
	return (int64_t)v;
}

static int parse_entry(ss_safetensors_tensor *t, const cJSON *e, uint64_t data_start,
                       uint64_t data_len, const char *path, char *errmsg)
{
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
	    !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
		return err(errmsg, SS_ERR_FORMAT, path, "%s: header entry needs dtype, shape, data_offsets", t->name);
	size_t esz = dtype_size(dt->valuestring, &t->supported, &t->dtype);
	if (!esz)
		return err(errmsg, SS_ERR_FORMAT, path, "%s: unknown dtype \"%.16s\"", t->name, dt->valuestring);
	snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt->valuestring);
	int nd = cJSON_GetArraySize(sh);
	if (nd > SS_SAFETENSORS_MAXDIM)
		return err(errmsg, SS_ERR_FORMAT, path, "%s: %d dimensions", t->name, nd);
	t->ndim = nd;
	uint64_t numel = 1;
	for (int d = 0; d < nd; d++) {
		int64_t v = json_u64(cJSON_GetArrayItem(sh, d));
		if (v < 0)
			return err(errmsg, SS_ERR_FORMAT, path, "%s: bad shape", t->name);
		t->shape[d] = v;
		if (ss_ckd_mul(&numel, numel, (uint64_t)v))
			return err(errmsg, SS_ERR_FORMAT, path, "%s: shape overflows", t->name);
	}
	int64_t b = json_u64(cJSON_GetArrayItem(of, 0)), e2 = json_u64(cJSON_GetArrayItem(of, 1));
	uint64_t bytes;
	if (b < 0 || e2 < 0 || e2 < b)
		return err(errmsg, SS_ERR_FORMAT, path, "%s: bad data_offsets", t->name);
	if (ss_ckd_mul(&bytes, numel, (uint64_t)esz) || bytes != (uint64_t)(e2 - b))
		return err(errmsg, SS_ERR_FORMAT, path,
		           "%s: data_offsets [%lld,%lld) hold %lld bytes, shape x %s needs %llu",
		           t->name, (long long)b, (long long)e2, (long long)(e2 - b), t->dtype_name,
		           (unsigned long long)bytes);
	if ((uint64_t)e2 > data_len)
		return err(errmsg, SS_ERR_TRUNCATED, path,
		           "%s: data_offsets [%lld,%lld) overrun the %llu data bytes in the file",
		           t->name, (long long)b, (long long)e2, (unsigned long long)data_len);
	t->begin = data_start + (uint64_t)b;
	t->end = data_start + (uint64_t)e2;
	return 0;
}


/* Opens path into st->fd (a regular file) and sets st->file_size. */
static int open_file(ss_safetensors *st, const char *path, char *errmsg)
{
	st->fd = ss_open_regular(path);
	if (st->fd == -2)
		return err(errmsg, SS_ERR_IO, path, "not a regular file");
	if (st->fd < 0)
		return err(errmsg, errno == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO, path, "%s",
			   strerror(errno));
	struct stat sb;
	if (fstat(st->fd, &sb))
		return err(errmsg, SS_ERR_IO, path, "%s", strerror(errno));
	st->file_size = (uint64_t)sb.st_size;
	return 0;
}

/* The JSON header: its length (8 bytes little-endian, bounded by the file
 * and SS_SAFETENSORS_MAX_HEADER) into *hlen, the object into *root. */
static int read_header(const ss_safetensors *st, const char *path, uint64_t *hlen, cJSON **root,
		       char *errmsg)
{
	uint8_t lenbuf[8];
	int rc;
	if (st->file_size < 8)
		return err(errmsg, SS_ERR_TRUNCATED, path, "file of %llu bytes has no header",
		           (unsigned long long)st->file_size);
	if ((rc = pread_full(st->fd, lenbuf, 8, 0)))
		return err(errmsg, rc, path, "cannot read the header length");
	uint64_t h = 0;
	for (int i = 7; i >= 0; i--)
		h = h << 8 | lenbuf[i];
	if (h > SS_SAFETENSORS_MAX_HEADER)
		return err(errmsg, SS_ERR_TOO_LARGE, path, "header length %llu exceeds the 100 MB limit",
		           (unsigned long long)h);
	if (h > st->file_size - 8)
		return err(errmsg, SS_ERR_TRUNCATED, path, "header length %llu exceeds the file size %llu",
			   (unsigned long long)h, (unsigned long long)st->file_size);
	if (h < 2)
		return err(errmsg, SS_ERR_FORMAT, path, "empty header");
	char *hdr = malloc(h + 1);
	if (!hdr)
		return err(errmsg, SS_ERR_NOMEM, path, "out of memory");
	if ((rc = pread_full(st->fd, hdr, h, 8))) {
		free(hdr);
		return err(errmsg, rc, path, "cannot read the header");
	}
	hdr[h] = 0;
	*root = cJSON_ParseWithLength(hdr, h);
	free(hdr);
	if (!cJSON_IsObject(*root)) {
		cJSON_Delete(*root);
		*root = NULL;
		return err(errmsg, SS_ERR_FORMAT, path, "header is not a JSON object");
	}
	*hlen = h;
	return 0;
}

/* The header's tensors (all but __metadata__) into st->t, each checked
 * against the data section that follows the hlen bytes of header. */
static int read_entries(ss_safetensors *st, const cJSON *root, uint64_t hlen, const char *path,
			char *errmsg)
{
	size_t n = 0;
	for (const cJSON *e = root->child; e; e = e->next)
		n++;
	if (!(st->t = calloc(n ? n : 1, sizeof *st->t)))
		return err(errmsg, SS_ERR_NOMEM, path, "out of memory");
	uint64_t data_start = 8 + hlen, data_len = st->file_size - data_start;
	for (const cJSON *e = root->child; e; e = e->next) {
		if (!e->string)
			return err(errmsg, SS_ERR_FORMAT, path, "header entry without a name");
		if (!strcmp(e->string, "__metadata__"))
			continue;
		ss_safetensors_tensor *t = &st->t[st->n];
		if (!(t->name = strdup(e->string)))
			return err(errmsg, SS_ERR_NOMEM, path, "out of memory");
		st->n++;
		int rc = parse_entry(t, e, data_start, data_len, path, errmsg);
		if (rc)
			return rc;
	}
	return 0;
}

int ss_safetensors_open(ss_safetensors *st, const char *path, char *errmsg)
{
	memset(st, 0, sizeof *st);
	st->fd = -1;
	st->path = strdup(path);
	if (!st->path)
		return err(errmsg, SS_ERR_NOMEM, path, "out of memory");
	cJSON *root = NULL;
	uint64_t hlen = 0;
	int rc = open_file(st, path, errmsg);
	if (!rc && !(rc = read_header(st, path, &hlen, &root, errmsg)))
		rc = read_entries(st, root, hlen, path, errmsg);
	cJSON_Delete(root);
	if (rc)
		ss_safetensors_close(st); /* after the message: closing zeroes st */
	return rc;
}

const ss_safetensors_tensor *ss_safetensors_find(const ss_safetensors *st, const char *name)
{
	for (size_t i = 0; i < st->n; i++)
		if (!strcmp(st->t[i].name, name))
			return &st->t[i];
	return NULL;
}

int ss_safetensors_read_f32(ss_safetensors *st, const ss_safetensors_tensor *t,
                            size_t first, size_t n, float *dst, char *errmsg)
{
	size_t esz = ss_dtype_size(t->dtype);
	uint64_t off = t->begin + (uint64_t)first * esz;
	if (!t->supported || off + (uint64_t)n * esz > t->end)
		return err(errmsg, SS_ERR_INVALID, st->path, "%s: bad read request", t->name);
	int rc;
	if (t->dtype == SS_DTYPE_F32) {
		if ((rc = pread_full(st->fd, dst, n * 4, off)))
			return err(errmsg, rc, st->path, "%s: read failed%s", t->name,
			           rc == SS_ERR_TRUNCATED ? " (file truncated)" : "");
		return 0;
	}
	/* Widen through a bounded scratch buffer. */
	enum { CHUNK = 1 << 16 };
	uint16_t *scratch = malloc((n < CHUNK ? n : CHUNK) * 2 + 2);
	if (!scratch)
		return err(errmsg, SS_ERR_NOMEM, st->path, "out of memory");
	for (size_t i = 0; i < n; i += CHUNK) {
		size_t k = n - i < CHUNK ? n - i : CHUNK;
		if ((rc = pread_full(st->fd, scratch, k * 2, off + (uint64_t)i * 2))) {
			free(scratch);
			return err(errmsg, rc, st->path, "%s: read failed%s", t->name,
			           rc == SS_ERR_TRUNCATED ? " (file truncated)" : "");
		}
		ss_to_f32(dst + i, scratch, t->dtype, k);
	}
	free(scratch);
	return 0;
}

const float *ss_safetensors_map_f32(ss_safetensors *st, const ss_safetensors_tensor *t)
{
	if (!t->supported || t->dtype != SS_DTYPE_F32 || t->begin % 4)
		return NULL;
	if (!st->map) {
		if (st->file_size == 0 || st->file_size > SIZE_MAX)
			return NULL;
		void *p = mmap(NULL, (size_t)st->file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE,
		               st->fd, 0);
		if (p == MAP_FAILED)
			return NULL;
		st->map = p;
		st->map_len = (size_t)st->file_size;
	}
	return (const float *)((const uint8_t *)st->map + t->begin);
}

void ss_safetensors_close(ss_safetensors *st)
{
	if (st->map)
		munmap(st->map, st->map_len);
	if (st->fd >= 0)
		close(st->fd);
	for (size_t i = 0; i < st->n; i++)
		free(st->t[i].name);
	free(st->t);
	free(st->path);
	memset(st, 0, sizeof *st);
	st->fd = -1;
}
