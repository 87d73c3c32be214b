/* index.c — BM25 index of documents → state records (SQLite); see ss_index.h. */
#include "ss.h"
#include "bm25.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* State files kept open at once by a query process. */
#define READER_SLOTS 32
#define BUSY_TIMEOUT_MS 10000

typedef struct {
	int64_t file_id; /* 0 = empty slot */
	ss_reader *r;
	int fd;          /* the same file, for copying frames verbatim (pread) */
	uint64_t size;
} reader_slot;

struct ss_index {
	sqlite3 *db;
	int building;   /* a write transaction is open */
	int committed;
	int hot_journal; /* a read-only open met a crashed build's journal */
	char *dir;      /* realpath of the index's directory, no trailing '/' */
	int64_t base_rid; /* largest docs.rid before this build */
	/* build statements */
	sqlite3_stmt *find, *ins_doc, *set_text, *set_state, *touch;
	sqlite3_stmt *file_find, *file_ins;
	char *last_path;  /* state path as given → file id, for runs of one shard */
	int64_t last_file_id;
	/* query statements */
	sqlite3_stmt *query, *lookup, *rid_of;
	ss_bm25 *bm25;    /* tokenizer, postings */
	reader_slot slots[READER_SLOTS];
	int next_slot;
	ss_state meta;    /* scratch for ss_index_read */
	unsigned char *frame; /* ss_index_copy's buffer: one frame, reused */
	size_t frame_cap;
	/* a build: its lock (DB.lock, flock'ed), and DB when the build made it
	 * (removed unless the build commits) */
	int lock_fd;
	char *lock_path, *created_path;
};

static int sqlerr(ss_index *ix, char *errmsg, const char *what)
{
	if (sqlite3_extended_errcode(ix->db) == SQLITE_NOTADB)
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index: %s", sqlite3_errmsg(ix->db));
	int se = sqlite3_system_errno(ix->db);
	if (!se) /* a failed write's errno is kept by the file, not the db */
		sqlite3_file_control(ix->db, "main", SQLITE_FCNTL_LAST_ERRNO, &se);
	if (se)
		return ss_errf(errmsg, SS_ERR_IO, "%s: %s (%s)", what, sqlite3_errmsg(ix->db), strerror(se));
	return ss_errf(errmsg, SS_ERR_IO, "%s: %s", what, sqlite3_errmsg(ix->db));
}

static int prep(ss_index *ix, sqlite3_stmt **st, const char *sql, char *errmsg)
{
	if (sqlite3_prepare_v3(ix->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
		return sqlerr(ix, errmsg, "sqlite");
	return 0;
}

/* Runs one statement to completion; 0 or SS_ERR_IO. */
static int step_done(ss_index *ix, sqlite3_stmt *st, char *errmsg)
{
	int rc = sqlite3_step(st);
	/* The message first: resetting may clear the system errno. */
	rc = rc != SQLITE_DONE && rc != SQLITE_ROW ? sqlerr(ix, errmsg, "sqlite") : 0;
	sqlite3_reset(st);
	return rc;
}

static int exec(ss_index *ix, const char *sql, char *errmsg)
{
	if (sqlite3_exec(ix->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return sqlerr(ix, errmsg, "sqlite");
	return 0;
}

/* Directory of `path` made absolute and canonical (the file itself may not
 * exist yet). Returns malloc'd string or NULL (errno set). */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *d;
	if (!slash)
		d = strdup(".");
	else if (slash == path)
		d = strdup("/");
	else
		d = strndup(path, (size_t)(slash - path));
	if (!d)
		return NULL;
	char *real = realpath(d, NULL);
	free(d);
	return real;
}

/* Checks meta.schema_version. empty_ok: a database with no tables at all is
 * reported as 1 (to be created) instead of an error. */
static int check_schema(ss_index *ix, int empty_ok, char *errmsg)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(ix->db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		int ext = sqlite3_extended_errcode(ix->db);
		sqlite3_finalize(st);
		if (ext == SQLITE_NOTADB)
			return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index: %s", sqlite3_errmsg(ix->db));
		if (ext == SQLITE_READONLY_ROLLBACK) {
			ix->hot_journal = 1;
			return ss_errf(errmsg, SS_ERR_IO,
				    "an interrupted build left a hot journal that needs write access to "
				    "roll back: run 'ss-retrieve build --index' on it with no input");
		}
		return ss_errf(errmsg, SS_ERR_IO, "cannot read the index: %s", sqlite3_errmsg(ix->db));
	}
	int n_tables = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (n_tables == 0) {
		if (empty_ok)
			return 1;
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index (empty database: no build has completed)");
	}
	st = NULL;
	if (sqlite3_prepare_v2(ix->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, NULL) != SQLITE_OK)
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index (no meta table)");
	rc = sqlite3_step(st);
	long v = -1;
	if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
		const char *s = (const char *)sqlite3_column_text(st, 0);
		char *end;
		v = strtol(s, &end, 10);
		if (end == s || *end)
			v = -1;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW)
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index (no schema_version)");
	if (v != SS_INDEX_SCHEMA_VERSION)
		return ss_errf(errmsg, SS_ERR_VERSION,
			    "index schema version %ld, this build of ss reads version %d: rebuild the index",
			    v, SS_INDEX_SCHEMA_VERSION);
	return 0;
}

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

static int open_common(ss_index **out, const char *path, int flags, char *errmsg)
{
	*out = NULL;
	if (!path || !*path)
		return ss_errf(errmsg, SS_ERR_INVALID, "no index path");
	ss_index *ix = calloc(1, sizeof *ix);
	if (!ix)
		return SS_ERR_NOMEM;
	ix->dir = dir_of(path);
	if (!ix->dir) {
		int e = errno;
		free(ix);
		return ss_errf(errmsg, e == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO, "%s", strerror(e));
	}
	if (sqlite3_open_v2(path, &ix->db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		int rc = ix->db ? sqlerr(ix, errmsg, "cannot open") : ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		if ((flags & SQLITE_OPEN_CREATE) == 0 && access(path, F_OK) != 0)
			rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "no such index");
		ss_index_close(ix);
		return rc;
	}
	sqlite3_extended_result_codes(ix->db, 1);
	sqlite3_busy_timeout(ix->db, BUSY_TIMEOUT_MS);
	*out = ix;
	return 0;
}

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
	rc = open_common(&ix, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, errmsg);
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
	if (created && !(ix->created_path = strdup(path))) {
		ss_index_close(ix);
		return SS_ERR_NOMEM;
	}
	/* A big page cache keeps a large build from spilling into the file
	 * before commit; the temp tables live in memory. Pages of 64 KiB (for
	 * a new file) make the long postings blobs short chains of overflow
	 * pages, which a query walks to reach a block. */
	if ((rc = exec(ix, "PRAGMA page_size = 65536; PRAGMA cache_size = -262144; PRAGMA temp_store = MEMORY;",
		       errmsg)))
		goto fail;
	if (sqlite3_exec(ix->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
		rc = sqlerr(ix, errmsg, sqlite3_extended_errcode(ix->db) == SQLITE_BUSY
					       ? "locked by another build" : "cannot start the build");
		goto fail;
	}
	ix->building = 1;
	rc = check_schema(ix, 1, errmsg);
	if (rc == 1)
		rc = exec(ix, schema_sql, errmsg);
	if (rc)
		goto fail;
	if ((rc = exec(ix, "CREATE TEMP TABLE touched(rid INTEGER PRIMARY KEY)", errmsg)) ||
	    (rc = ss_bm25_open(&ix->bm25, ix->db, 1, errmsg)))
		goto fail;
	sqlite3_stmt *st;
	if ((rc = prep(ix, &st, "SELECT coalesce(max(rid), 0) FROM docs", errmsg)))
		goto fail;
	sqlite3_step(st);
	ix->base_rid = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if ((rc = prep(ix, &ix->find, "SELECT rid, text_len IS NOT NULL FROM docs WHERE id = ?1", errmsg)) ||
	    (rc = prep(ix, &ix->ins_doc, "INSERT INTO docs(id) VALUES(?1)", errmsg)) ||
	    (rc = prep(ix, &ix->set_text, "UPDATE docs SET text_tokens = ?2, text_len = ?3, n_terms = ?4, terms = ?5 WHERE rid = ?1", errmsg)) ||
	    (rc = prep(ix, &ix->set_state,
		       "UPDATE docs SET file_id = ?2, byte_offset = ?3, frame_length = ?4, fingerprint = ?5,"
		       " n_tokens = ?6 WHERE rid = ?1", errmsg)) ||
	    (rc = prep(ix, &ix->touch, "INSERT OR IGNORE INTO temp.touched VALUES(?1)", errmsg)) ||
	    (rc = prep(ix, &ix->file_find, "SELECT file_id FROM files WHERE path = ?1", errmsg)) ||
	    (rc = prep(ix, &ix->file_ins, "INSERT INTO files(path) VALUES(?1)", errmsg)))
		goto fail;
	*out = ix;
	return 0;
fail:
	ss_index_close(ix);
	return rc;
}

/* Row id of document `id`, creating the row when absent. *had_text says
 * whether it has text already. */
static int doc_rid(ss_index *ix, const char *id, int64_t *rid, int *had_text, char *errmsg)
{
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	if (!id || !*id)
		return ss_errf(errmsg, SS_ERR_INVALID, "empty document id");
	sqlite3_bind_text(ix->find, 1, id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(ix->find);
	if (rc == SQLITE_ROW) {
		*rid = sqlite3_column_int64(ix->find, 0);
		*had_text = sqlite3_column_int(ix->find, 1);
		sqlite3_reset(ix->find);
		if (*rid <= ix->base_rid) {
			sqlite3_bind_int64(ix->touch, 1, *rid);
			return step_done(ix, ix->touch, errmsg);
		}
		return 0;
	}
	sqlite3_reset(ix->find);
	if (rc != SQLITE_DONE)
		return sqlerr(ix, errmsg, "sqlite");
	sqlite3_bind_text(ix->ins_doc, 1, id, -1, SQLITE_STATIC);
	if ((rc = step_done(ix, ix->ins_doc, errmsg)))
		return rc;
	*rid = sqlite3_last_insert_rowid(ix->db);
	*had_text = 0;
	return 0;
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
	const void *vec;
	size_t vec_len;
	int64_t n_terms;
	if ((rc = ss_bm25_terms(ix->bm25, text, text_len, &vec, &vec_len, &n_terms, errmsg)))
		return rc;
	sqlite3_bind_int64(ix->set_text, 1, rid);
	if (text_tokens >= 0)
		sqlite3_bind_int64(ix->set_text, 2, text_tokens);
	else
		sqlite3_bind_null(ix->set_text, 2);
	sqlite3_bind_int64(ix->set_text, 3, (int64_t)text_len);
	sqlite3_bind_int64(ix->set_text, 4, n_terms);
	sqlite3_bind_blob(ix->set_text, 5, vec, (int)vec_len, SQLITE_STATIC);
	return step_done(ix, ix->set_text, errmsg);
}

/* The path to store for a state file: relative to the index's directory
 * when under it, else absolute. Returns malloc'd string or NULL. */
static char *stored_path(ss_index *ix, const char *path, char *errmsg)
{
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
		return SS_ERR_IO;
	int rc;
	sqlite3_bind_text(ix->file_find, 1, sp, -1, SQLITE_STATIC);
	if (sqlite3_step(ix->file_find) == SQLITE_ROW) {
		*file_id = sqlite3_column_int64(ix->file_find, 0);
		sqlite3_reset(ix->file_find);
	} else {
		sqlite3_reset(ix->file_find);
		sqlite3_bind_text(ix->file_ins, 1, sp, -1, SQLITE_STATIC);
		if ((rc = step_done(ix, ix->file_ins, errmsg))) {
			free(sp);
			return rc;
		}
		*file_id = sqlite3_last_insert_rowid(ix->db);
	}
	free(sp);
	free(ix->last_path);
	ix->last_path = strdup(path);
	ix->last_file_id = *file_id;
	return 0;
}

int ss_index_add_state(ss_index *ix, const char *id, const char *state_path, uint64_t offset,
		       uint64_t length, const char *fingerprint, int64_t n_tokens, char *errmsg)
{
	int64_t rid, file_id;
	int had_text, rc;
	if (!state_path || !*state_path || !strcmp(state_path, "-"))
		return ss_errf(errmsg, SS_ERR_INVALID, "document %s: state records need a named regular file", id ? id : "");
	if ((rc = doc_rid(ix, id, &rid, &had_text, errmsg)) || (rc = file_id_of(ix, state_path, &file_id, errmsg)))
		return rc;
	sqlite3_bind_int64(ix->set_state, 1, rid);
	sqlite3_bind_int64(ix->set_state, 2, file_id);
	sqlite3_bind_int64(ix->set_state, 3, (int64_t)offset);
	sqlite3_bind_int64(ix->set_state, 4, (int64_t)length);
	sqlite3_bind_text(ix->set_state, 5, fingerprint ? fingerprint : "", -1, SQLITE_STATIC);
	sqlite3_bind_int64(ix->set_state, 6, n_tokens);
	return step_done(ix, ix->set_state, errmsg);
}

int ss_index_add_stream(ss_index *ix, const char *path, uint64_t max_record,
			ss_index_add_stats *st, ss_index_progress_fn progress, void *ctx, char *errmsg)
{
	ss_index_add_stats local = {0};
	if (!st)
		st = &local;
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	ss_reader *r;
	int rc = ss_reader_open(&r, path, max_record, errmsg);
	if (rc)
		return rc;
	int seekable = ss_reader_seekable(r);
	/* State records are read by their metadata prefix only; once a token
	 * record shows up the stream is probably all tokens, so read whole
	 * records from then on (a state record is still handled). */
	int whole = !seekable;
	const ss_record *rec;
	ss_tokens tok;
	ss_state meta;
	for (;;) {
		rc = whole ? ss_reader_next(r, &rec) : ss_reader_next_meta(r, &rec);
		if (rc == 0)
			break;
		if (rc < 0) {
			ss_errf(errmsg, rc, "%s", ss_reader_error(r));
			break;
		}
		uint64_t off = ss_record_offset(rec);
		st->bytes += ss_record_length(rec);
		if (!strcmp(ss_record_format(rec), SS_FORMAT_TOKENS)) {
			if (!whole) {
				whole = 1;
				if ((rc = ss_reader_seek(r, off)) || (rc = ss_reader_next(r, &rec)) != 1) {
					ss_errf(errmsg, rc ? rc : SS_ERR_TRUNCATED, "byte offset %llu: %s",
					     (unsigned long long)off, ss_reader_error(r));
					rc = rc ? rc : SS_ERR_TRUNCATED;
					break;
				}
			}
			char em[SS_ERRMSG_MAX];
			if ((rc = ss_record_tokens(rec, &tok, em))) {
				ss_errf(errmsg, rc, "token record at byte offset %llu: %s", (unsigned long long)off, em);
				break;
			}
			if (!tok.text) {
				ss_errf(errmsg, SS_ERR_FORMAT,
				     "token record at byte offset %llu (document %s) has no text to index",
				     (unsigned long long)off, tok.id);
				ss_tokens_free(&tok);
				rc = SS_ERR_FORMAT;
				break;
			}
			rc = ss_index_add_text(ix, tok.id, tok.text, tok.text_len, tok.n_tokens, errmsg);
			ss_tokens_free(&tok);
			if (rc)
				break;
			st->n_text++;
		} else if (!strcmp(ss_record_format(rec), SS_FORMAT_STATES)) {
			if (!seekable) {
				rc = ss_errf(errmsg, SS_ERR_INVALID,
					  "state record at byte offset %llu: state streams must be regular files "
					  "(the index stores their byte offsets), not a pipe",
					  (unsigned long long)off);
				break;
			}
			char em[SS_ERRMSG_MAX];
			if ((rc = ss_record_state_meta(rec, &meta, em))) {
				ss_errf(errmsg, rc, "state record at byte offset %llu: %s", (unsigned long long)off, em);
				break;
			}
			rc = ss_index_add_state(ix, meta.id, path, off, ss_record_length(rec), meta.fingerprint,
						meta.n_tokens, errmsg);
			ss_state_free(&meta);
			if (rc)
				break;
			st->n_states++;
		} else {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "record at byte offset %llu: unknown format \"%s\"",
				  (unsigned long long)off, ss_record_format(rec));
			break;
		}
		if (progress)
			progress(ctx, path, st);
	}
	ss_reader_close(r);
	return rc < 0 ? rc : 0;
}

int ss_index_commit(ss_index *ix, ss_index_note_fn note, void *ctx, ss_index_build_stats *stats,
		    char *errmsg)
{
	ss_index_build_stats local = {0};
	if (!stats)
		stats = &local;
	memset(stats, 0, sizeof *stats);
	if (!ix || !ix->building || ix->committed)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for a build");
	sqlite3_stmt *st = NULL;
	int rc;
	char why[SS_ERRMSG_MAX];

	/* Incomplete documents can only come from this build. */
	if ((rc = prep(ix, &st,
		       "SELECT id, file_id IS NULL, text_len IS NULL FROM docs"
		       " WHERE file_id IS NULL OR text_len IS NULL ORDER BY id", errmsg)))
		goto fail;
	while (sqlite3_step(st) == SQLITE_ROW) {
		stats->n_dropped++;
		if (note) {
			const char *id = (const char *)sqlite3_column_text(st, 0);
			snprintf(why, sizeof why, "%s",
				 sqlite3_column_int(st, 1) ? "has text but no state record: left out"
							   : "has a state but no token record (text): left out");
			note(ctx, id, 1, why);
		}
	}
	sqlite3_finalize(st);
	st = NULL;
	if ((rc = exec(ix,
		       "DELETE FROM docs WHERE file_id IS NULL OR text_len IS NULL;"
		       "DELETE FROM files WHERE file_id NOT IN (SELECT file_id FROM docs);", errmsg)))
		goto fail;

	/* Token counts that disagree, among the documents this build touched. */
	if ((rc = prep(ix, &st,
		       "SELECT id, text_tokens, n_tokens FROM docs"
		       " WHERE (rid > ?1 OR rid IN (SELECT rid FROM temp.touched))"
		       " AND text_tokens IS NOT NULL AND text_tokens != n_tokens ORDER BY id", errmsg)))
		goto fail;
	sqlite3_bind_int64(st, 1, ix->base_rid);
	while (sqlite3_step(st) == SQLITE_ROW) {
		stats->n_warned++;
		if (note) {
			snprintf(why, sizeof why,
				 "text has %lld tokens but the state has seen %lld: encoded from other text?",
				 (long long)sqlite3_column_int64(st, 1), (long long)sqlite3_column_int64(st, 2));
			note(ctx, (const char *)sqlite3_column_text(st, 0), 0, why);
		}
	}
	sqlite3_finalize(st);
	st = NULL;

	/* One model per index: composing states of two models is meaningless. */
	if ((rc = prep(ix, &st, "SELECT fingerprint, min(id) FROM docs GROUP BY fingerprint LIMIT 2", errmsg)))
		goto fail;
	char fp0[SS_ERRMSG_MAX / 4] = "", id0[SS_ERRMSG_MAX / 4] = "";
	int n_fp = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *fp = (const char *)sqlite3_column_text(st, 0);
		const char *id = (const char *)sqlite3_column_text(st, 1);
		if (n_fp++ == 0) {
			snprintf(fp0, sizeof fp0, "%s", fp ? fp : "");
			snprintf(id0, sizeof id0, "%s", id ? id : "");
		} else {
			rc = ss_errf(errmsg, SS_ERR_MISMATCH,
				  "states of two models: document %s has fingerprint %s, document %s has %s",
				  id0, fp0, id ? id : "", fp ? fp : "");
			goto fail;
		}
	}
	sqlite3_finalize(st);
	st = NULL;

	if ((rc = prep(ix, &st,
		       "SELECT (SELECT count(*) FROM docs), (SELECT count(*) FROM docs WHERE rid > ?1),"
		       " (SELECT count(*) FROM temp.touched JOIN docs USING (rid))", errmsg)))
		goto fail;
	sqlite3_bind_int64(st, 1, ix->base_rid);
	if (sqlite3_step(st) == SQLITE_ROW) {
		stats->n_docs = sqlite3_column_int64(st, 0);
		stats->n_added = sqlite3_column_int64(st, 1);
		stats->n_replaced = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	st = NULL;

	if ((rc = prep(ix, &st,
		       "INSERT INTO meta VALUES('fingerprint', ?1), ('updated_by', 'ss " SS_VERSION "')"
		       " ON CONFLICT(key) DO UPDATE SET value = excluded.value", errmsg)))
		goto fail;
	sqlite3_bind_text(st, 1, fp0, -1, SQLITE_STATIC);
	if ((rc = step_done(ix, st, errmsg)))
		goto fail;
	sqlite3_finalize(st);
	st = NULL;
	if ((rc = ss_bm25_commit(ix->bm25, errmsg)) || (rc = exec(ix, "COMMIT", errmsg)))
		goto fail;
	ix->committed = 1;
	ix->building = 0;
	free(ix->created_path); /* committed: the index stays */
	ix->created_path = NULL;
	return 0;
fail:
	sqlite3_finalize(st);
	sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
	ix->building = 0;
	ix->committed = 1; /* no more adds */
	return rc;
}

/* ------------------------------------------------------------------ query */

int ss_index_open(ss_index **out, const char *path, char *errmsg)
{
	ss_index *ix;
	int rc = open_common(&ix, path, SQLITE_OPEN_READONLY, errmsg);
	if (rc)
		return rc;
	rc = check_schema(ix, 0, errmsg);
	if (rc == SS_ERR_IO && ix->hot_journal) {
		/* A crashed build leaves a hot journal only a writer may roll back;
		 * do that once, then go on read-only. */
		sqlite3 *w = NULL;
		if (sqlite3_open_v2(path, &w, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
			sqlite3_busy_timeout(w, BUSY_TIMEOUT_MS);
			sqlite3_exec(w, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
		}
		sqlite3_close(w);
		rc = check_schema(ix, 0, errmsg);
	}
	if (rc)
		goto fail;
	if ((rc = ss_bm25_open(&ix->bm25, ix->db, 0, errmsg)) ||
	    (rc = prep(ix, &ix->query,
		       "SELECT d.id, ?2, f.path, d.byte_offset, d.frame_length, d.fingerprint, d.n_tokens,"
		       " d.file_id FROM docs d JOIN files f ON f.file_id = d.file_id WHERE d.rid = ?1", errmsg)) ||
	    (rc = prep(ix, &ix->rid_of, "SELECT rid FROM docs WHERE id = ?1", errmsg)) ||
	    (rc = prep(ix, &ix->lookup,
		       "SELECT d.id, 0.0, f.path, d.byte_offset, d.frame_length, d.fingerprint, d.n_tokens,"
		       " d.file_id FROM docs d JOIN files f ON f.file_id = d.file_id WHERE d.id = ?1", errmsg)))
		goto fail;
	*out = ix;
	return 0;
fail:
	ss_index_close(ix);
	return rc;
}

int64_t ss_index_count(ss_index *ix)
{
	sqlite3_stmt *st;
	if (!ix || sqlite3_prepare_v2(ix->db, "SELECT count(*) FROM docs", -1, &st, NULL) != SQLITE_OK)
		return SS_ERR_IO;
	int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : SS_ERR_IO;
	sqlite3_finalize(st);
	return n;
}

/* Absolute (or cwd-relative, as the index was named) path of a stored one. */
static char *resolve_path(ss_index *ix, const char *stored)
{
	if (stored[0] == '/')
		return strdup(stored);
	size_t n = strlen(ix->dir) + strlen(stored) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", ix->dir, stored);
	return p;
}

static int hit_from_row(ss_index *ix, sqlite3_stmt *st, ss_index_hit *h)
{
	memset(h, 0, sizeof *h);
	h->id = strdup((const char *)sqlite3_column_text(st, 0));
	h->score = sqlite3_column_double(st, 1);
	h->path = resolve_path(ix, (const char *)sqlite3_column_text(st, 2));
	h->offset = (uint64_t)sqlite3_column_int64(st, 3);
	h->length = (uint64_t)sqlite3_column_int64(st, 4);
	const char *fp = (const char *)sqlite3_column_text(st, 5);
	snprintf(h->fingerprint, sizeof h->fingerprint, "%s", fp ? fp : "");
	h->n_tokens = sqlite3_column_int64(st, 6);
	h->file_id = sqlite3_column_int64(st, 7);
	if (!h->id || !h->path) {
		ss_index_hit_clear(h);
		return SS_ERR_NOMEM;
	}
	return 0;
}

static int cmp_rid(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* Best first; equal scores by id. */
static int cmp_hit(const void *a, const void *b)
{
	const ss_index_hit *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return strcmp(x->id, y->id);
}

int ss_index_set_bm25(ss_index *ix, double k1, double b, char *errmsg)
{
	if (!ix || !ix->query || !ix->bm25)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (!(k1 >= 0 && k1 <= 1000) || !(b >= 0 && b <= 1))
		return ss_errf(errmsg, SS_ERR_INVALID, "BM25 k1 %g, b %g: want 0 <= k1 <= 1000, 0 <= b <= 1", k1, b);
	ss_bm25_set_params(ix->bm25, k1, b);
	return 0;
}

int ss_index_query(ss_index *ix, const char *query, int k, const char *const *exclude,
		   size_t n_exclude, ss_index_hit **hits, char *errmsg)
{
	*hits = NULL;
	if (!ix || !ix->query)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (k < 1)
		return ss_errf(errmsg, SS_ERR_INVALID, "k must be at least 1");
	int64_t *ex = malloc((n_exclude + 1) * sizeof *ex);
	ss_bm25_hit *top = malloc((size_t)k * sizeof *top);
	ss_index_hit *h = calloc((size_t)k, sizeof *h);
	int n = 0, rc = 0;
	size_t n_ex = 0;
	if (!ex || !top || !h) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	/* One read transaction: the postings, statistics and rows of one
	 * snapshot even while a build commits. */
	if ((rc = exec(ix, "BEGIN", errmsg)))
		goto done;
	for (size_t i = 0; i < n_exclude && !rc; i++) {
		sqlite3_bind_text(ix->rid_of, 1, exclude[i], -1, SQLITE_STATIC);
		int s = sqlite3_step(ix->rid_of);
		if (s == SQLITE_ROW)
			ex[n_ex++] = sqlite3_column_int64(ix->rid_of, 0);
		else if (s != SQLITE_DONE)
			rc = sqlerr(ix, errmsg, "query");
		sqlite3_reset(ix->rid_of);
	}
	qsort(ex, n_ex, sizeof *ex, cmp_rid);
	int n_top = rc ? rc : ss_bm25_search(ix->bm25, query ? query : "", k, ex, n_ex, top, errmsg);
	rc = n_top < 0 ? n_top : 0;
	for (int i = 0; i < n_top && !rc; i++) {
		sqlite3_bind_int64(ix->query, 1, top[i].rid);
		sqlite3_bind_double(ix->query, 2, top[i].score);
		int s = sqlite3_step(ix->query);
		if (s == SQLITE_ROW)
			rc = hit_from_row(ix, ix->query, &h[n++]);
		else
			rc = s == SQLITE_DONE ? ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: postings name row %lld, "
						     "which is not there", (long long)top[i].rid)
					      : sqlerr(ix, errmsg, "query");
		sqlite3_reset(ix->query);
	}
	sqlite3_exec(ix->db, "COMMIT", NULL, NULL, NULL);
	if (!rc) {
		qsort(h, (size_t)n, sizeof *h, cmp_hit);
		for (int i = 0; i < n; i++)
			h[i].rank = i + 1;
	}
done:
	free(ex);
	free(top);
	if (rc) {
		ss_index_hits_free(h, n);
		return rc;
	}
	if (n == 0) {
		free(h);
		h = NULL;
	}
	*hits = h;
	return n;
}

void ss_index_hit_clear(ss_index_hit *hit)
{
	if (!hit)
		return;
	free(hit->id);
	free(hit->path);
	hit->id = hit->path = NULL;
}

void ss_index_hits_free(ss_index_hit *hits, int n)
{
	if (!hits)
		return;
	for (int i = 0; i < n; i++)
		ss_index_hit_clear(&hits[i]);
	free(hits);
}

int ss_index_lookup(ss_index *ix, const char *id, ss_index_hit *hit, char *errmsg)
{
	memset(hit, 0, sizeof *hit);
	if (!ix || !ix->lookup)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	sqlite3_bind_text(ix->lookup, 1, id, -1, SQLITE_STATIC);
	int s = sqlite3_step(ix->lookup), rc;
	if (s == SQLITE_ROW)
		rc = hit_from_row(ix, ix->lookup, hit);
	else if (s == SQLITE_DONE)
		rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "no document %s in the index", id);
	else
		rc = sqlerr(ix, errmsg, "lookup");
	sqlite3_reset(ix->lookup);
	return rc;
}

/* Empties a reader slot (closing its files). */
static void slot_clear(reader_slot *s)
{
	if (s->file_id) {
		ss_reader_close(s->r);
		close(s->fd);
	}
	memset(s, 0, sizeof *s);
}

/* The cached reader (and descriptor) of a state file, opening it when
 * needed. */
static int reader_for(ss_index *ix, const ss_index_hit *hit, reader_slot **out, char *errmsg)
{
	for (int i = 0; i < READER_SLOTS; i++)
		if (ix->slots[i].file_id == hit->file_id && ix->slots[i].r) {
			*out = &ix->slots[i];
			return 0;
		}
	reader_slot *s = &ix->slots[ix->next_slot];
	ix->next_slot = (ix->next_slot + 1) % READER_SLOTS;
	slot_clear(s);
	/* The size comes from the descriptor that ss_index_copy reads, so
	 * both see the same file even if the path is replaced later. */
	int fd = open(hit->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ss_errf(errmsg, errno == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO,
			    "document %s: state file: %s", hit->id, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		int rc = ss_errf(errmsg, SS_ERR_IO, "document %s: state file is not a regular file", hit->id);
		close(fd);
		return rc;
	}
	char em[SS_ERRMSG_MAX];
	int rc = ss_reader_open(&s->r, hit->path, 0, em);
	if (rc) {
		close(fd);
		return ss_errf(errmsg, rc, "document %s: %s", hit->id, em);
	}
	s->fd = fd;
	s->file_id = hit->file_id;
	s->size = (uint64_t)sb.st_size;
	*out = s;
	return 0;
}

int ss_index_read(ss_index *ix, const ss_index_hit *hit, int meta_only, const ss_record **recp, char *errmsg)
{
	*recp = NULL;
	if (!ix || !hit || !hit->path || !hit->id)
		return ss_errf(errmsg, SS_ERR_INVALID, "no hit to read");
	reader_slot *s = NULL;
	int rc = reader_for(ix, hit, &s, errmsg);
	if (rc)
		return rc;
	const char *id = hit->id;
	unsigned long long off = (unsigned long long)hit->offset;
	if (hit->offset >= s->size || hit->length > s->size - hit->offset)
		return ss_errf(errmsg, SS_ERR_TRUNCATED,
			    "document %s at byte offset %llu: the file has %llu bytes, the record needs %llu: "
			    "truncated or replaced since the index was built",
			    id, off, (unsigned long long)s->size, off + (unsigned long long)hit->length);
	if ((rc = ss_reader_seek(s->r, hit->offset)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", id, off, ss_reader_error(s->r));
	const ss_record *rec;
	rc = meta_only ? ss_reader_next_meta(s->r, &rec) : ss_reader_next(s->r, &rec);
	if (rc == 0)
		return ss_errf(errmsg, SS_ERR_TRUNCATED, "document %s at byte offset %llu: no record there", id, off);
	if (rc < 0)
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s (file replaced since the index was built?)",
			    id, off, ss_reader_error(s->r));
	if (strcmp(ss_record_format(rec), SS_FORMAT_STATES))
		return ss_errf(errmsg, SS_ERR_MISMATCH, "document %s at byte offset %llu: a %s record, not a state",
			    id, off, ss_record_format(rec));
	char em[SS_ERRMSG_MAX];
	ss_state_free(&ix->meta);
	if ((rc = ss_record_state_meta(rec, &ix->meta, em)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", id, off, em);
	if (strcmp(ix->meta.id, id))
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			    "document %s at byte offset %llu: the record there is document %s: "
			    "state file replaced since the index was built",
			    id, off, ix->meta.id);
	if (strcmp(ix->meta.fingerprint, hit->fingerprint))
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			    "document %s at byte offset %llu: model fingerprint %s, indexed %s: "
			    "state file replaced since the index was built",
			    id, off, ix->meta.fingerprint, hit->fingerprint);
	if (ss_record_length(rec) != hit->length)
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			    "document %s at byte offset %llu: record of %llu bytes, indexed %llu: "
			    "state file replaced since the index was built",
			    id, off, (unsigned long long)ss_record_length(rec), (unsigned long long)hit->length);
	*recp = rec;
	return 0;
}

int ss_index_copy(ss_index *ix, const ss_index_hit *hit, ss_writer *w, char *errmsg)
{
	const ss_record *rec;
	int rc = ss_index_read(ix, hit, 1, &rec, errmsg);
	if (rc)
		return rc;
	reader_slot *s = NULL;
	if ((rc = reader_for(ix, hit, &s, errmsg)))
		return rc;
	const char *id = hit->id;
	unsigned long long off = (unsigned long long)hit->offset;
	if (hit->length > SIZE_MAX || hit->length > (uint64_t)INT64_MAX)
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "document %s at byte offset %llu: record of %llu bytes",
			    id, off, (unsigned long long)hit->length);
	size_t len = (size_t)hit->length;
	if (len > ix->frame_cap) {
		unsigned char *p = realloc(ix->frame, len);
		if (!p)
			return ss_errf(errmsg, SS_ERR_NOMEM, "document %s: out of memory for a record of %zu bytes", id, len);
		ix->frame = p;
		ix->frame_cap = len;
	}
	/* ss_index_read checked the size the file had when it was opened; a
	 * file truncated since then shows here as a short read. */
	size_t got = 0;
	while (got < len) {
		ssize_t n = pread(s->fd, ix->frame + got, len - got, (off_t)(hit->offset + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ss_errf(errmsg, SS_ERR_IO, "document %s at byte offset %llu: read error: %s", id, off,
				    strerror(errno));
		if (n == 0)
			return ss_errf(errmsg, SS_ERR_TRUNCATED,
				    "document %s at byte offset %llu: the file ends %zu bytes into the record's "
				    "%zu: truncated or replaced since the index was built",
				    id, off, got, len);
		got += (size_t)n;
	}
	if (errmsg)
		errmsg[0] = 0;
	if ((rc = ss_writer_put_annotation(w, hit->rank, hit->score)) ||
	    (rc = ss_writer_put_frame(w, ix->frame, len, NULL)))
		return rc;
	return 0;
}

void ss_index_close(ss_index *ix)
{
	if (!ix)
		return;
	sqlite3_stmt **stmts[] = { &ix->find, &ix->ins_doc, &ix->set_text, &ix->set_state, &ix->touch,
				   &ix->file_find, &ix->file_ins, &ix->query, &ix->lookup, &ix->rid_of };
	for (size_t i = 0; i < sizeof stmts / sizeof *stmts; i++)
		sqlite3_finalize(*stmts[i]);
	ss_bm25_close(ix->bm25);
	if (ix->db) {
		if (ix->building)
			sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
		sqlite3_close(ix->db);
	}
	/* A failed build of a new index leaves nothing; the lock goes last. */
	if (ix->created_path)
		unlink(ix->created_path);
	if (ix->lock_path) {
		unlink(ix->lock_path);
		close(ix->lock_fd);
	}
	free(ix->created_path);
	free(ix->lock_path);
	for (int i = 0; i < READER_SLOTS; i++)
		slot_clear(&ix->slots[i]);
	ss_state_free(&ix->meta);
	free(ix->frame);
	free(ix->last_path);
	free(ix->dir);
	free(ix);
}
