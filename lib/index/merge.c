/* merge.c — several index files (shards) combined into one
 * (ss_index_merge in ss_index.h): a build that adds every document of
 * every shard, in shard order and each shard's build order, written to a
 * temporary file renamed over the output at the end. */
#include "index/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every document of shard `ix` (path `name`) into the build `out`, in
 * row id order. dtype, fp: the stateless documents' recompute dtype and
 * model so far ("" none), which every shard must share. */
static int merge_shard(ss_index *out, ss_index *ix, const char *name, char *dtype, char *fp, char *errmsg)
{
	char em[SS_ERRMSG_MAX];
	const char *sql =
		"SELECT d.id, f.path, d.byte_offset, d.frame_length, d.fingerprint, d.n_tokens, d.text_tokens,"
		" (SELECT t.text FROM texts t WHERE t.rid = d.rid AND length(t.text) = d.text_len),"
		" (SELECT t.tokens FROM tokens t WHERE t.rid = d.rid AND length(t.tokens) = 4 * d.text_tokens),"
		" %s, d.rid FROM docs d LEFT JOIN files f ON f.file_id = d.file_id ORDER BY d.rid";
	char q[1024];
	snprintf(q, sizeof q, sql, ix->tokens_of ? "(SELECT s.dtype FROM stateless s WHERE s.rid = d.rid)" : "NULL");
	if (!ix->text_of || !ix->tokens_of)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: built before the index kept texts and tokens: "
			       "build it again to merge it", name);
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(ix->db, q, -1, &st, NULL) != SQLITE_OK)
		return ss_errf(errmsg, SS_ERR_IO, "%s: %s", name, sqlite3_errmsg(ix->db));
	int s, rc = 0;
	int32_t *tok = NULL;
	size_t cap = 0;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const char *id;
		if ((rc = ix_doc_id(st, 0, sqlite3_column_int64(st, 10), &id, em))) {
			rc = ss_errf(errmsg, rc, "%s: %s", name, em);
			break;
		}
		const char *stored = (const char *)sqlite3_column_text(st, 1);
		const char *dfp = (const char *)sqlite3_column_text(st, 4);
		const char *sdt = (const char *)sqlite3_column_text(st, 9);
		int64_t text_tokens = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 6);
		if (sqlite3_column_type(st, 7) == SQLITE_NULL) {
			rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: document %s has no stored text (indexed before "
				     "texts were kept): add its token stream to it again to merge it", name, id);
			break;
		}
		const char *text = (const char *)sqlite3_column_blob(st, 7);
		size_t len = (size_t)sqlite3_column_bytes(st, 7);
		if ((rc = ss_index_add_text(out, id, text ? text : "", len, text_tokens, em))) {
			rc = ss_errf(errmsg, rc, "%s: document %s: %s", name, id, em);
			break;
		}
		if (sqlite3_column_type(st, 8) != SQLITE_NULL) {
			size_t n = (size_t)sqlite3_column_bytes(st, 8) / 4;
			const unsigned char *b = sqlite3_column_blob(st, 8);
			if (n > cap) {
				int32_t *t = realloc(tok, n * sizeof *t);
				if (!t) {
					rc = SS_ERR_NOMEM;
					break;
				}
				tok = t;
				cap = n;
			}
			for (size_t i = 0; i < n; i++)
				tok[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
						   (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24);
			if ((rc = ss_index_add_tokens(out, id, tok, (int64_t)n, em))) {
				rc = ss_errf(errmsg, rc, "%s: document %s: %s", name, id, em);
				break;
			}
		}
		if (!stored) {
			/* stateless: one recompute dtype and model for the output */
			if (!sdt || !dfp) {
				rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: damaged index: document %s has neither a state "
					     "file nor a dtype to recompute it in", name, id);
			} else if (!dtype[0]) {
				snprintf(dtype, 16, "%s", sdt);
				snprintf(fp, SS_FINGERPRINT_MAX, "%s", dfp);
			} else if (strcmp(dtype, sdt) || strcmp(fp, dfp)) {
				rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: document %s is recomputed in %s (model %s), "
					     "another stateless document in %s (model %s): one index holds one",
					     name, id, sdt, dfp, dtype, fp);
			}
			continue;
		}
		char *path = ix_resolve_path(ix, stored);
		if (!path) {
			rc = SS_ERR_NOMEM;
			break;
		}
		rc = ss_index_add_state(out, id, path, (uint64_t)sqlite3_column_int64(st, 2),
					(uint64_t)sqlite3_column_int64(st, 3), dfp ? dfp : "",
					sqlite3_column_int64(st, 5), em);
		char shown[SS_ERRMSG_MAX / 2];
		if (rc)
			rc = ss_errf(errmsg, rc, "%s: document %s: state file %s: %s", name, id,
				     ss_url_redact(path, shown, sizeof shown), em);
		free(path);
	}
	if (!rc && s != SQLITE_DONE)
		rc = ss_errf(errmsg, SS_ERR_IO, "%s: %s", name, sqlite3_errmsg(ix->db));
	sqlite3_finalize(st);
	free(tok);
	return rc;
}

int ss_index_merge(const char *out, const char *const *paths, int n, ss_index_build_stats *st, char *errmsg)
{
	char em[SS_ERRMSG_MAX];
	ss_index *u, *b = NULL;
	int rc = ss_index_open_shards(&u, paths, n, errmsg);
	if (rc)
		return rc;
	char *tmp = NULL;
	if (asprintf(&tmp, "%s.merge-%ld", out, (long)getpid()) < 0) {
		ss_index_close(u);
		return SS_ERR_NOMEM;
	}
	unlink(tmp); /* a killed merge's */
	if ((rc = ss_index_build_open(&b, tmp, em))) {
		rc = ss_errf(errmsg, rc, "%s: %s", tmp, em);
		goto done;
	}
	char dtype[16] = "", fp[SS_FINGERPRINT_MAX] = "";
	ss_index *one[1] = { u };
	ss_index **sh = u->n_shard ? u->shard : one;
	for (int s = 0; s < n && !rc; s++)
		rc = merge_shard(b, sh[s], paths[s], dtype, fp, errmsg);
	if (!rc && dtype[0] && (rc = ss_index_set_stateless(b, fp, dtype, em)))
		rc = ss_errf(errmsg, rc, "%s: %s", out, em);
	if (!rc && (rc = ss_index_commit(b, NULL, NULL, st, em)))
		rc = ss_errf(errmsg, rc, "%s: %s", out, em);
	ss_index_close(b); /* without a commit: rolled back, the file removed */
	b = NULL;
	if (!rc && rename(tmp, out) != 0)
		rc = ss_errf(errmsg, SS_ERR_IO, "%s: %s", out, strerror(errno));
done:
	ss_index_close(b);
	if (rc)
		unlink(tmp);
	free(tmp);
	ss_index_close(u);
	return rc;
}
