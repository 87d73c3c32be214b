/* index_commit.c — the commit of a build (ss_index_commit): the phases
 * that check the documents the build leaves, make documents stateless,
 * apply the state budget, and write the positions, the postings and the
 * meta rows before the transaction commits. See ss_index.h; the build's
 * other calls are lib/index/index_build.c. */
#include "index/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Positions for the documents that have none (indexed by a build before
 * positions existed) from their stored texts, then meta.positions: '2'
 * when every document has them (*complete 1: the commit then writes each
 * term's positions beside its postings, term_positions), else '0'
 * (phrases and proximity are then refused: lib/index/bm25_postings.c).
 * '1', the value builds before term_positions wrote (and still write:
 * they leave term_positions stale), says that positions alone are there. */
static int migrate_positions(ss_index *ix, int *complete, char *errmsg)
{
	sqlite3_stmt *st;
	int rc = ix_prep(ix, &st,
			 "SELECT d.rid, t.text FROM docs d JOIN texts t ON t.rid = d.rid AND length(t.text) = d.text_len"
			 " WHERE d.rid NOT IN (SELECT rid FROM positions)", errmsg);
	if (rc)
		return rc;
	int s;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const void *vec, *seq;
		size_t vec_len, seq_len;
		int64_t n_terms, rid = sqlite3_column_int64(st, 0);
		const char *text = sqlite3_column_blob(st, 1);
		size_t len = (size_t)sqlite3_column_bytes(st, 1);
		if (!(rc = ss_bm25_terms(ix->bm25, text, len, &vec, &vec_len, &seq, &seq_len, &n_terms, errmsg)))
			rc = ix_put_positions(ix, rid, seq, seq_len, errmsg);
	}
	if (!rc && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "reading the texts");
	sqlite3_finalize(st);
	if (rc || (rc = ix_exec(ix, "DELETE FROM positions WHERE rid NOT IN (SELECT rid FROM docs);"
				    "INSERT INTO meta VALUES('positions', CASE WHEN EXISTS(SELECT 1 FROM docs"
				    " WHERE rid NOT IN (SELECT rid FROM positions)) THEN '0' ELSE '2' END)"
				    " ON CONFLICT(key) DO UPDATE SET value = excluded.value", errmsg)) ||
	    (rc = ix_prep(ix, &st, "SELECT value = '2' FROM meta WHERE key = 'positions'", errmsg)))
		return rc;
	if (sqlite3_step(st) == SQLITE_ROW)
		*complete = sqlite3_column_int(st, 0);
	else
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	sqlite3_finalize(st);
	return rc;
}

/* A document the commit leaves out (docs AS d): no text, or no state and
 * not a stateless one with the tokens of its text. */
#define INCOMPLETE                                                                                 \
	"(d.text_len IS NULL OR (d.file_id IS NULL AND NOT (d.rid IN (SELECT rid FROM stateless)"   \
	" AND " HAS_TOKENS ")))"
/* docs AS d has the tokens of its text. */
#define HAS_TOKENS "EXISTS(SELECT 1 FROM tokens t WHERE t.rid = d.rid AND length(t.tokens) = 4 * d.text_tokens)"
#define SS_STR_(x) #x
#define SS_STR(x) SS_STR_(x)

/* The state of budget row st (apply_budget's query), dropped: its
 * record tells the dtype to recompute it in, stored in temp.dropped
 * through ins. */
static int budget_drop(ss_index *ix, sqlite3_stmt *st, sqlite3_stmt *ins, char *errmsg)
{
	ss_index_hit h = { 0 };
	const char *id;
	int rc = ix_doc_id(st, 1, sqlite3_column_int64(st, 0), &id, errmsg);
	if (rc)
		return rc;
	const char *fp = (const char *)sqlite3_column_text(st, 5);
	h.id = (char *)id;
	h.path = ix_resolve_path(ix, (const char *)sqlite3_column_text(st, 2));
	h.offset = (uint64_t)sqlite3_column_int64(st, 3);
	h.length = (uint64_t)sqlite3_column_int64(st, 4);
	snprintf(h.fingerprint, sizeof h.fingerprint, "%s", fp ? fp : "");
	h.file_id = sqlite3_column_int64(st, 6);
	if (!h.path)
		return SS_ERR_NOMEM;
	const ss_record *rec;
	char em[SS_ERRMSG_MAX];
	rc = ss_index_read(ix, &h, 1, &rec, em);
	if (rc)
		ss_errf(errmsg, rc, "%s: %s", h.path, em);
	free(h.path);
	if (rc)
		return rc;
	if ((rc = ix_bound(sqlite3_bind_int64(ins, 1, sqlite3_column_int64(st, 0)), errmsg, "state budget")) ||
	    (rc = ix_bound(sqlite3_bind_text(ins, 2, ss_dtype_name(ix->meta.dtype), -1, SQLITE_STATIC), errmsg,
			   "state budget")))
		return rc;
	return ix_step_done(ix, ins, errmsg);
}

/* The state budget (ss_index_set_state_budget), in the commit's
 * transaction: ranks the documents with a stored state, keeps what fits and
 * makes the rest stateless. */
static int apply_budget(ss_index *ix, ss_index_build_stats *stats, char *errmsg)
{
	if (ix->budget < 0)
		return 0;
	int rc, s = SQLITE_DONE;
	sqlite3_stmt *st = NULL, *ins = NULL;
	if ((rc = ix_exec(ix, "CREATE TEMP TABLE IF NOT EXISTS dropped(rid INTEGER PRIMARY KEY, dtype TEXT NOT NULL);"
			      "DELETE FROM temp.dropped", errmsg)) ||
	    (rc = ix_prep(ix, &ins, "INSERT INTO temp.dropped VALUES(?1, ?2)", errmsg)) ||
	    (rc = ix_prep(ix, &st,
		       "SELECT d.rid, d.id, f.path, d.byte_offset, d.frame_length, d.fingerprint, d.file_id,"
		       " d.text_tokens IS d.n_tokens AND " HAS_TOKENS " AS recomputable"
		       " FROM docs d JOIN files f ON f.file_id = d.file_id LEFT JOIN temp.hits h ON h.id = d.id"
		       " ORDER BY recomputable, coalesce(h.n, 0) DESC, d.n_tokens DESC, d.id", errmsg)))
		goto done;
	int64_t used = 0, fixed_bytes = 0, n_fixed = 0;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t len = sqlite3_column_int64(st, 4);
		if (!sqlite3_column_int(st, 7)) {
			used += len;
			fixed_bytes += len;
			n_fixed++;
		} else if (used + len <= ix->budget) {
			used += len;
		} else if (!(rc = budget_drop(ix, st, ins, errmsg))) {
			stats->n_dropped_states++;
		}
	}
	if (rc)
		goto done;
	if (s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "state budget");
	else if (fixed_bytes > ix->budget)
		rc = ss_errf(errmsg, SS_ERR_TOO_LARGE,
			     "state budget of %lld bytes: %lld documents that cannot be recomputed keep their states, "
			     "%lld bytes (their tokens are not stored, or are not those of their state: add "
			     "their token streams again)",
			     (long long)ix->budget, (long long)n_fixed, (long long)fixed_bytes);
	else
		rc = ix_exec(ix,
			     "INSERT OR REPLACE INTO stateless SELECT rid, dtype FROM temp.dropped;"
			     "UPDATE docs SET file_id = NULL, byte_offset = NULL, frame_length = NULL"
			     " WHERE rid IN (SELECT rid FROM temp.dropped)", errmsg);
done:
	sqlite3_finalize(st);
	sqlite3_finalize(ins);
	return rc;
}

/* ss_index_set_stateless, in the commit's transaction: every document with
 * its text and the tokens of that text but no stored state, not stateless
 * already (so added by this build: the index held only complete ones),
 * becomes stateless of the set model, complete by INCOMPLETE's rule. */
static int make_stateless(ss_index *ix, ss_index_build_stats *stats, char *errmsg)
{
#define NO_STATE                                                                                   \
	" WHERE d.text_len IS NOT NULL AND d.file_id IS NULL AND d.rid NOT IN (SELECT rid FROM stateless)" \
	" AND " HAS_TOKENS
	if (!ix->stateless_fp[0])
		return 0;
	sqlite3_stmt *up = NULL, *ins = NULL;
	const char *what = "stateless documents";
	/* the fingerprint first: the insert ends NO_STATE */
	int rc;
	if (!(rc = ix_prep(ix, &up, "UPDATE docs AS d SET fingerprint = ?1" NO_STATE, errmsg)) &&
	    !(rc = ix_prep(ix, &ins, "INSERT INTO stateless SELECT d.rid, ?1 FROM docs d" NO_STATE, errmsg)) &&
	    !(rc = ix_bound(sqlite3_bind_text(up, 1, ix->stateless_fp, -1, SQLITE_STATIC), errmsg, what)) &&
	    !(rc = ix_step_done(ix, up, errmsg)) &&
	    !(rc = ix_bound(sqlite3_bind_text(ins, 1, ix->stateless_dtype, -1, SQLITE_STATIC), errmsg, what)) &&
	    !(rc = ix_step_done(ix, ins, errmsg)))
		stats->n_made_stateless = sqlite3_changes(ix->db);
	sqlite3_finalize(up);
	sqlite3_finalize(ins);
	return rc;
#undef NO_STATE
}

/* A row without an id (an edited file; the schema forbids it) is not
 * carried into another commit. NULL sorts first: the first row in id
 * order, read from the id's index (IS NULL on a NOT NULL column would
 * scan it all). */
static int check_ids(ss_index *ix, char *errmsg)
{
	sqlite3_stmt *st;
	int rc = ix_prep(ix, &st, "SELECT rid, id IS NULL FROM docs ORDER BY id LIMIT 1", errmsg);
	if (rc)
		return rc;
	int s = sqlite3_step(st);
	if (s == SQLITE_ROW && sqlite3_column_int(st, 1))
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document row %lld has no id",
			     (long long)sqlite3_column_int64(st, 0));
	else if (s != SQLITE_ROW && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	sqlite3_finalize(st);
	return rc;
}

/* Counts (and tells note of) the documents the commit leaves out. */
static int note_incomplete(ss_index *ix, ss_index_note_fn note, void *ctx, ss_index_build_stats *stats,
			   char *errmsg)
{
	sqlite3_stmt *st;
	int s = SQLITE_DONE, rc = ix_prep(ix, &st,
		"SELECT id, file_id IS NULL, text_len IS NULL, rid IN (SELECT rid FROM stateless), rid FROM docs d"
		" WHERE " INCOMPLETE " ORDER BY id", errmsg);
	if (rc)
		return rc;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const char *id;
		stats->n_dropped++;
		if (note && !(rc = ix_doc_id(st, 0, sqlite3_column_int64(st, 4), &id, errmsg)))
			note(ctx, id, 1,
			     sqlite3_column_int(st, 3) ? "has no stored state and no tokens of its text to recompute it "
							 "from: left out"
			     : sqlite3_column_int(st, 1) ? "has text but no state record: left out"
							 : "has a state but no token record (text): left out");
	}
	if (!rc && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	sqlite3_finalize(st);
	return rc;
}

/* Drops the incomplete documents, applies the state budget, drops what
 * no document holds any more and sets the schema version. */
static int drop_incomplete(ss_index *ix, ss_index_build_stats *stats, char *errmsg)
{
	int rc;
	if ((rc = ix_exec(ix,
			  "DELETE FROM docs AS d WHERE " INCOMPLETE ";"
			  /* a stateless document's state is its tokens' */
			  "UPDATE docs SET n_tokens = text_tokens WHERE rid IN (SELECT rid FROM stateless);", errmsg)) ||
	    (rc = apply_budget(ix, stats, errmsg)))
		return rc;
	return ix_exec(ix,
		       "DELETE FROM texts WHERE rid NOT IN (SELECT rid FROM docs);"
		       "DELETE FROM tokens WHERE rid NOT IN (SELECT rid FROM docs);"
		       "DELETE FROM stateless WHERE rid NOT IN (SELECT rid FROM docs);"
		       "DELETE FROM files WHERE file_id NOT IN (SELECT file_id FROM docs WHERE file_id IS NOT NULL);"
		       "UPDATE meta SET value = CASE WHEN EXISTS(SELECT 1 FROM stateless) THEN '"
		       SS_STR(SS_INDEX_SCHEMA_VERSION) "' ELSE '" SS_STR(SS_INDEX_SCHEMA_MIN) "' END"
		       " WHERE key = 'schema_version'", errmsg);
}

/* Token counts that disagree, among the documents this build touched:
 * counted and told to note. */
static int note_token_counts(ss_index *ix, ss_index_note_fn note, void *ctx, ss_index_build_stats *stats,
			     char *errmsg)
{
	sqlite3_stmt *st;
	int s = SQLITE_DONE, rc = ix_prep(ix, &st,
		"SELECT id, text_tokens, n_tokens, rid FROM docs"
		" WHERE (rid > ?1 OR rid IN (SELECT rid FROM temp.touched))"
		" AND text_tokens IS NOT NULL AND text_tokens != n_tokens ORDER BY id", errmsg);
	if (rc)
		return rc;
	rc = ix_bound(sqlite3_bind_int64(st, 1, ix->base_rid), errmsg, "sqlite");
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const char *id;
		char why[SS_ERRMSG_MAX];
		stats->n_warned++;
		if (!note || (rc = ix_doc_id(st, 0, sqlite3_column_int64(st, 3), &id, errmsg)))
			continue;
		snprintf(why, sizeof why, "text has %lld tokens but the state has seen %lld: encoded from other text?",
			 (long long)sqlite3_column_int64(st, 1), (long long)sqlite3_column_int64(st, 2));
		note(ctx, id, 0, why);
	}
	if (!rc && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	sqlite3_finalize(st);
	return rc;
}

/* One model per index: composing states of two models is meaningless.
 * fp0: the index's model fingerprint. */
static int check_one_model(ss_index *ix, char fp0[SS_ERRMSG_MAX / 4], char *errmsg)
{
	sqlite3_stmt *st;
	int s = SQLITE_DONE, n_fp = 0,
	    rc = ix_prep(ix, &st, "SELECT fingerprint, min(id) FROM docs GROUP BY fingerprint LIMIT 2", errmsg);
	if (rc)
		return rc;
	char id0[SS_ERRMSG_MAX / 4] = "";
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const char *fp = (const char *)sqlite3_column_text(st, 0);
		const char *id = (const char *)sqlite3_column_text(st, 1);
		if (n_fp++ == 0) {
			snprintf(fp0, SS_ERRMSG_MAX / 4, "%s", fp ? fp : "");
			snprintf(id0, sizeof id0, "%s", id ? id : "");
		} else {
			rc = ss_errf(errmsg, SS_ERR_MISMATCH,
				     "states of two models: document %s has fingerprint %s, document %s has %s", id0, fp0,
				     id ? id : "", fp ? fp : "");
		}
	}
	if (!rc && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	/* The stateless model must be the index's even when it made no
	 * document stateless (then the one group above is another's). */
	else if (!rc && n_fp == 1 && ix->stateless_fp[0] && strcmp(fp0, ix->stateless_fp))
		rc = ss_errf(errmsg, SS_ERR_MISMATCH,
			     "states of two models: document %s has fingerprint %s, the stateless documents' "
			     "model has %s", id0, fp0, ix->stateless_fp);
	sqlite3_finalize(st);
	return rc;
}

/* The documents' counts into stats. */
static int count_docs(ss_index *ix, ss_index_build_stats *stats, char *errmsg)
{
	sqlite3_stmt *st;
	int rc = ix_prep(ix, &st,
			 "SELECT (SELECT count(*) FROM docs), (SELECT count(*) FROM docs WHERE rid > ?1),"
			 " (SELECT count(*) FROM temp.touched JOIN docs USING (rid)),"
			 " (SELECT count(*) FROM stateless), (SELECT coalesce(sum(frame_length), 0) FROM docs)", errmsg);
	if (rc)
		return rc;
	if (!(rc = ix_bound(sqlite3_bind_int64(st, 1, ix->base_rid), errmsg, "sqlite")) &&
	    sqlite3_step(st) != SQLITE_ROW)
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	if (!rc) {
		stats->n_docs = sqlite3_column_int64(st, 0);
		stats->n_added = sqlite3_column_int64(st, 1);
		stats->n_replaced = sqlite3_column_int64(st, 2);
		stats->n_stateless = sqlite3_column_int64(st, 3);
		stats->state_bytes = sqlite3_column_int64(st, 4);
		stats->n_deleted = ix->n_deleted;
	}
	sqlite3_finalize(st);
	return rc;
}

/* meta's fingerprint (fp0) and updated_by. */
static int write_meta(ss_index *ix, const char *fp0, char *errmsg)
{
	sqlite3_stmt *st;
	int rc = ix_prep(ix, &st,
			 "INSERT INTO meta VALUES('fingerprint', ?1), ('updated_by', 'ss " SS_VERSION "')"
			 " ON CONFLICT(key) DO UPDATE SET value = excluded.value", errmsg);
	if (rc)
		return rc;
	if (!(rc = ix_bound(sqlite3_bind_text(st, 1, fp0, -1, SQLITE_STATIC), errmsg, "sqlite")))
		rc = ix_step_done(ix, st, errmsg);
	sqlite3_finalize(st);
	return rc;
}

/* Phases, in the build's transaction: check the ids; make documents
 * stateless (ss_index_set_stateless), drop the incomplete ones (which can
 * only come from this build: a stateless one is complete while it has the
 * tokens of its text) and apply the state budget; warn of token counts;
 * check that one model made every state; count; write meta, the positions
 * older documents lack and the postings; commit. Any failure rolls back. */
int ss_index_commit(ss_index *ix, ss_index_note_fn note, void *ctx, ss_index_build_stats *stats,
		    char *errmsg)
{
	ss_index_build_stats local = {0};
	if (!stats)
		stats = &local;
	memset(stats, 0, sizeof *stats);
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	char fp0[SS_ERRMSG_MAX / 4] = "";
	int rc, positions = 0;
	if ((rc = check_ids(ix, errmsg)) || (rc = make_stateless(ix, stats, errmsg)) ||
	    (rc = note_incomplete(ix, note, ctx, stats, errmsg)) || (rc = drop_incomplete(ix, stats, errmsg)) ||
	    (rc = note_token_counts(ix, note, ctx, stats, errmsg)) || (rc = check_one_model(ix, fp0, errmsg)) ||
	    (rc = count_docs(ix, stats, errmsg)) || (rc = write_meta(ix, fp0, errmsg)) ||
	    (rc = migrate_positions(ix, &positions, errmsg)) || (rc = ss_bm25_commit(ix->bm25, positions, errmsg)) ||
	    (rc = ix_exec(ix, "COMMIT", errmsg))) {
		sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
		ix->building = 0;
		ix->committed = 1; /* no more adds */
		return rc;
	}
	ix->committed = 1;
	ix->building = 0;
	free(ix->created_path); /* committed: the index stays */
	ix->created_path = NULL;
	return 0;
}
