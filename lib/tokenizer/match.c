/* match.c — the added tokens, matched leftmost-longest in text; see internal.h. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static int pat_cmp(const void *a, const void *b)
{
	const struct pattern *x = a, *y = b;
	unsigned char cx = (unsigned char)x->s[0], cy = (unsigned char)y->s[0];
	if (cx != cy)
		return cx < cy ? -1 : 1;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return 0;
}

void tok_matcher_build(struct matcher *m)
{
	qsort(m->pats, m->n, sizeof *m->pats, pat_cmp);
	memset(m->start, 0, sizeof m->start);
	memset(m->single, 0, sizeof m->single);
	memset(m->pair, 0, sizeof m->pair);
	m->only_first = m->n ? (unsigned char)m->pats[0].s[0] : -1;
	for (size_t k = 0; k < m->n; k++) {
		const unsigned char *s = (const unsigned char *)m->pats[k].s;
		m->start[s[0] + 1]++;
		if (s[0] != m->only_first)
			m->only_first = -1;
		if (m->pats[k].len == 1)
			m->single[s[0]] = 1;
		else {
			unsigned key = (unsigned)s[0] << 8 | s[1];
			m->pair[key >> 3] |= (uint8_t)(1u << (key & 7));
		}
	}
	for (int b = 0; b < 256; b++)
		m->start[b + 1] += m->start[b];
}

int tok_matcher_find(const struct matcher *m, const char *s, size_t n, size_t from,
                        size_t *at, size_t *mlen, int32_t *id)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = from;
	while (i < n) {
		if (m->only_first >= 0) {
			const unsigned char *q = memchr(p + i, m->only_first, n - i);
			if (!q)
				return 0;
			i = (size_t)(q - p);
		}
		unsigned b = p[i];
		if (m->start[b] == m->start[b + 1]) {
			i++;
			continue;
		}
		if (!m->single[b]) {
			if (i + 1 >= n) {
				i++;
				continue;
			}
			unsigned key = b << 8 | p[i + 1];
			if (!(m->pair[key >> 3] & (1u << (key & 7)))) {
				i++;
				continue;
			}
		}
		for (uint32_t k = m->start[b]; k < m->start[b + 1]; k++) {
			const struct pattern *pt = &m->pats[k];
			if (pt->len <= n - i && !memcmp(pt->s, p + i, pt->len)) {
				*at = i;
				*mlen = pt->len;
				*id = pt->id;
				return 1;
			}
		}
		i++;
	}
	return 0;
}

void tok_matcher_free(struct matcher *m)
{
	for (size_t k = 0; k < m->n; k++)
		free(m->pats[k].s);
	free(m->pats);
	m->pats = NULL;
	m->n = 0;
}
