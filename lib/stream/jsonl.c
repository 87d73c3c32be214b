/*
 * jsonl.c — the one rule of every JSON-lines input (ss-decode --prompts,
 * ss-score --pairs, ss-eval recall --qa, ss-retrieve's batch queries,
 * ss-train --data): one object a line, no NUL in a string, no unknown key,
 * integers exact. cJSON does the parsing; this adds what it cannot say: it
 * ends strings at a NUL (the text would be cut short silently) and holds
 * numbers as doubles (2^53 + 1 would be rounded). JSON: RFC 8259.
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
