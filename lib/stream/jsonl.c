/*
 * jsonl.c — JSON in and out. In: the one rule of every JSON-lines input
 * (ss-decode --prompts, ss-score --pairs, ss-eval recall --qa, ss-retrieve's
 * batch queries, ss-train --data): one object a line, no NUL in a string, no
 * unknown key, integers exact. cJSON does the parsing; this adds what it
 * cannot say: it ends strings at a NUL (the text would be cut short
 * silently) and holds numbers as doubles (2^53 + 1 would be rounded). The
 * one reader of such a file's lines (ss_jsonl_reader: line numbers, the
 * 16 MiB line bound, byte offsets), moved here from ss-train's data and the
 * tools' model_cli.c (issue 51 item 1), with their messages. Out: the one
 * escaper of strings in JSON and TSV output (ss_escape). JSON: RFC 8259.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "ss.h"

int ss_json_has_nul(const char *p, size_t n)
{
	if (memchr(p, 0, n))
		return 1;
	for (size_t i = 0; i + 1 < n; i++)
		if (p[i] == '\\') {
			if (p[i + 1] == 'u' && i + 5 < n && !memcmp(p + i + 2, "0000", 4))
				return 1;
			i++;
		}
	return 0;
}

/* Skips white space in p[*i..n). */
static void skip_ws(const char *p, size_t n, size_t *i)
{
	while (*i < n && (p[*i] == ' ' || p[*i] == '\t' || p[*i] == '\r' || p[*i] == '\n'))
		++*i;
}

/* Walks the value at p[*i..n) beside v, its parse (the same text: the
 * children in source order), giving each number its source text as its
 * valuestring (freed by cJSON_Delete). 0, or SS_ERR_NOMEM. */
static int keep_numbers(const char *p, size_t n, size_t *i, cJSON *v)
{
	skip_ws(p, n, i);
	if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
		++*i; /* '{' or '[' */
		cJSON *c;
		cJSON_ArrayForEach(c, v) {
			skip_ws(p, n, i);
			if (cJSON_IsObject(v)) { /* the key, then ':' */
				size_t k = *i + 1;
				while (k < n && p[k] != '"')
					k += p[k] == '\\' ? 2 : 1;
				*i = k + 1;
				skip_ws(p, n, i);
				++*i;
			}
			if (keep_numbers(p, n, i, c))
				return SS_ERR_NOMEM;
			skip_ws(p, n, i);
			++*i; /* ',' or the closing bracket */
		}
		if (!v->child) { /* empty: its closing bracket */
			skip_ws(p, n, i);
			++*i;
		}
		return 0;
	}
	size_t s = *i;
	if (cJSON_IsString(v)) {
		size_t k = *i + 1;
		while (k < n && p[k] != '"')
			k += p[k] == '\\' ? 2 : 1;
		*i = k + 1;
		return 0;
	}
	while (*i < n && strchr("+-0123456789.eEtruefalsn", p[*i]))
		++*i;
	if (cJSON_IsNumber(v)) {
		if (!(v->valuestring = malloc(*i - s + 1)))
			return SS_ERR_NOMEM;
		memcpy(v->valuestring, p + s, *i - s);
		v->valuestring[*i - s] = 0;
	}
	return 0;
}

int ss_jsonl_parse(const char *line, size_t len, const char *const *keys, cJSON **out, char *errmsg)
{
	*out = NULL;
	cJSON *o = cJSON_ParseWithLength(line, len);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return ss_errf(errmsg, SS_ERR_FORMAT, "not a JSON object");
	}
	if (ss_json_has_nul(line, len)) {
		cJSON_Delete(o);
		return ss_errf(errmsg, SS_ERR_FORMAT, "a NUL character (\\u0000) in a string");
	}
	const cJSON *c;
	cJSON_ArrayForEach(c, o) {
		size_t k = 0;
		while (keys && keys[k] && strcmp(keys[k], c->string))
			k++;
		if (keys && !keys[k]) {
			char known[512] = "";
			for (size_t j = 0; keys[j]; j++)
				snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", j ? ", " : "", keys[j]);
			ss_errf(errmsg, SS_ERR_FORMAT, "unknown key \"%.200s\" (known: %s)", c->string, known);
			cJSON_Delete(o);
			return SS_ERR_FORMAT;
		}
	}
	size_t i = 0;
	if (keep_numbers(line, len, &i, o)) {
		cJSON_Delete(o);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	*out = o;
	return 0;
}

int ss_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (!cJSON_IsNumber(v))
		return SS_ERR_INVALID;
	const char *s = v->valuestring;
	if (s && strspn(s + (*s == '-'), "0123456789") == strlen(s + (*s == '-')) && s[*s == '-']) {
		errno = 0;
		char *end;
		long long x = strtoll(s, &end, 10);
		if (errno || *end || x < lo || x > hi)
			return SS_ERR_INVALID;
		*out = x;
		return 0;
	}
	/* a fraction or an exponent ("1e3", "7.0"): an integer only where the
	 * double holds it exactly */
	double d = v->valuedouble;
	if (!(fabs(d) <= 9007199254740992.0) || d != floor(d) || d < (double)lo || d > (double)hi)
		return SS_ERR_INVALID;
	*out = (int64_t)d;
	return 0;
}

long ss_getline(char **line, size_t *cap, FILE *f, size_t max)
{
	size_t n = 0;
	int ch;
	while ((ch = getc_unlocked(f)) != EOF) {
		if (n == max) {
			while (ch != EOF && ch != '\n')
				ch = getc_unlocked(f);
			return SS_ERR_TOO_LARGE;
		}
		if (n + 1 >= *cap) { /* room for ch and the NUL: n + 2 <= max + 1 */
			size_t nc = *cap ? 2 * *cap : 256;
			if (max < SIZE_MAX && nc > max + 1)
				nc = max + 1;
			char *nl = realloc(*line, nc);
			if (!nl)
				return SS_ERR_NOMEM;
			*line = nl;
			*cap = nc;
		}
		(*line)[n++] = (char)ch;
		if (ch == '\n')
			break;
	}
	if (ferror(f))
		return SS_ERR_IO;
	if (n == 0)
		return 0;
	(*line)[n] = 0;
	return (long)n;
}

struct ss_jsonl_reader {
	char *path;
	FILE *f;
	char *line;
	size_t cap;
	long lineno;
	int64_t pos;        /* byte offset of the next line (counted from f's position at open) */
	int seekable;       /* f's position was known at open: pos is an offset in the file */
	uint64_t max_bytes; /* ss_jsonl_reader_limit's bound (0: none) */
	const char *what;
	char where[600];    /* "PATH: line N" */
};

int ss_jsonl_reader_open(ss_jsonl_reader **out, const char *path, char *errmsg)
{
	*out = NULL;
	if (!strcmp(path, "-"))
		return ss_jsonl_reader_open_file(out, stdin, path, errmsg);
	/* a regular file, never waited on (a FIFO would block the open) */
	int fd = ss_open_regular(path);
	if (fd == -2)
		return ss_errf(errmsg, SS_ERR_INVALID, "%s: not a regular file (a FIFO, a directory or a device)",
			       path);
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
	if (!f) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return ss_errf(errmsg, SS_ERR_IO, "%s: %s", path, strerror(e));
	}
	return ss_jsonl_reader_open_file(out, f, path, errmsg);
}

int ss_jsonl_reader_open_file(ss_jsonl_reader **out, FILE *f, const char *path, char *errmsg)
{
	ss_jsonl_reader *r = calloc(1, sizeof *r);
	if (!r || !(r->path = strdup(path))) {
		free(r);
		if (f != stdin)
			fclose(f);
		*out = NULL;
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	r->f = f;
	long at = ftell(f); /* -1 for a pipe */
	r->seekable = at >= 0;
	r->pos = at >= 0 ? at : 0;
	*out = r;
	return 0;
}

/* "64 MiB" for a whole number of MiB, else "N bytes". */
static int too_large(const ss_jsonl_reader *r, char *errmsg)
{
	char size[32];
	if (r->max_bytes % (UINT64_C(1) << 20) == 0)
		snprintf(size, sizeof size, "%llu MiB", (unsigned long long)(r->max_bytes >> 20));
	else
		snprintf(size, sizeof size, "%llu bytes", (unsigned long long)r->max_bytes);
	return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: larger than %s, the limit for %s", r->path, size, r->what);
}

int ss_jsonl_reader_limit(ss_jsonl_reader *r, uint64_t max, const char *what, char *errmsg)
{
	struct stat sb;
	r->max_bytes = max;
	r->what = what;
	if (max && fstat(fileno(r->f), &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max)
		return too_large(r, errmsg);
	return 0;
}

int ss_jsonl_reader_next(ss_jsonl_reader *r, const char *const *keys, const char *expected, cJSON **out,
			 char *errmsg)
{
	*out = NULL;
	for (;;) {
		long n = ss_getline(&r->line, &r->cap, r->f, SS_JSONL_LINE_MAX);
		int e = errno;
		if (n == 0)
			return 0;
		if (n == SS_ERR_NOMEM)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		r->lineno++;
		snprintf(r->where, sizeof r->where, "%s: line %ld", r->path, r->lineno);
		if (n == SS_ERR_TOO_LARGE)
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: longer than 16 MiB", r->where);
		if (n < 0)
			return ss_errf(errmsg, SS_ERR_IO, "%s: read error: %s", r->path, strerror(e));
		r->pos += n;
		if (r->max_bytes && (uint64_t)r->pos > r->max_bytes)
			return too_large(r, errmsg);
		if (strspn(r->line, " \t\r\n") == (size_t)n)
			continue;
		char err[SS_ERRMSG_MAX];
		int rc = ss_jsonl_parse(r->line, (size_t)n, keys, out, err);
		if (rc == SS_ERR_FORMAT && !strcmp(err, "not a JSON object"))
			return ss_errf(errmsg, rc, "%s: not a JSON object%s%s", r->where, expected ? ": expected " : "",
				       expected ? expected : "");
		if (rc)
			return ss_errf(errmsg, rc, "%s: %s", r->where, err);
		return 1;
	}
}

const char *ss_jsonl_reader_where(const ss_jsonl_reader *r)
{
	return r->where;
}

long ss_jsonl_reader_lineno(const ss_jsonl_reader *r)
{
	return r->lineno;
}

int64_t ss_jsonl_reader_tell(const ss_jsonl_reader *r)
{
	return r->seekable ? r->pos : -1;
}

int ss_jsonl_reader_seek(ss_jsonl_reader *r, int64_t offset)
{
	if (!r->seekable || offset < 0)
		return SS_ERR_INVALID;
	if (fseek(r->f, (long)offset, SEEK_SET))
		return SS_ERR_IO;
	r->pos = offset;
	r->lineno = 0;
	r->where[0] = 0;
	return 0;
}

void ss_jsonl_reader_close(ss_jsonl_reader *r)
{
	if (!r)
		return;
	if (r->f != stdin)
		fclose(r->f);
	free(r->line);
	free(r->path);
	free(r);
}

/* Bytes of the well-formed UTF-8 sequence at s[0..n) (RFC 3629 Table 3:
 * no overlong form, surrogate or code point past U+10FFFF), 0 when s[0]
 * starts none; s[0] >= 0x80. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	if (!len || len > n)
		return 0;
	for (size_t k = 1; k < len; k++)
		if ((s[k] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) || (c == 0xf0 && s[1] < 0x90) ||
	    (c == 0xf4 && s[1] >= 0x90))
		return 0;
	return len;
}

void ss_escape(FILE *f, const char *s, size_t len, ss_esc_mode mode)
{
	const unsigned char *u = (const unsigned char *)s;
	if (len == (size_t)-1)
		len = strlen(s);
	for (size_t i = 0; i < len;) {
		unsigned char c = u[i];
		size_t k = c < 0x80 ? 1 : utf8_seq(u + i, len - i); /* 0: a byte that is not UTF-8 */
		/* the code point of a control character (C0, DEL, C1), else -1 */
		int ctl = c < 0x20 || c == 0x7f ? c : c == 0xc2 && k == 2 && u[i + 1] < 0xa0 ? u[i + 1] : -1;
		if ((c == '\\' && mode != SS_ESC_LAYOUT) || (c == '"' && mode == SS_ESC_JSON)) {
			fputc('\\', f);
			fputc(c, f);
		} else if ((c == '\t' || c == '\n') && mode == SS_ESC_LAYOUT) {
			fputc(c, f);
		} else if (c == '\t' || c == '\n' || c == '\r') {
			fputs(c == '\t' ? "\\t" : c == '\n' ? "\\n" : "\\r", f);
		} else if (ctl >= 0 && mode == SS_ESC_JSON) {
			fprintf(f, "\\u%04x", (unsigned)ctl);
		} else if (!k && mode == SS_ESC_JSON) {
			fputs("\xef\xbf\xbd", f);
		} else if (ctl >= 0 || !k) {
			for (size_t j = 0; j < (k ? k : 1); j++)
				fprintf(f, "\\x%02x", u[i + j]);
		} else {
			fwrite(s + i, 1, k, f);
		}
		i += k ? k : 1;
	}
}

void ss_json_str(FILE *f, const char *s, size_t len)
{
	fputc('"', f);
	ss_escape(f, s, len, SS_ESC_JSON);
	fputc('"', f);
}
