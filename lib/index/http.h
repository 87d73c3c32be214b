/*
 * lib/index/http.h — INTERNAL to lib/index: state files served over HTTP(S).
 * A hit whose path is an http:// or https:// URL has its state record
 * fetched by a range request (libcurl): ss_index_read and ss_index_copy
 * come here for it, and ss_index_prefetch fetches the records of a query's
 * hits in parallel first. A fetched frame lies in a memfd; its checksum
 * is verified once (ss_frame_verify: a file replaced on the server is
 * caught), its metadata read and checked against the index row as a local
 * one's is (ix_check_record), and it is copied to the output as a local
 * frame is (sendfile from the memfd); or only its head is fetched first,
 * and the rest streamed into the output (http.c says when).
 * ref: RFC 9110 §14 (range requests, 206, Content-Range), libcurl-multi(3).
 */
#ifndef SS_INDEX_HTTP_H
#define SS_INDEX_HTTP_H

#include <stdint.h>

#include "ss.h"

/* Defaults of ss_index_set_http. */
#define IXH_TIMEOUT_S 30.0
#define IXH_RETRIES 3
/* Frames kept in memory at once (bytes): a query's prefetched hits up to
 * this, the oldest dropped first beyond it (fetched again when needed). */
#define IXH_CACHE_MAX (UINT64_C(2) << 30)

/* The URL side of ss_index_read / ss_index_copy / ss_index_prefetch, for
 * one index (not a union: its caller routes a hit to its shard first);
 * hit->path is a URL (ss_url_is_http). Errors as those functions say:
 * errmsg "document ID at byte offset N: what" (no URL: the caller names
 * it, redacted). */
int ixh_read(ss_index *ix, const ss_index_hit *hit, int meta_only, const ss_record **rec, char *errmsg);
int ixh_copy(ss_index *ix, const ss_index_hit *hit, ss_writer *w, char *errmsg);
int ixh_prefetch(ss_index *ix, const ss_index_hit *hits, int n, int whole, char *errmsg);
/* Frees ix's session and its fetched frames (ss_index_close). */
void ixh_close(ss_index *ix);

#endif /* SS_INDEX_HTTP_H */
