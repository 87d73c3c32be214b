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
 * 0.25 s, 0.5 s, 1 s ... (at most 8 s), asking for the bytes not yet
 * received.
 * A record longer than IXH_HEAD is fetched in two parts: its head first
 * (with the other hits' heads, in parallel), enough to read and check its
 * metadata before anything is written; then, when it is copied to an
 * output that is a temporary file until committed, the rest straight into
 * that output as it arrives, the whole frame checked on the way
 * (ss_frame_check): no buffer for the frame, no second copy, and the
 * output's syncer writing back while the rest arrives. The caller
 * abandons the output when the check fails. From a server slow to answer
 * (IXH_SLOW_S) the records are fetched whole in parallel instead, and so
 * is a record streamed once and asked for again (a batch's queries that
 * share hits): then kept whole for the queries after.
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
/* The bytes of a record fetched first, with its hits' others (its head):
 * IXH_HEAD, or a sixteenth of the record when more, so that its metadata
 * lies in them: a few KiB, but a q8 state's scales are 4 bytes per d_state
 * bytes of ssm (3% of a Mamba-2 record). A record whose metadata the head
 * misses is fetched whole. */
#define IXH_HEAD (256u << 10)
/* A server slower than this to answer a request (from the request sent to
 * its first byte: an object store's 20-200 ms, not a web server's on the
 * same network) would make the rests, streamed one after another, pay
 * that once each: its records are fetched whole, in parallel, instead. */
#define IXH_SLOW_S 0.05

/* A streamed frame's rest reaches the output through IXH_RING slots of
 * IXH_SLOT bytes: curl's callback checks each piece and copies it into a
 * slot, and a thread of the stream's own writes the slots out in order, so
 * that the write into the output's page cache (as much work as the
 * receive and the check together) runs beside them on another core. */
#define IXH_RING 4
#define IXH_SLOT (512u << 10)

typedef struct {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	ss_writer *w;
	unsigned char *slot[IXH_RING];
	size_t len[IXH_RING];
	int first, queued; /* slots [first, first + queued) (mod IXH_RING) wait for the writer */
	int fill;          /* the slot being filled (the callback's; the one after those queued) */
	int stop;          /* no more slots come */
	int failed;        /* a write failed (its errno: err_no); the slots after it are dropped */
	int err_no;
} ring;

/* One fetched (or failed) frame. */
typedef struct {
	char *url;
	uint64_t offset, length;
	uint64_t have;      /* the frame's first bytes fetched: all length, or its head (first_bytes) */
	unsigned char *buf; /* have bytes when rc == 0 */
	int rc;             /* 0 or SS_ERR_* */
	char err[SS_ERRMSG_MAX]; /* why rc: the HTTP status or curl's error */
	int verified;       /* its metadata checked against its hit, and its
			     * checksum verified when it is whole */
	int fd;             /* the memfd buf maps (frame_alloc), -1 when none */
	int streamed;       /* its rest streamed to an output once: asked for
			     * again (a batch's queries share hits), it is kept whole */
} ixh_entry;

struct ixh_cache {
	CURLM *multi;
	ixh_entry *e;
	int n, cap;
	uint64_t bytes;    /* the entries' buffers */
	ss_reader *r;      /* over the last frame read (its record is ss_index_read's) */
	ss_frame_check *ck; /* the frame streamed to an output (ixh_copy) */
	ring *rg;           /* and its way there; NULL until the first */
	int slow;           /* the server's last answers came after IXH_SLOW_S */
};

/* One transfer: the bytes [at, end) of e's frame, into e->buf at `at`,
 * or checked by ck and appended to rg's writer when rg is set. */
typedef struct {
	ixh_entry *e;
	CURL *easy;
	uint64_t at, end;  /* what is still to come (a retry resumes at at) */
	uint64_t got;      /* of it, in this response */
	ring *rg;
	ss_frame_check *ck;
	int tries;
	double retry_at;   /* > 0: waiting to be tried again */
	int done;
	int rc;            /* when done: 0 or SS_ERR_* with err */
	int range_ok;      /* the last response's Content-Range is the one asked for */
	int refused;       /* the body was refused: 1 not 206, 2 another range, 3 too long,
			    * 4 rg's writer failed, 5 ck refused it (rc, err set) */
	long status;
	char errbuf[CURL_ERROR_SIZE];
	char err[SS_ERRMSG_MAX];
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
		if (sscanf(p + 14, " bytes %llu-%llu/%31s", &a, &b, tail) == 3 && a == e->offset + x->at &&
		    b == e->offset + x->end - 1)
			x->range_ok = 1;
	}
	return n;
}

static void *ring_writer(void *arg)
{
	ring *g = arg;
	pthread_mutex_lock(&g->mu);
	for (;;) {
		while (!g->queued && !g->stop)
			pthread_cond_wait(&g->cv, &g->mu);
		if (!g->queued)
			break;
		int s = g->first, failed = g->failed;
		pthread_mutex_unlock(&g->mu);
		int rc = failed ? 0 : ss_writer_put_frame(g->w, g->slot[s], g->len[s], NULL);
		int e = errno;
		pthread_mutex_lock(&g->mu);
		if (rc && !g->failed) {
			g->failed = 1;
			g->err_no = e;
		}
		g->first = (g->first + 1) % IXH_RING;
		g->queued--;
		pthread_cond_broadcast(&g->cv);
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

/* Queues the slot being filled and waits for the next to be free. 0, or
 * SS_ERR_IO when the writer has failed. */
static int ring_push(ring *g)
{
	pthread_mutex_lock(&g->mu);
	g->queued++;
	pthread_cond_broadcast(&g->cv);
	while (g->queued == IXH_RING && !g->failed)
		pthread_cond_wait(&g->cv, &g->mu);
	int failed = g->failed;
	pthread_mutex_unlock(&g->mu);
	g->fill = (g->fill + 1) % IXH_RING;
	g->len[g->fill] = 0;
	return failed ? SS_ERR_IO : 0;
}

/* Copies p[0..n) into the ring (queuing each slot filled). 0 or SS_ERR_IO. */
static int ring_put(ring *g, const unsigned char *p, size_t n)
{
	while (n) {
		size_t k = IXH_SLOT - g->len[g->fill];
		if (k > n)
			k = n;
		memcpy(g->slot[g->fill] + g->len[g->fill], p, k);
		g->len[g->fill] += k;
		p += k;
		n -= k;
		if (g->len[g->fill] == IXH_SLOT && ring_push(g))
			return SS_ERR_IO;
	}
	return 0;
}

/* c's ring, made at its first use, its writer thread started for w.
 * NULL: out of memory or no thread. */
static ring *ring_start(struct ixh_cache *c, ss_writer *w)
{
	ring *g = c->rg;
	if (!g) {
		if (!(g = calloc(1, sizeof *g)))
			return NULL;
		for (int i = 0; i < IXH_RING; i++)
			if (!(g->slot[i] = malloc(IXH_SLOT))) {
				while (i--)
					free(g->slot[i]);
				free(g);
				return NULL;
			}
		pthread_mutex_init(&g->mu, NULL);
		pthread_cond_init(&g->cv, NULL);
		c->rg = g;
	}
	g->w = w;
	g->first = g->queued = g->fill = 0;
	g->len[0] = 0;
	g->stop = g->failed = 0;
	return pthread_create(&g->th, NULL, ring_writer, g) == 0 ? g : NULL;
}

/* Queues what is left in the slot being filled (flush), waits for the
 * writer to be done and stops it. 0, or SS_ERR_IO with errno the failed
 * write's. */
static int ring_stop(ring *g, int flush)
{
	if (flush && g->len[g->fill])
		ring_push(g);
	pthread_mutex_lock(&g->mu);
	g->stop = 1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	pthread_join(g->th, NULL);
	if (g->failed)
		errno = g->err_no;
	return g->failed ? SS_ERR_IO : 0;
}

static void ring_free(ring *g)
{
	if (!g)
		return;
	for (int i = 0; i < IXH_RING; i++)
		free(g->slot[i]);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
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
	if (n > x->end - x->at - x->got) {
		x->refused = 3;
		return 0;
	}
	if (!x->rg)
		memcpy(x->e->buf + x->at + x->got, p, n);
	else if ((x->rc = ss_frame_check_update(x->ck, p, n, x->err))) {
		x->refused = 5;
		return 0;
	} else if (ring_put(x->rg, (const unsigned char *)p, n)) {
		x->refused = 4;
		return 0;
	}
	x->got += n;
	return n;
}

/* Starts (or restarts) transfer x on the multi handle. 0 or SS_ERR_NOMEM. */
static int xfer_start(struct ixh_cache *c, xfer *x, double timeout_s)
{
	ixh_entry *e = x->e;
	char range[64];
	snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)(e->offset + x->at),
		 (unsigned long long)(e->offset + x->end - 1));
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
 * (transient), or its error set in x (rc, err; err empty when w failed). */
static int xfer_judge(xfer *x, CURLcode res, int retries)
{
	long status = x->status;
	if (!status)
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	int transient = 0, rc = 0;
	char what[SS_ERRMSG_MAX] = "";
	if (x->refused >= 4) {
		if (x->refused == 4) {
			x->rc = SS_ERR_IO;
			x->err[0] = 0;
		}
		return -1;
	}
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
			 (unsigned long long)(x->end - x->at));
	} else if (res == CURLE_TOO_MANY_REDIRECTS) {
		rc = SS_ERR_IO;
		snprintf(what, sizeof what, "more than %d redirects (a redirect loop?)", IXH_MAX_REDIRS);
	} else if (res != CURLE_OK) {
		transient = curl_transient(res);
		rc = res == CURLE_PARTIAL_FILE ? SS_ERR_TRUNCATED : SS_ERR_IO;
		snprintf(what, sizeof what, "%s%s%s", curl_easy_strerror(res), x->errbuf[0] ? ": " : "", x->errbuf);
		if (status)
			snprintf(what + strlen(what), sizeof what - strlen(what), " (HTTP %ld, %llu of %llu bytes)",
				 status, (unsigned long long)x->got, (unsigned long long)(x->end - x->at));
	} else if (x->got != x->end - x->at) {
		transient = 1;
		rc = SS_ERR_TRUNCATED;
		snprintf(what, sizeof what, "HTTP 206 with %llu of %llu bytes (short read)",
			 (unsigned long long)x->got, (unsigned long long)(x->end - x->at));
	}
	if (!rc)
		return 0;
	if (transient && x->tries <= retries)
		return 1;
	x->rc = rc;
	if (x->tries > 1)
		snprintf(x->err, sizeof x->err, "%.*s (%d tries)", (int)sizeof x->err - 32, what, x->tries % 1000);
	else
		snprintf(x->err, sizeof x->err, "%s", what);
	return -1;
}

/* Runs transfers x[0..n) (started: xfer_start) until each is done (its
 * rc and err set), retrying the transient failures of each from its
 * first byte not yet received. Returns 0, or SS_ERR_NOMEM (then some
 * may not be done). Either way xfers_end follows. */
static int xfers_run(ss_index *ix, xfer *x, int n)
{
	struct ixh_cache *c = ix->http;
	int rc = 0, left = n;
	curl_off_t wait_us = -1; /* the quickest answer's: c->slow */
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
			curl_off_t sent = 0, first = 0;
			if (res == CURLE_OK && !curl_easy_getinfo(t->easy, CURLINFO_PRETRANSFER_TIME_T, &sent) &&
			    !curl_easy_getinfo(t->easy, CURLINFO_STARTTRANSFER_TIME_T, &first) &&
			    (wait_us < 0 || first - sent < wait_us))
				wait_us = first - sent;
			int j = xfer_judge(t, res, ix->http_retries);
			if (j == 1) {
				t->at += t->got; /* kept: the retry asks for the rest */
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
	if (wait_us >= 0)
		c->slow = wait_us >= (curl_off_t)(IXH_SLOW_S * 1e6);
	return rc;
}

/* Frees the handles of transfers x[0..n), done or not. */
static void xfers_end(struct ixh_cache *c, xfer *x, int n)
{
	for (int i = 0; i < n; i++)
		if (x[i].easy) {
			curl_multi_remove_handle(c->multi, x[i].easy);
			curl_easy_cleanup(x[i].easy);
			x[i].easy = NULL;
		}
}

/* Fetches the first `have` bytes of entries e[0..n) (url, offset, length,
 * have set; buf allocated here) in parallel; each ends with rc 0 and its
 * bytes, or rc and err. Returns 0, or SS_ERR_NOMEM (nothing usable). */
static int ixh_fetch(ss_index *ix, ixh_entry **e, int n)
{
	xfer *x = calloc((size_t)n, sizeof *x);
	if (!x)
		return SS_ERR_NOMEM;
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		x[i].e = e[i];
		x[i].end = e[i]->have;
		if (!e[i]->have || !(e[i]->buf = frame_alloc(e[i]->have, &e[i]->fd)))
			rc = SS_ERR_NOMEM;
		else
			rc = xfer_start(ix->http, &x[i], ix->http_timeout);
	}
	if (!rc)
		rc = xfers_run(ix, x, n);
	xfers_end(ix->http, x, n);
	for (int i = 0; i < n; i++) {
		if (x[i].rc) {
			e[i]->rc = x[i].rc;
			snprintf(e[i]->err, sizeof e[i]->err, "%s", x[i].err);
		}
		if (e[i]->rc || rc) {
			frame_free(e[i]->buf, e[i]->have, e[i]->fd);
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
	if (ss_frame_check_open(&c->ck)) {
		curl_multi_cleanup(c->multi);
		free(c);
		return SS_ERR_NOMEM;
	}
	ix->http = c;
	return 0;
}

static void entry_free(ixh_entry *e)
{
	free(e->url);
	frame_free(e->buf, e->have, e->fd);
}

/* Drops the oldest entries until `add` more bytes fit in IXH_CACHE_MAX
 * (all of them when `add` alone does not). */
static void cache_make_room(struct ixh_cache *c, uint64_t add)
{
	int drop = 0;
	while (drop < c->n && c->bytes + add > IXH_CACHE_MAX) {
		c->bytes -= c->e[drop].buf ? c->e[drop].have : 0;
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

/* Removes entry e from c. */
static void cache_drop(struct ixh_cache *c, ixh_entry *e)
{
	c->bytes -= e->buf ? e->have : 0;
	entry_free(e);
	memmove(e, e + 1, (size_t)(c->n - (e - c->e) - 1) * sizeof *e);
	c->n--;
}

/* The bytes of a record of `length` fetched first: all of it when whole
 * (or not longer than IXH_HEAD), else its head. */
static uint64_t first_bytes(uint64_t length, int whole)
{
	uint64_t head = length / 16 > IXH_HEAD ? length / 16 : IXH_HEAD;
	return whole || length <= head ? length : head;
}

/* Appends entries for hits[0..n) of a URL not yet fetched (at most one
 * per frame) and fetches them, whole or their heads (first_bytes). *e
 * (may be NULL) gets the entry of hits[0]. Returns 0 or SS_ERR_NOMEM. */
static int cache_fetch(ss_index *ix, const ss_index_hit *hits, int n, int whole, ixh_entry **e0, char *errmsg)
{
	int rc = cache_of(ix, errmsg);
	if (rc)
		return rc;
	struct ixh_cache *c = ix->http;
	uint64_t add = 0;
	int want = 0;
	for (int i = 0; i < n; i++)
		if (!hits[i].stateless && ss_url_is_http(hits[i].path) && !cache_find(c, &hits[i])) {
			add += first_bytes(hits[i].length, whole);
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
		e->have = first_bytes(e->length, whole);
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
		c->bytes += c->e[i].buf ? c->e[i].have : 0;
	if (rc) {
		while (c->n > first)
			entry_free(&c->e[--c->n]);
		return ss_errf(errmsg, rc, "fetching %d state records: %s", want, ss_strerror(rc));
	}
	if (e0)
		*e0 = cache_find(c, &hits[0]);
	return 0;
}

/* Drops the entries of hits[0..n) that hold a head only and, but for
 * `all`, have been streamed once; their hits go to dropped[] (shallow
 * copies; NULL: not kept). Returns how many. */
static int drop_heads(struct ixh_cache *c, const ss_index_hit *hits, int n, int all, ss_index_hit *dropped)
{
	int heads = 0;
	for (int i = 0; i < n; i++) {
		ixh_entry *e = !hits[i].stateless && ss_url_is_http(hits[i].path) ? cache_find(c, &hits[i]) : NULL;
		if (e && !e->rc && e->have < e->length && (all || e->streamed)) {
			cache_drop(c, e);
			if (dropped)
				dropped[heads] = hits[i];
			heads++;
		}
	}
	return heads;
}

int ixh_prefetch(ss_index *ix, const ss_index_hit *hits, int n, int whole, char *errmsg)
{
	if (n <= 0)
		return 0;
	/* Records streamed before, asked for again: whole, kept. */
	if (!whole && ix->http) {
		ss_index_hit *again = malloc((size_t)n * sizeof *again);
		if (!again)
			return SS_ERR_NOMEM;
		int m = drop_heads(ix->http, hits, n, 0, again);
		int rc = m ? cache_fetch(ix, again, m, 1, NULL, errmsg) : 0;
		free(again);
		if (rc)
			return rc;
	}
	int rc = cache_fetch(ix, hits, n, whole || (ix->http && ix->http->slow), NULL, errmsg);
	struct ixh_cache *c = ix->http;
	if (rc || whole || !c->slow)
		return rc;
	/* Heads from a server found slow (IXH_SLOW_S): their records whole. */
	return drop_heads(c, hits, n, 1, NULL) ? cache_fetch(ix, hits, n, 1, NULL, errmsg) : 0;
}

/* The entry of hit (whole: with all its bytes, else at least its head),
 * fetched now when it is not cached so. */
static int entry_of(ss_index *ix, const ss_index_hit *hit, int whole, ixh_entry **e, char *errmsg)
{
	*e = ix->http ? cache_find(ix->http, hit) : NULL;
	if (*e && (!whole || (*e)->have == (*e)->length || (*e)->rc))
		return 0;
	if (*e)
		cache_drop(ix->http, *e);
	int rc = cache_fetch(ix, hit, 1, whole, e, errmsg);
	if (!rc && !*e)
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "document %s: fetched frame not kept", hit->id);
	return rc;
}

/* ixh_read of the entry of hit, fetched whole or its head; 2 when the
 * head does not hold the metadata (fetch it whole). */
static int entry_read(ss_index *ix, const ss_index_hit *hit, int meta_only, int whole, const ss_record **recp,
		      char *errmsg)
{
	ixh_entry *e;
	int rc = entry_of(ix, hit, whole, &e, errmsg);
	if (rc)
		return rc;
	unsigned long long off = (unsigned long long)hit->offset;
	if (e->rc)
		return ss_errf(errmsg, e->rc, "document %s at byte offset %llu: %s", hit->id, off, e->err);
	struct ixh_cache *c = ix->http;
	ss_reader_close(c->r);
	c->r = NULL;
	char em[SS_ERRMSG_MAX];
	int head = e->have < e->length;
	if ((rc = head ? ss_reader_open_head(&c->r, e->fd, hit->path, e->length, em)
		       : ss_reader_open_fd(&c->r, e->fd, hit->path, 0, em)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", hit->id, off, em);
	/* The frame's checksum, verified once, is what catches a file
	 * replaced on the server with a record of the same length (a head's:
	 * as the rest arrives, ixh_copy). */
	if (!head && !e->verified && (rc = ss_frame_verify(e->buf, (size_t)e->length, em)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s (file replaced on the server since "
			       "the index was built?)", hit->id, off, em);
	const ss_record *rec;
	rc = meta_only ? ss_reader_next_meta(c->r, &rec) : ss_reader_next(c->r, &rec);
	if (head && rc == SS_ERR_TRUNCATED)
		return 2;
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

int ixh_read(ss_index *ix, const ss_index_hit *hit, int meta_only, const ss_record **recp, char *errmsg)
{
	*recp = NULL;
	int rc = entry_read(ix, hit, meta_only, !meta_only, recp, errmsg);
	return rc == 2 ? entry_read(ix, hit, meta_only, 1, recp, errmsg) : rc;
}

/* Appends the rest of e's frame (after its head) to w as it arrives, the
 * whole frame checked on the way. 0, or an error with errmsg (empty when
 * w failed). */
static int stream_rest(ss_index *ix, ixh_entry *e, const ss_index_hit *hit, ss_writer *w, char *errmsg)
{
	struct ixh_cache *c = ix->http;
	xfer x = { .e = e, .at = e->have, .end = e->length, .ck = c->ck };
	ss_frame_check_begin(c->ck);
	int rc = ss_frame_check_update(c->ck, e->buf, (size_t)e->have, x.err);
	if (!rc && (rc = ss_writer_put_frame(w, e->buf, (size_t)e->have, NULL)))
		x.err[0] = 0;
	if (!rc && !(x.rg = ring_start(c, w)))
		rc = SS_ERR_NOMEM;
	if (!rc && !(rc = xfer_start(c, &x, ix->http_timeout)) && !(rc = xfers_run(ix, &x, 1)) && !(rc = x.rc))
		rc = ss_frame_check_end(c->ck, x.err);
	xfers_end(c, &x, 1);
	if (x.rg) {
		int wrc = ring_stop(x.rg, !rc);
		if (wrc && (!rc || x.refused == 4)) {
			rc = wrc;
			x.err[0] = 0;
		}
	}
	if (rc == SS_ERR_NOMEM)
		snprintf(x.err, sizeof x.err, "out of memory");
	if (!rc || !x.err[0]) { /* done, or w failed */
		if (errmsg)
			errmsg[0] = 0;
		return rc;
	}
	return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s%s", hit->id,
		       (unsigned long long)hit->offset, x.err,
		       rc == SS_ERR_CHECKSUM || rc == SS_ERR_FORMAT || (rc == SS_ERR_TRUNCATED && x.rc == 0)
			       ? " (file replaced on the server since the index was built?)" : "");
}

int ixh_copy(ss_index *ix, const ss_index_hit *hit, ss_writer *w, char *errmsg)
{
	/* Streamed only where a failure midway leaves nothing behind. */
	int whole = !ss_writer_discards_on_abort(w);
	ixh_entry *e;
	int rc = entry_of(ix, hit, whole, &e, errmsg);
	const ss_record *rec;
	if (!rc && (e->rc || !e->verified) && !(rc = ixh_read(ix, hit, 1, &rec, errmsg)))
		e = cache_find(ix->http, hit); /* ixh_read may fetch it anew */
	if (rc)
		return rc;
	if (errmsg)
		errmsg[0] = 0;
	if ((rc = ss_writer_put_annotation(w, hit->rank, hit->score)))
		return rc;
	if (e->have < e->length) {
		e->streamed = 1;
		return stream_rest(ix, e, hit, w, errmsg);
	}
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
	ss_frame_check_close(c->ck);
	ring_free(c->rg);
	curl_multi_cleanup(c->multi);
	free(c);
	ix->http = NULL;
}
