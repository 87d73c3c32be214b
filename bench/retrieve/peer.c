/*
 * peer.c — bench/retrieve's peer, SQLite FTS5 (see retrieve.h): --scale
 * times it against the index on the index's own terms (tokenizer "ss"),
 * --qa scores it as the index queried before schema 2 (FTS5's porter
 * tokenizer).
 */
#include <ctype.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "retrieve.h"

void peer_open(fts_peer *p, const char *path, const char *tokenize)
{
	char sql[2][512];
	snprintf(sql[0], sizeof sql[0],
		 "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;"
		 "CREATE VIRTUAL TABLE fts USING fts5(text, tokenize = '%s'); BEGIN", tokenize);
	snprintf(sql[1], sizeof sql[1],
		 "CREATE VIRTUAL TABLE temp.q USING fts5(text, tokenize = '%s');"
		 "CREATE VIRTUAL TABLE temp.qv USING fts5vocab('temp', 'q', 'instance');"
		 "CREATE VIRTUAL TABLE temp.v USING fts5vocab('main', 'fts', 'row');", tokenize);
	if (sqlite3_open(path, &p->db) != SQLITE_OK || ss_bm25_tokenizer_register(p->db) ||
	    sqlite3_exec(p->db, sql[0], 0, 0, 0) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "INSERT INTO fts(rowid, text) VALUES(?1, ?2)", -1, &p->ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "SELECT rowid, -rank FROM fts WHERE fts MATCH ?1 ORDER BY rank LIMIT ?2", -1,
			       &p->query, NULL) != SQLITE_OK ||
	    sqlite3_exec(p->db, sql[1], 0, 0, 0) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "SELECT doc FROM temp.v WHERE term = ?1", -1, &p->df_of, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "INSERT INTO temp.q(text) VALUES(?1)", -1, &p->term_ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "SELECT coalesce(group_concat(term, '|'), '') FROM temp.qv", -1, &p->term_of, NULL) != SQLITE_OK)
		die(path, sqlite3_errmsg(p->db));
}

/* The terms FTS5's tokenizer makes of one word, as one string (malloc'd;
 * "" for none): a word of one token gives its term. */
static char *peer_term(fts_peer *p, const char *word, size_t n)
{
	sqlite3_exec(p->db, "DELETE FROM temp.q", 0, 0, 0);
	sqlite3_bind_text(p->term_ins, 1, word, (int)n, SQLITE_STATIC);
	sqlite3_step(p->term_ins);
	sqlite3_reset(p->term_ins);
	char *t = strdup(sqlite3_step(p->term_of) == SQLITE_ROW ? (const char *)sqlite3_column_text(p->term_of, 0) : "");
	sqlite3_reset(p->term_of);
	return t;
}

void peer_add(fts_peer *p, int64_t rowid, const char *text, size_t len)
{
	sqlite3_bind_int64(p->ins, 1, rowid);
	sqlite3_bind_text(p->ins, 2, text, (int)len, SQLITE_STATIC);
	if (sqlite3_step(p->ins) != SQLITE_DONE)
		die("fts5 insert", sqlite3_errmsg(p->db));
	sqlite3_reset(p->ins);
}

void peer_commit(fts_peer *p)
{
	if (sqlite3_exec(p->db, "INSERT INTO fts(fts) VALUES('optimize'); COMMIT", 0, 0, 0) != SQLITE_OK)
		die("fts5 commit", sqlite3_errmsg(p->db));
}

void peer_close(fts_peer *p)
{
	sqlite3_finalize(p->ins);
	sqlite3_finalize(p->query);
	sqlite3_finalize(p->term_ins);
	sqlite3_finalize(p->term_of);
	sqlite3_finalize(p->df_of);
	sqlite3_close(p->db);
}

int peer_query(fts_peer *p, const char *expr, int k, int64_t *rowid)
{
	int n = 0;
	sqlite3_bind_text(p->query, 1, expr, -1, SQLITE_STATIC);
	sqlite3_bind_int(p->query, 2, k);
	while (n < k && sqlite3_step(p->query) == SQLITE_ROW)
		rowid[n++] = sqlite3_column_int64(p->query, 0);
	sqlite3_reset(p->query);
	return n;
}

char *fts_expr(fts_peer *p_, const char *q, int same_terms)
{
	char **terms = malloc((strlen(q) + 1) * sizeof *terms);
	size_t n_terms = 0;
	size_t qn = strlen(q), mn = 0;
	char *m = malloc(qn * 8 + 8);
	m[0] = 0;
	const char *p = q;
	while (*p) {
		while (*p && isspace((unsigned char)*p))
			p++;
		const char *t = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		size_t tn = (size_t)(p - t);
		int word = 0;
		for (size_t i = 0; i < tn; i++)
			word |= isalnum((unsigned char)t[i]) || (unsigned char)t[i] >= 0x80;
		if (!word)
			continue;
		char piece[1024];
		size_t pn = 0;
		piece[pn++] = '"';
		for (size_t i = 0; i < tn && pn < sizeof piece - 4; i++) {
			if (t[i] == '"')
				piece[pn++] = '"';
			piece[pn++] = t[i];
		}
		piece[pn++] = '"';
		piece[pn] = 0;
		int dup = 0;
		if (same_terms) {
			char *term = peer_term(p_, t, tn);
			for (size_t i = 0; i < n_terms && !dup; i++)
				dup = !strcmp(terms[i], term);
			if (!dup && p_->max_df) {
				/* Query-term pruning by document frequency. */
				sqlite3_bind_text(p_->df_of, 1, term, -1, SQLITE_STATIC);
				dup = sqlite3_step(p_->df_of) == SQLITE_ROW && sqlite3_column_int64(p_->df_of, 0) > p_->max_df;
				sqlite3_reset(p_->df_of);
			}
			if (dup)
				free(term);
			else
				terms[n_terms++] = term;
		} else {
			char *at = strstr(m, piece); /* whole quoted pieces only */
			dup = at && (at == m || at[-1] == ' ') && (at[pn] == 0 || at[pn] == ' ');
		}
		if (!dup)
			mn += (size_t)sprintf(m + mn, "%s%s", mn ? " OR " : "", piece);
	}
	for (size_t i = 0; i < n_terms; i++)
		free(terms[i]);
	free(terms);
	return m;
}
