/* index_build.c — building a BM25 index of documents → state records
 * (SQLite): the build lock, adding texts and states; the commit is
 * lib/index/index_commit.c. See ss_index.h; queries are lib/index/index.c. */
#include "index/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *schema_sql =
	"PRAGMA application_id = 1936937545;" /* 0x73735249, 'ssRI': file(1) can tell */
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
	"CREATE TABLE files(file_id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE);"
	"CREATE TABLE docs(rid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
	" file_id INTEGER REFERENCES files(file_id), byte_offset INTEGER, frame_length INTEGER,"
	" fingerprint TEXT, n_tokens INTEGER, text_tokens INTEGER, text_len INTEGER,"
	" n_terms INTEGER, terms BLOB);"
	"CREATE TABLE terms(tid INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE, df INTEGER NOT NULL DEFAULT 0,"
	" maxw REAL NOT NULL DEFAULT 0, postings BLOB);"
	"CREATE TABLE bm25(one INTEGER PRIMARY KEY CHECK (one = 1), n_docs INTEGER, n_terms INTEGER,"
	" max_rid INTEGER, doclen BLOB);"
	"INSERT INTO meta VALUES('schema_version', '3'), ('created_by', 'ss " SS_VERSION "');";

/* Takes the build lock of the index at `path`: an exclusive flock on
 * path.lock, waited for as long as another build holds it. A build that
 * ends removes the lock file while holding it, so a waiter that then gets
 * the lock of a removed file opens the new one. Returns 0 with *fd and
 * *lock_path (malloc'ed) set, or SS_ERR_IO/SS_ERR_NOMEM. */
static int build_lock(const char *path, int *fd, char **lock_path, char *errmsg)
{
	size_t n = strlen(path) + sizeof ".lock";
	char *lp = malloc(n);
	if (!lp)
		return SS_ERR_NOMEM;
	snprintf(lp, n, "%s.lock", path);
	for (;;) {
		int f = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
		if (f < 0) {
			int e = errno;
			free(lp);
			return ss_errf(errmsg, e == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO, "cannot create the build lock: %s",
				       strerror(e));
		}
		int r;
		while ((r = flock(f, LOCK_EX)) != 0 && errno == EINTR)
			;
		struct stat a, b;
		if (r != 0) {
			int e = errno;
			close(f);
			free(lp);
			return ss_errf(errmsg, SS_ERR_IO, "cannot lock %s.lock: %s", path, strerror(e));
		}
		if (fstat(f, &a) == 0 && stat(lp, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			*fd = f;
			*lock_path = lp;
			return 0;
		}
		close(f);
	}
}

/* Where one state stored before this build lies (ix->dims_ref; none when
 * the index has no stored state): what dims_check reads the index's dims
 * from. The record stays in its file whatever the build does. */
static int dims_ref_find(ss_index *ix, char *errmsg)
{
	sqlite3_stmt *st;
	int rc = ix_prep(ix, &st,
			 "SELECT d.id, f.path, d.byte_offset, d.frame_length, d.fingerprint, d.file_id FROM docs d"
			 " JOIN files f ON f.file_id = d.file_id WHERE d.id IS NOT NULL ORDER BY d.rid LIMIT 1", errmsg);
	if (rc)
		return rc;
	int s = sqlite3_step(st);
	if (s == SQLITE_ROW) {
		ss_index_hit *h = &ix->dims_ref;
		const char *path = (const char *)sqlite3_column_text(st, 1);
		const char *fp = (const char *)sqlite3_column_text(st, 4);
		h->id = strdup((const char *)sqlite3_column_text(st, 0));
		h->path = path ? ix_resolve_path(ix, path) : NULL;
		h->offset = (uint64_t)sqlite3_column_int64(st, 2);
		h->length = (uint64_t)sqlite3_column_int64(st, 3);
		snprintf(h->fingerprint, sizeof h->fingerprint, "%s", fp ? fp : "");
		h->file_id = sqlite3_column_int64(st, 5);
		if (!h->id || !h->path)
			rc = SS_ERR_NOMEM;
	} else if (s != SQLITE_DONE) {
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	}
	sqlite3_finalize(st);
	return rc;
}

/* Checks that state `meta` (the record at byte offset `off` of the stream
 * being added) has the dims of the index's states: the index's model
 * fingerprint alone would let a record of other dims (a damaged or edited
 * stream) in, and a query would then emit states no composer can join.
 * The first state fixes them when the index has none (or its reference
 * record cannot be read). Returns 0 or SS_ERR_MISMATCH. */
static int dims_check(ss_index *ix, const ss_state *meta, uint64_t off, char *errmsg)
{
	if (!ix->dims_set) {
		const ss_record *rec;
		char em[SS_ERRMSG_MAX];
		ix->dims = ix->dims_ref.id && ss_index_read(ix, &ix->dims_ref, 1, &rec, em) == 0 ? ix->meta.dims : meta->dims;
		ix->dims_set = 1;
	}
	const ss_state_dims *a = &meta->dims, *b = &ix->dims;
	if (!ss_state_dims_check(a, b, NULL))
		return 0;
	return ss_errf(errmsg, SS_ERR_MISMATCH,
		       "state record at byte offset %llu (document %s): state dims %.16s n_layer %d nheads %d headdim %d "
		       "d_state %d conv_dim %d d_conv %d, the index's are %.16s n_layer %d nheads %d headdim %d d_state %d "
		       "conv_dim %d d_conv %d: not states of one model",
		       (unsigned long long)off, meta->id, a->arch, a->n_layer, a->nheads, a->headdim, a->d_state,
		       a->conv_dim, a->d_conv, b->arch, b->n_layer, b->nheads, b->headdim, b->d_state, b->conv_dim,
		       b->d_conv);
}

/* The build's tables (a new index gets the schema) in its write
 * transaction, begun here, and its tokenizer and vocabulary (ix->bm25). */
static int build_begin(ss_index *ix, char *errmsg)
{
	/* A big page cache keeps a large build from spilling into the file
	 * before commit; the temp tables live in memory. Pages of 64 KiB (for
	 * a new file) make the long postings blobs short chains of overflow
	 * pages, which a query walks to reach a block. */
	int rc = ix_exec(ix, "PRAGMA page_size = 65536; PRAGMA cache_size = -262144; PRAGMA temp_store = MEMORY;",
			 errmsg);
	if (rc)
		return rc;
	if (sqlite3_exec(ix->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		return ix_sqlerr(ix, errmsg, sqlite3_extended_errcode(ix->db) == SQLITE_BUSY
						     ? "locked by another build" : "cannot start the build");
	ix->building = 1;
	rc = ix_check_schema(ix, 1, errmsg);
	if (rc == 1)
		rc = ix_exec(ix, schema_sql, errmsg);
	if (rc)
		return rc;
	/* texts came after schema 3 was released: an index built before has
	 * none and gets it here, empty (its documents show no text until they
	 * are added again); readers of schema 3 ignore the table. */
	/* tokens and stateless (the recompute tier) came later still, the same
	 * way; the schema becomes 4 only once a document is stateless.
	 * positions (the word order, for phrases and proximity) too: the commit
	 * fills in those of older documents from their stored texts and says
	 * in meta.positions whether every document has them; and
	 * term_positions (each term's positions beside its postings, written
	 * by the commit from positions) after them. */
	if ((rc = ix_exec(ix, "CREATE TABLE IF NOT EXISTS texts(rid INTEGER PRIMARY KEY, text BLOB NOT NULL);"
			      "CREATE TABLE IF NOT EXISTS tokens(rid INTEGER PRIMARY KEY, tokens BLOB NOT NULL);"
			      "CREATE TABLE IF NOT EXISTS stateless(rid INTEGER PRIMARY KEY, dtype TEXT NOT NULL);"
			      "CREATE TABLE IF NOT EXISTS positions(rid INTEGER PRIMARY KEY, seq BLOB NOT NULL);"
			      "CREATE TABLE IF NOT EXISTS term_positions(tid INTEGER PRIMARY KEY, pos BLOB NOT NULL);"
			      "CREATE TEMP TABLE touched(rid INTEGER PRIMARY KEY);"
			      "CREATE TEMP TABLE hits(id TEXT PRIMARY KEY, n INTEGER NOT NULL)", errmsg)))
		return rc;
	return ss_bm25_open(&ix->bm25, ix->db, 1, errmsg);
}

/* ix->base_rid, the largest rid before this build, and ix->dims_ref. */
static int build_base(ss_index *ix, char *errmsg)
{
	sqlite3_stmt *st;
	int rc = ix_prep(ix, &st, "SELECT coalesce(max(rid), 0) FROM docs", errmsg);
	if (rc)
		return rc;
	if (sqlite3_step(st) == SQLITE_ROW)
		ix->base_rid = sqlite3_column_int64(st, 0);
	else
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	sqlite3_finalize(st);
	return rc ? rc : dims_ref_find(ix, errmsg);
}

/* The build's statements (finalized by ss_index_close). */
static int build_prepare(ss_index *ix, char *errmsg)
{
	const struct {
		sqlite3_stmt **st;
		const char *sql;
	} stmts[] = {
		{ &ix->find, "SELECT rid, text_len IS NOT NULL FROM docs WHERE id = ?1" },
		/* above every rid of the index before this build, even one
		 * deleted in it: rid > base_rid says "added by this build" */
		{ &ix->ins_doc, "INSERT INTO docs(rid, id) SELECT max(coalesce(max(rid), 0), ?2) + 1, ?1 FROM docs" },
		{ &ix->set_text, "UPDATE docs SET text_tokens = ?2, text_len = ?3, n_terms = ?4, terms = ?5 WHERE rid = ?1" },
		{ &ix->set_state, "UPDATE docs SET file_id = ?2, byte_offset = ?3, frame_length = ?4, fingerprint = ?5,"
				  " n_tokens = ?6 WHERE rid = ?1" },
		{ &ix->put_text, "INSERT OR REPLACE INTO texts(rid, text) VALUES(?1, ?2)" },
		{ &ix->put_pos, "INSERT OR REPLACE INTO positions(rid, seq) VALUES(?1, ?2)" },
		{ &ix->del_doc, "DELETE FROM docs WHERE rid = ?1" },
		{ &ix->del_text, "DELETE FROM texts WHERE rid = ?1" },
		{ &ix->put_tokens, "INSERT OR REPLACE INTO tokens(rid, tokens) VALUES(?1, ?2)" },
		{ &ix->del_tokens, "DELETE FROM tokens WHERE rid = ?1" },
		{ &ix->del_stateless, "DELETE FROM stateless WHERE rid = ?1" },
		{ &ix->add_hits,
		  "INSERT INTO temp.hits(id, n) VALUES(?1, ?2) ON CONFLICT(id) DO UPDATE SET n = n + excluded.n" },
		{ &ix->touch, "INSERT OR IGNORE INTO temp.touched VALUES(?1)" },
		{ &ix->file_find, "SELECT file_id FROM files WHERE path = ?1" },
		{ &ix->file_ins, "INSERT INTO files(path) VALUES(?1)" },
	};
	int rc = 0;
	for (size_t i = 0; i < sizeof stmts / sizeof *stmts && !rc; i++)
		rc = ix_prep(ix, stmts[i].st, stmts[i].sql, errmsg);
	return rc;
}

/* Steps: the build lock, the database (created when absent), its
 * transaction and tables, what it holds already, the statements. */
int ss_index_build_open(ss_index **out, const char *path, char *errmsg)
{
	/* Builds of one index run one at a time (SQLite alone would make a
	 * build that waits more than BUSY_TIMEOUT_MS fail). */
	if (!path || !*path)
		return ss_errf(errmsg, SS_ERR_INVALID, "no index path");
	int lock_fd = -1;
	char *lock_path = NULL;
	int rc = build_lock(path, &lock_fd, &lock_path, errmsg);
	if (rc)
		return rc;
	struct stat sb;
	int created = stat(path, &sb) != 0 || sb.st_size == 0;
	ss_index *ix;
	rc = ix_open_common(&ix, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, errmsg);
	if (rc) {
		if (created)
			unlink(path);
		unlink(lock_path);
		close(lock_fd);
		free(lock_path);
		return rc;
	}
	ix->lock_fd = lock_fd;
	ix->lock_path = lock_path;
	ix->budget = -1;
	if (created && !(ix->created_path = strdup(path)))
		rc = SS_ERR_NOMEM;
	if (rc || (rc = build_begin(ix, errmsg)) || (rc = build_base(ix, errmsg)) || (rc = build_prepare(ix, errmsg))) {
		ss_index_close(ix);
		return rc;
	}
	*out = ix;
	return 0;
}

/* Looks document `id` up in the build open on ix: returns 1 with *rid and
 * *had_text (whether it has text already) set, 0 when it is not indexed,
 * or SS_ERR_INVALID (no build, empty id), SS_ERR_IO. */
static int find_doc(ss_index *ix, const char *id, int64_t *rid, int *had_text, char *errmsg)
{
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	if (!id || !*id)
		return ss_errf(errmsg, SS_ERR_INVALID, "empty document id");
	int rc = ix_bound(sqlite3_bind_text(ix->find, 1, id, -1, SQLITE_STATIC), errmsg, "document id");
	if (rc)
		return rc;
	rc = sqlite3_step(ix->find);
	if (rc == SQLITE_ROW) {
		*rid = sqlite3_column_int64(ix->find, 0);
		*had_text = sqlite3_column_int(ix->find, 1);
	}
	sqlite3_reset(ix->find);
	return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : ix_sqlerr(ix, errmsg, "sqlite");
}

/* Row id of document `id`, creating the row when absent. *had_text says
 * whether it has text already. */
static int doc_rid(ss_index *ix, const char *id, int64_t *rid, int *had_text, char *errmsg)
{
	int rc = find_doc(ix, id, rid, had_text, errmsg);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		if (*rid <= ix->base_rid) {
			if ((rc = ix_bound(sqlite3_bind_int64(ix->touch, 1, *rid), errmsg, "sqlite")))
				return rc;
			return ix_step_done(ix, ix->touch, errmsg);
		}
		return 0;
	}
	if ((rc = ix_bound(sqlite3_bind_text(ix->ins_doc, 1, id, -1, SQLITE_STATIC), errmsg, "document id")) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->ins_doc, 2, ix->base_rid), errmsg, "sqlite")) ||
	    (rc = ix_step_done(ix, ix->ins_doc, errmsg)))
		return rc;
	*rid = sqlite3_last_insert_rowid(ix->db);
	*had_text = 0;
	return 0;
}

int ix_put_positions(ss_index *ix, int64_t rid, const void *seq, size_t seq_len, char *errmsg)
{
	const char *what = "storing the positions";
	int rc;
	if ((rc = ix_bound(sqlite3_bind_int64(ix->put_pos, 1, rid), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_blob64(ix->put_pos, 2, seq_len ? seq : "", seq_len, SQLITE_STATIC), errmsg,
			   what)))
		return rc;
	return ix_step_done(ix, ix->put_pos, errmsg);
}

int ss_index_add_text(ss_index *ix, const char *id, const char *text, size_t text_len,
		      int64_t text_tokens, char *errmsg)
{
	int64_t rid;
	int had_text, rc;
	if ((rc = doc_rid(ix, id, &rid, &had_text, errmsg)))
		return rc;
	if (text_len > INT_MAX)
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "document %s: text of %zu bytes is too long", id, text_len);
	const void *vec, *seq;
	size_t vec_len, seq_len;
	int64_t n_terms;
	if ((rc = ss_bm25_terms(ix->bm25, text, text_len, &vec, &vec_len, &seq, &seq_len, &n_terms, errmsg)))
		return rc;
	const char *what = "storing the text";
	if ((rc = ix_bound(sqlite3_bind_int64(ix->set_text, 1, rid), errmsg, what)) ||
	    (rc = ix_bound(text_tokens >= 0 ? sqlite3_bind_int64(ix->set_text, 2, text_tokens)
					    : sqlite3_bind_null(ix->set_text, 2), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->set_text, 3, (int64_t)text_len), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->set_text, 4, n_terms), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_blob64(ix->set_text, 5, vec, vec_len, SQLITE_STATIC), errmsg, what)) ||
	    (rc = ix_step_done(ix, ix->set_text, errmsg)))
		return rc;
	if ((rc = ix_bound(sqlite3_bind_int64(ix->put_text, 1, rid), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_blob64(ix->put_text, 2, text_len ? text : "", text_len, SQLITE_STATIC), errmsg,
			   what)) ||
	    (rc = ix_step_done(ix, ix->put_text, errmsg)) ||
	    (rc = ix_put_positions(ix, rid, seq, seq_len, errmsg)))
		return rc;
	/* The tokens of the text replaced are not this text's. */
	if ((rc = ix_bound(sqlite3_bind_int64(ix->del_tokens, 1, rid), errmsg, what)))
		return rc;
	return ix_step_done(ix, ix->del_tokens, errmsg);
}

int ss_index_add_tokens(ss_index *ix, const char *id, const int32_t *tokens, int64_t n_tokens,
			char *errmsg)
{
	if (n_tokens < 0 || (n_tokens > 0 && !tokens))
		return ss_errf(errmsg, SS_ERR_INVALID, "document %s: %lld tokens", id ? id : "", (long long)n_tokens);
	if (n_tokens > ((int64_t)1 << 29))
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "document %s: %lld tokens is too many to store", id ? id : "",
			       (long long)n_tokens);
	for (int64_t i = 0; ix->n_vocab && i < n_tokens; i++)
		if (tokens[i] < 0 || tokens[i] >= ix->n_vocab)
			return ss_errf(errmsg, SS_ERR_FORMAT, "document %s: token %lld is %d, outside the model's "
				       "vocabulary [0, %d)", id ? id : "", (long long)i, (int)tokens[i], (int)ix->n_vocab);
	int64_t rid;
	int had_text, rc;
	if ((rc = doc_rid(ix, id, &rid, &had_text, errmsg)))
		return rc;
	/* i32 little endian whatever the host (formats/index.md). */
	size_t len = (size_t)n_tokens * 4;
	unsigned char *buf = malloc(len ? len : 1);
	if (!buf)
		return SS_ERR_NOMEM;
	for (int64_t i = 0; i < n_tokens; i++) {
		uint32_t v = (uint32_t)tokens[i];
		for (int b = 0; b < 4; b++)
			buf[4 * i + b] = (unsigned char)(v >> (8 * b));
	}
	if (!(rc = ix_bound(sqlite3_bind_int64(ix->put_tokens, 1, rid), errmsg, "storing the tokens")) &&
	    !(rc = ix_bound(sqlite3_bind_blob64(ix->put_tokens, 2, buf, len, SQLITE_STATIC), errmsg, "storing the tokens")))
		rc = ix_step_done(ix, ix->put_tokens, errmsg);
	free(buf);
	return rc;
}

int ss_index_set_vocab(ss_index *ix, int32_t n_vocab, char *errmsg)
{
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	if (n_vocab < 0)
		return ss_errf(errmsg, SS_ERR_INVALID, "a vocabulary of %d tokens", (int)n_vocab);
	ix->n_vocab = n_vocab;
	return 0;
}

int ss_index_set_state_budget(ss_index *ix, int64_t bytes, char *errmsg)
{
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	if (bytes < -1)
		return ss_errf(errmsg, SS_ERR_INVALID, "state budget of %lld bytes", (long long)bytes);
	ix->budget = bytes;
	return 0;
}

int ss_index_set_stateless(ss_index *ix, const char *fingerprint, const char *dtype, char *errmsg)
{
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	if (!fingerprint) {
		ix->stateless_fp[0] = '\0';
		return 0;
	}
	/* the form model.c writes ("%016llx"): any other never equals a model's */
	size_t n = strspn(fingerprint, "0123456789abcdef");
	if (n != 16 || fingerprint[n])
		return ss_errf(errmsg, SS_ERR_INVALID, "stateless: fingerprint '%.64s' is not 16 hex digits (a model's)",
			       fingerprint);
	ss_dtype t;
	char em[SS_ERRMSG_MAX];
	if (ss_dtype_parse_for(dtype, SS_DTYPE_STATES, &t, em))
		return ss_errf(errmsg, SS_ERR_INVALID, "stateless: dtype %s", em);
	snprintf(ix->stateless_fp, sizeof ix->stateless_fp, "%s", fingerprint);
	snprintf(ix->stateless_dtype, sizeof ix->stateless_dtype, "%s", ss_dtype_name(t));
	return 0;
}

int ss_index_add_hits(ss_index *ix, const char *id, int64_t n, char *errmsg)
{
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	if (!id || !*id || n < 1)
		return ss_errf(errmsg, SS_ERR_INVALID, "hits of document \"%s\": %lld", id ? id : "", (long long)n);
	int rc;
	if ((rc = ix_bound(sqlite3_bind_text(ix->add_hits, 1, id, -1, SQLITE_STATIC), errmsg, "document id")) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->add_hits, 2, n), errmsg, "sqlite")))
		return rc;
	return ix_step_done(ix, ix->add_hits, errmsg);
}

int ss_index_delete(ss_index *ix, const char *id, char *errmsg)
{
	int64_t rid;
	int had_text;
	int rc = find_doc(ix, id, &rid, &had_text, errmsg);
	if (rc == 0)
		return ss_errf(errmsg, SS_ERR_NOTFOUND, "no document %s in the index", id);
	if (rc < 0)
		return rc;
	sqlite3_stmt *dels[] = { ix->del_doc, ix->del_text, ix->del_tokens, ix->del_stateless };
	for (size_t i = 0; i < sizeof dels / sizeof *dels; i++)
		if ((rc = ix_bound(sqlite3_bind_int64(dels[i], 1, rid), errmsg, "sqlite")) ||
		    (rc = ix_step_done(ix, dels[i], errmsg)))
			return rc;
	ix->n_deleted++;
	return 0;
}

/* The path to store for a state file: relative to the index's directory
 * when under it, else absolute. Returns malloc'd string or NULL. */
static char *stored_path(ss_index *ix, const char *path, char *errmsg)
{
	if (ss_url_is_http(path)) {
		/* Stored as given: the URL the frames are fetched from. */
		const char *host = strstr(path, "://") + 3;
		int bad = strcspn(host, "/?#") == 0;
		for (const unsigned char *p = (const unsigned char *)path; *p && !bad; p++)
			bad = *p <= ' ' || *p == 0x7f;
		char shown[SS_ERRMSG_MAX / 2];
		if (bad) {
			ss_errf(errmsg, SS_ERR_INVALID, "%s: not a URL (no host, or a space or control byte in it)",
				ss_url_redact(path, shown, sizeof shown));
			return NULL;
		}
		return strdup(path);
	}
	char *real = realpath(path, NULL);
	if (!real) {
		ss_errf(errmsg, SS_ERR_IO, "%s: %s", path, strerror(errno));
		return NULL;
	}
	size_t dl = strlen(ix->dir);
	if (!strcmp(ix->dir, "/"))
		dl = 0;
	if (strncmp(real, ix->dir, dl) == 0 && real[dl] == '/') {
		char *rel = strdup(real + dl + 1);
		free(real);
		return rel;
	}
	return real;
}

static int file_id_of(ss_index *ix, const char *path, int64_t *file_id, char *errmsg)
{
	if (ix->last_path && !strcmp(ix->last_path, path)) {
		*file_id = ix->last_file_id;
		return 0;
	}
	char *sp = stored_path(ix, path, errmsg);
	if (!sp)
		return ss_url_is_http(path) ? SS_ERR_INVALID : SS_ERR_IO;
	int s = SQLITE_DONE;
	int rc = ix_bound(sqlite3_bind_text(ix->file_find, 1, sp, -1, SQLITE_STATIC), errmsg, "state file path");
	if (!rc && (s = sqlite3_step(ix->file_find)) == SQLITE_ROW)
		*file_id = sqlite3_column_int64(ix->file_find, 0);
	else if (!rc && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "sqlite");
	sqlite3_reset(ix->file_find);
	if (!rc && s == SQLITE_DONE &&
	    !(rc = ix_bound(sqlite3_bind_text(ix->file_ins, 1, sp, -1, SQLITE_STATIC), errmsg, "state file path")) &&
	    !(rc = ix_step_done(ix, ix->file_ins, errmsg)))
		*file_id = sqlite3_last_insert_rowid(ix->db);
	free(sp);
	if (rc)
		return rc;
	free(ix->last_path);
	ix->last_path = strdup(path);
	ix->last_file_id = *file_id;
	return 0;
}

int ss_index_add_state(ss_index *ix, const char *id, const char *state_path, uint64_t offset,
		       uint64_t length, const char *fingerprint, int64_t n_tokens, char *errmsg)
{
	int64_t rid, file_id = 0;
	int had_text, rc;
	if (!state_path || !*state_path || !strcmp(state_path, "-"))
		return ss_errf(errmsg, SS_ERR_INVALID, "document %s: state records need a named regular file", id ? id : "");
	if ((rc = doc_rid(ix, id, &rid, &had_text, errmsg)) || (rc = file_id_of(ix, state_path, &file_id, errmsg)))
		return rc;
	const char *what = "storing the state's location";
	if ((rc = ix_bound(sqlite3_bind_int64(ix->set_state, 1, rid), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->set_state, 2, file_id), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->set_state, 3, (int64_t)offset), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->set_state, 4, (int64_t)length), errmsg, what)) ||
	    (rc = ix_bound(sqlite3_bind_text(ix->set_state, 5, fingerprint ? fingerprint : "", -1, SQLITE_STATIC), errmsg,
			   what)) ||
	    (rc = ix_bound(sqlite3_bind_int64(ix->set_state, 6, n_tokens), errmsg, what)) ||
	    (rc = ix_step_done(ix, ix->set_state, errmsg)))
		return rc;
	/* stored again */
	if ((rc = ix_bound(sqlite3_bind_int64(ix->del_stateless, 1, rid), errmsg, what)))
		return rc;
	return ix_step_done(ix, ix->del_stateless, errmsg);
}

int ss_index_add_stream(ss_index *ix, const char *path, uint64_t max_record,
			ss_index_add_stats *st, ss_index_progress_fn progress, void *ctx, char *errmsg)
{
	return ss_index_add_stream_url(ix, path, NULL, max_record, st, progress, ctx, errmsg);
}

/* Token record rec (at byte offset off; whole) of a stream: its text and
 * tokens added. */
static int add_token_record(ss_index *ix, const ss_record *rec, uint64_t off, char *errmsg)
{
	ss_tokens tok;
	char em[SS_ERRMSG_MAX];
	int rc = ss_record_tokens(rec, &tok, em);
	if (rc)
		return ss_errf(errmsg, rc, "token record at byte offset %llu: %s", (unsigned long long)off, em);
	if (!tok.text) {
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "token record at byte offset %llu (document %s) has no text to index",
			     (unsigned long long)off, tok.id);
		ss_tokens_free(&tok);
		return rc;
	}
	rc = ss_index_add_text(ix, tok.id, tok.text, tok.text_len, tok.n_tokens, errmsg);
	if (!rc && (rc = ss_index_add_tokens(ix, tok.id, tok.tokens, tok.n_tokens, em)))
		ss_errf(errmsg, rc, "token record at byte offset %llu: %s", (unsigned long long)off, em);
	ss_tokens_free(&tok);
	return rc;
}

/* State record rec (at byte offset off of the file at `path`, stored as
 * `path`): its location added once its dims are checked. */
static int add_state_record(ss_index *ix, const ss_record *rec, uint64_t off, const char *path, char *errmsg)
{
	ss_state meta;
	char em[SS_ERRMSG_MAX];
	int rc = ss_record_state_meta(rec, &meta, em);
	if (rc)
		return ss_errf(errmsg, rc, "state record at byte offset %llu: %s", (unsigned long long)off, em);
	rc = dims_check(ix, &meta, off, errmsg);
	if (!rc)
		rc = ss_index_add_state(ix, meta.id, path, off, ss_record_length(rec), meta.fingerprint, meta.n_tokens,
					errmsg);
	ss_state_free(&meta);
	return rc;
}

/* Record rec of reader r, which reads whole records (*whole) or their
 * metadata: a token record's text and tokens (the record read again
 * whole, and *whole set, when only its metadata was), a state record's
 * location (stored as `path`); counted in st. */
static int add_record(ss_index *ix, ss_reader *r, const ss_record *rec, int *whole, const char *path,
		      ss_index_add_stats *st, char *errmsg)
{
	uint64_t off = ss_record_offset(rec);
	int rc;
	st->bytes += ss_record_length(rec);
	if (!strcmp(ss_record_format(rec), SS_FORMAT_TOKENS)) {
		if (!*whole) {
			*whole = 1;
			if ((rc = ss_reader_seek(r, off)) || (rc = ss_reader_next(r, &rec)) != 1)
				return ss_errf(errmsg, rc ? rc : SS_ERR_TRUNCATED, "byte offset %llu: %s",
					       (unsigned long long)off, ss_reader_error(r));
		}
		if ((rc = add_token_record(ix, rec, off, errmsg)))
			return rc;
		st->n_text++;
		return 0;
	}
	if (!strcmp(ss_record_format(rec), SS_FORMAT_STATES)) {
		if (!ss_reader_seekable(r))
			return ss_errf(errmsg, SS_ERR_INVALID,
				       "state record at byte offset %llu: state streams must be regular files "
				       "(the index stores their byte offsets), not a pipe",
				       (unsigned long long)off);
		if ((rc = add_state_record(ix, rec, off, path, errmsg)))
			return rc;
		st->n_states++;
		return 0;
	}
	return ss_errf(errmsg, SS_ERR_FORMAT, "record at byte offset %llu: unknown format \"%s\"",
		       (unsigned long long)off, ss_record_format(rec));
}

int ss_index_add_stream_url(ss_index *ix, const char *path, const char *url, uint64_t max_record,
			    ss_index_add_stats *st, ss_index_progress_fn progress, void *ctx, char *errmsg)
{
	if (url && !ss_url_is_http(url))
		return ss_errf(errmsg, SS_ERR_INVALID, "%s: not an http:// or https:// URL", path);
	ss_index_add_stats local = {0};
	if (!st)
		st = &local;
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	ss_reader *r;
	int rc = ss_reader_open(&r, path, max_record, errmsg);
	if (rc)
		return rc;
	/* State records are read by their metadata prefix only; once a token
	 * record shows up the stream is probably all tokens, so read whole
	 * records from then on (a state record is still handled). */
	int whole = !ss_reader_seekable(r);
	const ss_record *rec;
	for (;;) {
		rc = whole ? ss_reader_next(r, &rec) : ss_reader_next_meta(r, &rec);
		if (rc < 0)
			ss_errf(errmsg, rc, "%s", ss_reader_error(r));
		if (rc <= 0 || (rc = add_record(ix, r, rec, &whole, url ? url : path, st, errmsg)))
			break;
		if (progress)
			progress(ctx, path, st);
	}
	ss_reader_close(r);
	return rc < 0 ? rc : 0;
}
