/*
 * jsonl.c — JSON in and out. In: the one rule of every JSON-lines input
 * (ss-decode --prompts, ss-score --pairs, ss-eval recall --qa, ss-retrieve's
 * batch queries, ss-train --data): one object a line, no NUL in a string, no
 * unknown key, integers exact. cJSON does the parsing; this adds what it
 * cannot say: it ends strings at a NUL (the text would be cut short
 * silently) and holds numbers as doubles (2^53 + 1 would be rounded). Out:
 * the one escaper of strings in JSON and TSV output (ss_escape). JSON:
 * RFC 8259.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
