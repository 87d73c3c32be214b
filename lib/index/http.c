/*
 * http.c — state records fetched by HTTP range requests (lib/index/http.h
 * has the contract, ss_index.h the public side).
 * One curl multi handle per index: its connection cache keeps connections
 * alive from one query to the next, and a query's hits are fetched as
 * parallel transfers (at most IXH_PARALLEL per host). Each transfer asks
 * for "Range: bytes=OFF-END" and accepts only 206 with that Content-Range
 * and exactly its bytes: a 200 (a server ignoring Range) is aborted at its
 * first body byte, not downloaded whole. Transient failures (5xx, 408,
 * 429, a refused, reset or cut connection, a stall) are retried after
 * 0.25 s, 0.5 s, 1 s ... (at most 8 s).
 * ref: RFC 9110 §14 (range requests), §15.6 (5xx); libcurl-multi(3).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>
#include <time.h>

#include <curl/curl.h>

#include "index/internal.h"
#include "index/http.h"

/* Transfers in flight to one host at once. */
#define IXH_PARALLEL 8
#define IXH_MAX_REDIRS 8
#define IXH_BACKOFF_S 0.25
#define IXH_BACKOFF_MAX_S 8.0

/* One fetched (or failed) frame. */
typedef struct {
	char *url;
	uint64_t offset, length;
	unsigned char *buf; /* length bytes when rc == 0 */
	int rc;             /* 0 or SS_ERR_* */
	char err[SS_ERRMSG_MAX]; /* why rc: the HTTP status or curl's error */
	int verified;       /* its checksum verified, its metadata checked against its hit */
	int fd;             /* the memfd buf maps (frame_alloc), -1 when none */
} ixh_entry;

struct ixh_cache {
	CURLM *multi;
	ixh_entry *e;
	int n, cap;
	uint64_t bytes;    /* the entries' buffers */
	ss_reader *r;      /* over the last frame read (its record is ss_index_read's) */
};

/* One transfer of ixh_fetch. */
typedef struct {
	ixh_entry *e;
	CURL *easy;
	uint64_t got;
	int tries;
	double retry_at;   /* > 0: waiting to be tried again */
	int done;
	int range_ok;      /* the last response's Content-Range is the one asked for */
	int refused;       /* the body was refused: 1 not 206, 2 another range, 3 too long */
	long status;
	char errbuf[CURL_ERROR_SIZE];
} xfer;

/* A frame's buffer: a memfd (so that the reader seeks in it as in a state
 * file, and ss_index_copy sends it to the output as it sends a local
 * frame) mapped with its pages populated at once (a fault per 4 KiB page
 * of a 4.4 MB record cost a tenth of a query). Returns the mapping and
 * sets *fd, or NULL with errno set. */
static unsigned char *frame_alloc(uint64_t len, int *fd)
{
	*fd = memfd_create("ss-frame", MFD_CLOEXEC);
	if (*fd < 0)
		return NULL;
	void *p = MAP_FAILED;
	if (ftruncate(*fd, (off_t)len) == 0)
		p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, *fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(*fd);
		*fd = -1;
		errno = e;
		return NULL;
	}
	return p;
}

static void frame_free(unsigned char *p, uint64_t len, int fd)
{
	if (p)
		munmap(p, (size_t)len);
	if (fd >= 0)
		close(fd);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int ss_url_is_http(const char *path)
{
	return path && (!strncasecmp(path, "http://", 7) || !strncasecmp(path, "https://", 8));
}

const char *ss_url_redact(const char *path, char *buf, size_t size)
{
	if (!size)
		return buf;
	if (!ss_url_is_http(path)) {
		snprintf(buf, size, "%s", path ? path : "");
		return buf;
	}
	const char *auth = strstr(path, "://") + 3;
	size_t alen = strcspn(auth, "/?#");
	const char *host = auth;
	for (const char *p = auth; p < auth + alen; p++)
		if (*p == '@')
			host = p + 1;
	size_t plen = strcspn(auth + alen, "?#");
	int has_query = auth[alen + plen] == '?';
	snprintf(buf, size, "%.*s%s%.*s%.*s%s", (int)(auth - path), path, host != auth ? "***@" : "",
		 (int)(alen - (size_t)(host - auth)), host, (int)plen, auth + alen, has_query ? "?***" : "");
	return buf;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
	xfer *x = arg;
	size_t n = sz * nm;
	/* Every response of a redirect chain starts with its status line:
	 * only the last one's Content-Range counts. */
	if (n >= 5 && !strncmp(p, "HTTP/", 5))
		x->range_ok = 0;
	else if (n > 14 && !strncasecmp(p, "content-range:", 14)) {
		unsigned long long a, b;
		char tail[32];
		const ixh_entry *e = x->e;
		if (sscanf(p + 14, " bytes %llu-%llu/%31s", &a, &b, tail) == 3 && a == e->offset &&
		    b == e->offset + e->length - 1)
			x->range_ok = 1;
	}
	return n;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *arg)
{
	xfer *x = arg;
	size_t n = sz * nm;
	if (x->got == 0) {
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
		if (x->status != 206)
			x->refused = 1;
		else if (!x->range_ok)
			x->refused = 2;
		if (x->refused)
			return 0; /* abort: CURLE_WRITE_ERROR */
	}
	if (n > x->e->length - x->got) {
		x->refused = 3;
		return 0;
	}
	memcpy(x->e->buf + x->got, p, n);
	x->got += n;
	return n;
}

/* Starts (or restarts) transfer x on the multi handle. 0 or SS_ERR_NOMEM. */
static int xfer_start(struct ixh_cache *c, xfer *x, double timeout_s)
{
	ixh_entry *e = x->e;
	char range[64];
	snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)e->offset,
		 (unsigned long long)(e->offset + e->length - 1));
	if (!x->easy && !(x->easy = curl_easy_init()))
		return SS_ERR_NOMEM;
	CURL *h = x->easy;
	curl_easy_reset(h);
	long t_ms = (long)(timeout_s * 1000);
	curl_easy_setopt(h, CURLOPT_URL, e->url);
	curl_easy_setopt(h, CURLOPT_RANGE, range);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, (long)IXH_MAX_REDIRS);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, t_ms);
	/* A stall, not a total: a 44 MB record over a slow link may take long. */
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, t_ms / 1000 > 0 ? t_ms / 1000 : 1L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "ss/" SS_VERSION);
	/* Fewer reads and callbacks for records of megabytes. */
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(h, CURLOPT_PRIVATE, x);
	x->got = 0;
	x->range_ok = x->refused = 0;
	x->status = 0;
	x->errbuf[0] = 0;
	x->retry_at = 0;
	x->tries++;
	return curl_multi_add_handle(c->multi, h) == CURLM_OK ? 0 : SS_ERR_NOMEM;
}

static int http_transient(long status)
{
	return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

static int curl_transient(CURLcode res)
{
	switch (res) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return 1;
	default:
		return 0;
	}
}

/* Judges finished transfer x (curl's result res): 0 done, 1 to retry
 * (transient), or its error set in x->e (rc, err). */
static int xfer_judge(xfer *x, CURLcode res, int retries)
{
	ixh_entry *e = x->e;
	long status = x->status;
	if (!status)
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	int transient = 0, rc = 0;
	char what[SS_ERRMSG_MAX] = "";
	if (x->refused == 1 || (res == CURLE_OK && status != 206)) {
		if (status >= 200 && status < 300) {
			rc = SS_ERR_UNSUPPORTED;
			snprintf(what, sizeof what, "HTTP %ld instead of 206: the server ignores range requests "
				 "(refused rather than downloading the whole file)", status);
		} else if (status >= 300 && status < 400) {
			rc = SS_ERR_IO;
			snprintf(what, sizeof what, "HTTP %ld: a redirect without a usable Location", status);
		} else {
			transient = http_transient(status);
			rc = status == 404 || status == 410 ? SS_ERR_NOTFOUND : status == 416 ? SS_ERR_TRUNCATED : SS_ERR_IO;
			snprintf(what, sizeof what, "HTTP %ld%s", status,
				 status == 416 ? " (range not satisfiable: the file is shorter than the index says; "
						 "replaced since the index was built?)" : "");
		}
	} else if (x->refused == 2) {
		rc = SS_ERR_MISMATCH;
		snprintf(what, sizeof what, "HTTP 206 with another Content-Range than the bytes asked for");
	} else if (x->refused == 3) {
		rc = SS_ERR_MISMATCH;
		snprintf(what, sizeof what, "HTTP 206 with more than the %llu bytes asked for",
			 (unsigned long long)e->length);
	} else if (res == CURLE_TOO_MANY_REDIRECTS) {
		rc = SS_ERR_IO;
		snprintf(what, sizeof what, "more than %d redirects (a redirect loop?)", IXH_MAX_REDIRS);
	} else if (res != CURLE_OK) {
		transient = curl_transient(res);
		rc = res == CURLE_PARTIAL_FILE ? SS_ERR_TRUNCATED : SS_ERR_IO;
		snprintf(what, sizeof what, "%s%s%s", curl_easy_strerror(res), x->errbuf[0] ? ": " : "", x->errbuf);
		if (status)
			snprintf(what + strlen(what), sizeof what - strlen(what), " (HTTP %ld, %llu of %llu bytes)",
				 status, (unsigned long long)x->got, (unsigned long long)e->length);
	} else if (x->got != e->length) {
		transient = 1;
		rc = SS_ERR_TRUNCATED;
		snprintf(what, sizeof what, "HTTP 206 with %llu of %llu bytes (short read)",
			 (unsigned long long)x->got, (unsigned long long)e->length);
	}
	if (!rc)
		return 0;
	if (transient && x->tries <= retries)
		return 1;
	e->rc = rc;
	if (x->tries > 1)
		snprintf(e->err, sizeof e->err, "%.*s (%d tries)", (int)sizeof e->err - 32, what, x->tries % 1000);
	else
		snprintf(e->err, sizeof e->err, "%s", what);
	return -1;
}

/* Fetches entries e[0..n) (url, offset, length set; buf allocated here)
 * in parallel, retrying transient failures; each ends with rc 0 and its
 * bytes, or rc and err. Returns 0, or SS_ERR_NOMEM (nothing usable). */
static int ixh_fetch(ss_index *ix, ixh_entry **e, int n)
{
	struct ixh_cache *c = ix->http;
	xfer *x = calloc((size_t)n, sizeof *x);
	if (!x)
		return SS_ERR_NOMEM;
	int rc = 0, left = n;
	for (int i = 0; i < n && !rc; i++) {
		x[i].e = e[i];
		if (!e[i]->length || !(e[i]->buf = frame_alloc(e[i]->length, &e[i]->fd)))
			rc = SS_ERR_NOMEM;
		else
			rc = xfer_start(c, &x[i], ix->http_timeout);
	}
	while (!rc && left > 0) {
		int running = 0;
		curl_multi_perform(c->multi, &running);
		CURLMsg *m;
		int q;
		while ((m = curl_multi_info_read(c->multi, &q))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			xfer *t = NULL;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&t);
			CURLcode res = m->data.result;
			curl_multi_remove_handle(c->multi, m->easy_handle);
			int j = xfer_judge(t, res, ix->http_retries);
			if (j == 1) {
				double wait = IXH_BACKOFF_S * (double)(1u << (t->tries - 1 < 5 ? t->tries - 1 : 5));
				t->retry_at = now_s() + (wait < IXH_BACKOFF_MAX_S ? wait : IXH_BACKOFF_MAX_S);
			} else {
				t->done = 1;
				left--;
			}
		}
		double now = now_s(), next = 0;
		for (int i = 0; i < n && !rc; i++) {
			if (x[i].done || x[i].retry_at <= 0)
				continue;
			if (x[i].retry_at <= now)
				rc = xfer_start(c, &x[i], ix->http_timeout);
			else if (next == 0 || x[i].retry_at < next)
				next = x[i].retry_at;
		}
		if (left == 0 || rc)
			break;
		int wait_ms = 1000;
		if (next > 0 && (next - now) * 1000 < wait_ms)
			wait_ms = (int)((next - now) * 1000) + 1;
		curl_multi_poll(c->multi, NULL, 0, wait_ms, NULL);
	}
	for (int i = 0; i < n; i++) {
		if (x[i].easy) {
			curl_multi_remove_handle(c->multi, x[i].easy);
			curl_easy_cleanup(x[i].easy);
		}
		if (e[i]->rc || rc) {
			frame_free(e[i]->buf, e[i]->length, e[i]->fd);
			e[i]->buf = NULL;
			e[i]->fd = -1;
		}
	}
	free(x);
	return rc;
}

/* ix's session, made at its first use. 0, SS_ERR_NOMEM, SS_ERR_IO. */
static int cache_of(ss_index *ix, char *errmsg)
{
	if (ix->http)
		return 0;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return ss_errf(errmsg, SS_ERR_IO, "libcurl: %s", curl_easy_strerror(curl_init_rc));
	struct ixh_cache *c = calloc(1, sizeof *c);
	if (!c || !(c->multi = curl_multi_init())) {
		free(c);
		return SS_ERR_NOMEM;
	}
	curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)IXH_PARALLEL);
	ix->http = c;
	return 0;
}

static void entry_free(ixh_entry *e)
{
	free(e->url);
	frame_free(e->buf, e->length, e->fd);
}

/* Drops the oldest entries until `add` more bytes fit in IXH_CACHE_MAX
 * (all of them when `add` alone does not). */
static void cache_make_room(struct ixh_cache *c, uint64_t add)
{
	int drop = 0;
	while (drop < c->n && c->bytes + add > IXH_CACHE_MAX) {
		c->bytes -= c->e[drop].buf ? c->e[drop].length : 0;
		entry_free(&c->e[drop++]);
	}
	if (drop) { /* c->e may be NULL while the cache is empty: memmove's arguments must not */
		memmove(c->e, c->e + drop, (size_t)(c->n - drop) * sizeof *c->e);
		c->n -= drop;
	}
}

static ixh_entry *cache_find(struct ixh_cache *c, const ss_index_hit *hit)
{
	for (int i = c->n - 1; i >= 0; i--)
		if (c->e[i].offset == hit->offset && c->e[i].length == hit->length && !strcmp(c->e[i].url, hit->path))
			return &c->e[i];
	return NULL;
}

/* Appends entries for hits[0..n) of a URL not yet fetched (at most one
 * per frame) and fetches them. *e (may be NULL) gets the entry of
 * hits[0]. Returns 0 or SS_ERR_NOMEM. */
static int cache_fetch(ss_index *ix, const ss_index_hit *hits, int n, ixh_entry **e0, char *errmsg)
{
	int rc = cache_of(ix, errmsg);
	if (rc)
		return rc;
	struct ixh_cache *c = ix->http;
	uint64_t add = 0;
	int want = 0;
	for (int i = 0; i < n; i++)
		if (!hits[i].stateless && ss_url_is_http(hits[i].path) && !cache_find(c, &hits[i])) {
			add += hits[i].length;
			want++;
		}
	cache_make_room(c, add);
	if (c->n + want > c->cap) {
		int ncap = c->n + want + 16;
		ixh_entry *ne = realloc(c->e, (size_t)ncap * sizeof *ne);
		if (!ne)
			return SS_ERR_NOMEM;
		c->e = ne;
		c->cap = ncap;
	}
	int first = c->n;
	for (int i = 0; i < n; i++) {
		if (hits[i].stateless || !ss_url_is_http(hits[i].path) || cache_find(c, &hits[i]))
			continue;
		ixh_entry *e = &c->e[c->n];
		memset(e, 0, sizeof *e);
		e->fd = -1;
		if (!(e->url = strdup(hits[i].path)))
			return SS_ERR_NOMEM;
		e->offset = hits[i].offset;
		e->length = hits[i].length;
		c->n++;
	}
	ixh_entry **pe = malloc((size_t)(c->n - first + 1) * sizeof *pe);
	if (!pe)
		return SS_ERR_NOMEM;
	for (int i = first; i < c->n; i++)
		pe[i - first] = &c->e[i];
	rc = ixh_fetch(ix, pe, c->n - first);
	free(pe);
	for (int i = first; i < c->n; i++)
		c->bytes += c->e[i].buf ? c->e[i].length : 0;
	if (rc) {
		while (c->n > first)
			entry_free(&c->e[--c->n]);
		return ss_errf(errmsg, rc, "fetching %d state records: %s", want, ss_strerror(rc));
	}
	if (e0)
		*e0 = cache_find(c, &hits[0]);
	return 0;
}

int ixh_prefetch(ss_index *ix, const ss_index_hit *hits, int n, char *errmsg)
{
	return n > 0 ? cache_fetch(ix, hits, n, NULL, errmsg) : 0;
}

/* The entry of hit, fetched now when it is not cached. */
static int entry_of(ss_index *ix, const ss_index_hit *hit, ixh_entry **e, char *errmsg)
{
	*e = ix->http ? cache_find(ix->http, hit) : NULL;
	if (*e)
		return 0;
	int rc = cache_fetch(ix, hit, 1, e, errmsg);
	if (!rc && !*e)
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "document %s: fetched frame not kept", hit->id);
	return rc;
}

int ixh_read(ss_index *ix, const ss_index_hit *hit, int meta_only, const ss_record **recp, char *errmsg)
{
	*recp = NULL;
	ixh_entry *e;
	int rc = entry_of(ix, hit, &e, errmsg);
	if (rc)
		return rc;
	unsigned long long off = (unsigned long long)hit->offset;
	if (e->rc)
		return ss_errf(errmsg, e->rc, "document %s at byte offset %llu: %s", hit->id, off, e->err);
	struct ixh_cache *c = ix->http;
	ss_reader_close(c->r);
	c->r = NULL;
	char em[SS_ERRMSG_MAX];
	if ((rc = ss_reader_open_fd(&c->r, e->fd, hit->path, 0, em)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", hit->id, off, em);
	/* The frame's checksum, verified once, is what catches a file
	 * replaced on the server with a record of the same length. */
	if (!e->verified && (rc = ss_frame_verify(e->buf, (size_t)e->length, em)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s (file replaced on the server since "
			       "the index was built?)", hit->id, off, em);
	const ss_record *rec;
	rc = meta_only ? ss_reader_next_meta(c->r, &rec) : ss_reader_next(c->r, &rec);
	if (rc == 0)
		return ss_errf(errmsg, SS_ERR_TRUNCATED, "document %s at byte offset %llu: no record there", hit->id,
			       off);
	if (rc < 0)
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s (file replaced on the server since "
			       "the index was built?)", hit->id, off, ss_reader_error(c->r));
	if ((rc = ix_check_record(ix, hit, rec, errmsg)))
		return rc;
	e->verified = 1;
	*recp = rec;
	return 0;
}

int ixh_copy(ss_index *ix, const ss_index_hit *hit, ss_writer *w, char *errmsg)
{
	ixh_entry *e;
	int rc = entry_of(ix, hit, &e, errmsg);
	const ss_record *rec;
	if (!rc && (e->rc || !e->verified))
		rc = ixh_read(ix, hit, 1, &rec, errmsg);
	if (rc)
		return rc;
	if (errmsg)
		errmsg[0] = 0;
	if ((rc = ss_writer_put_annotation(w, hit->rank, hit->score)))
		return rc;
	uint64_t done = 0;
	rc = ss_writer_put_file_range(w, e->fd, 0, e->length, &done);
	if (rc && !ss_writer_failed(w))
		return ss_errf(errmsg, rc, "document %s: its fetched frame: %s", hit->id, strerror(errno));
	return rc;
}

void ixh_close(ss_index *ix)
{
	struct ixh_cache *c = ix->http;
	if (!c)
		return;
	for (int i = 0; i < c->n; i++)
		entry_free(&c->e[i]);
	free(c->e);
	ss_reader_close(c->r);
	curl_multi_cleanup(c->multi);
	free(c);
	ix->http = NULL;
}
