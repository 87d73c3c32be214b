/* utf8.c — UTF-8 validation and NFC for the tokenizer; see internal.h. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int ss_utf8_validate(const char *s, size_t len, size_t *bad_offset)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < len) {
		if (i + 8 <= len) {
			uint64_t w;
			memcpy(&w, p + i, 8);
			if (!(w & UINT64_C(0x8080808080808080))) {
				i += 8;
				continue;
			}
		}
		unsigned c = p[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t n;
		unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
		if (c >= 0xC2 && c <= 0xDF)
			n = 2;
		else if (c >= 0xE0 && c <= 0xEF) {
			n = 3;
			if (c == 0xE0)
				lo = 0xA0; /* overlong */
			else if (c == 0xED)
				hi = 0x9F; /* surrogates */
		} else if (c >= 0xF0 && c <= 0xF4) {
			n = 4;
			if (c == 0xF0)
				lo = 0x90; /* overlong */
			else if (c == 0xF4)
				hi = 0x8F; /* above U+10FFFF */
		} else
			goto bad;
		if (len - i < n || p[i + 1] < lo || p[i + 1] > hi)
			goto bad;
		for (size_t k = 2; k < n; k++)
			if ((p[i + k] & 0xC0) != 0x80)
				goto bad;
		i += n;
	}
	return 0;
bad:
	if (bad_offset)
		*bad_offset = i;
	return SS_ERR_UTF8;
}

int tok_utf8_fail(char *errmsg, size_t off)
{
	return ss_errf(errmsg, SS_ERR_UTF8, "invalid UTF-8 at byte offset %zu", off);
}


size_t tok_utf8_put(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

int tok_buf_put(struct buf *b, const void *src, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np)
			return SS_ERR_NOMEM;
		b->p = np;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, src, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

/* Bytes >= 0xCC begin code points >= U+0300; all below are NFC-stable
 * starters that never combine with what precedes them. */
#define NFC_HIGH 0xCC
/* Neighbouring stretches that need NFC closer than this are normalized in
 * one call. */
#define NFC_JOIN 256

/*
 * NFC of valid UTF-8 s. Sets *out = s when s has no code point >= U+0300
 * (then it is NFC as is); otherwise writes the result to b (reset first)
 * and sets *out = b->p. Only stretches around code points >= U+0300 go
 * through utf8proc: NFC(x y) = NFC(x) NFC(y) whenever y begins with an
 * ASCII character, which is a starter that no composition takes as its
 * second part and that blocks canonical reordering.
 * ref: UAX #15 §9 (detecting normalization forms, stable code points).
 */
int tok_nfc(const char *s, size_t n, struct buf *b, const char **out, size_t *out_n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n && p[i] < NFC_HIGH)
		i++;
	*out = s;
	*out_n = n;
	if (i == n)
		return 0;
	b->n = 0;
	size_t done = 0; /* s[0..done) is in b; done is 0 or at an ASCII byte */
	while (i < n) {
		size_t start = i;
		while (start > done && p[start - 1] >= 0x80)
			start--;
		if (start > done)
			start--; /* include the ASCII starter a mark may compose with */
		size_t end = i;
		for (;;) {
			while (end < n && p[end] >= 0x80)
				end++;
			size_t k = end, lim = n - end < NFC_JOIN ? n : end + NFC_JOIN;
			while (k < lim && p[k] < NFC_HIGH)
				k++;
			if (k == lim)
				break;
			end = k;
		}
		if (tok_buf_put(b, s + done, start - done))
			return SS_ERR_NOMEM;
		utf8proc_uint8_t *dst = NULL;
		utf8proc_ssize_t r = utf8proc_map(p + start, (utf8proc_ssize_t)(end - start), &dst,
		                                  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
		if (r < 0)
			return r == UTF8PROC_ERROR_NOMEM ? SS_ERR_NOMEM : SS_ERR_UTF8;
		int rc = tok_buf_put(b, dst, (size_t)r);
		free(dst);
		if (rc)
			return rc;
		done = end;
		i = end;
		while (i < n && p[i] < NFC_HIGH)
			i++;
	}
	if (tok_buf_put(b, s + done, n - done))
		return SS_ERR_NOMEM;
	*out = b->p;
	*out_n = b->n;
	return 0;
}
