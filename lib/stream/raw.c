/*
 * raw.c — uncompressed ("raw") frames (formats/states.md "raw frames"):
 * read in place, a state's arrays handed over from a map of the file
 * (ss_reader_next_pieces), and written block by block so that the arrays
 * lie aligned (ss_writer_begin_raw, ss_writer_cut). The frame's checksum is
 * XXH64 of its content, computed here as zstd would.
 * ref: RFC 8878 §3.1.1 (frame header, Raw_Block, Content_Checksum).
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/stream_internal.h"

/* The uncompressed frame being read in place (stream_raw_pieces): its segments,
 * and how far its content is hashed. */
typedef struct {
	ss_reader *r;
	size_t n;         /* segments */
	size_t si;        /* the segment hash_to is in */
	uint64_t hashed;  /* content bytes [0, hashed) hashed */
	XXH64_state_t xh; /* the content's XXH64, whose low 32 bits end the frame */
	void *map;        /* the file mapped from a page boundary, mlen bytes */
	size_t mlen;
	const unsigned char *base, *lim; /* the frame's start in map, map's end */
	const unsigned char *ck;         /* the frame's checksum, after its last block */
} rawf_t;

/* Hashes the content on to byte `end`. */
static void hash_to(rawf_t *f, uint64_t end)
{
	while (f->hashed < end && f->si < f->n) {
		const struct raw_seg *g = &f->r->seg[f->si];
		uint64_t stop = g->at + g->len < end ? g->at + g->len : end;
		XXH64_update(&f->xh, g->p + (f->hashed - g->at), (size_t)(stop - f->hashed));
		f->hashed = stop;
		if (stop == g->at + g->len)
			f->si++;
	}
}

/* Copies content bytes [at, at + n) to dst; 0, or -1 past the content. */
static int gather(const rawf_t *f, uint64_t at, size_t n, unsigned char *dst)
{
	for (size_t i = 0; i < f->n && n; i++) {
		const struct raw_seg *g = &f->r->seg[i];
		if (at >= g->at + g->len)
			continue;
		size_t take = g->at + g->len - at < n ? (size_t)(g->at + g->len - at) : n;
		memcpy(dst, g->p + (at - g->at), take);
		dst += take, at += take, n -= take;
	}
	return n ? -1 : 0;
}

/* Hands content bytes [a0, a0 + len) (array which's body) to fn straight
 * from the map, hashing each piece just before: pieces of whole 16-byte
 * units, but where a block ends inside one (not as writers cut them) its
 * bytes go through a 16-byte buffer. */
static int raw_array(rawf_t *f, const ss_record *rec, int which, uint64_t a0, uint64_t len, ss_piece_fn fn, void *arg)
{
	unsigned char carry[16];
	size_t nc = 0;
	uint64_t done = 0;
	for (size_t i = 0; i < f->n && done < len; i++) {
		const struct raw_seg *g = &f->r->seg[i];
		uint64_t at = a0 + done + nc; /* the next byte not yet taken */
		if (at >= g->at + g->len)
			continue;
		const unsigned char *p = g->p + (at - g->at);
		uint64_t avail = g->at + g->len - at, left = len - done - nc;
		size_t n = avail < left ? (size_t)avail : (size_t)left;
		hash_to(f, at + n);
		int rc;
		while (n) {
			if (nc || n < 16) {
				size_t take = 16 - nc < n ? 16 - nc : n;
				memcpy(carry + nc, p, take);
				nc += take, p += take, n -= take;
				if (nc == 16 || done + nc == len) {
					if ((rc = fn(arg, rec, which, done, carry, nc)) != 0)
						return rc;
					done += nc;
					nc = 0;
				}
				continue;
			}
			size_t take = done + n == len ? n : n & ~(size_t)15;
			if ((rc = fn(arg, rec, which, done, p, take)) != 0)
				return rc;
			done += take, p += take, n -= take;
		}
	}
	return 0;
}

/* Not a frame for the in-place path (compressed blocks, laid out otherwise,
 * cut short, anything but what writers make): nothing is read, and zstd
 * reads it as any other frame, with its errors. */
#define NOT_RAW 3

/* Maps the uncompressed frame at r->pos (header of hsz bytes, content
 * bytes) into f: 0, or NOT_RAW (its first block is not raw, the file ends
 * in its first block header, no map). */
static int map_frame(rawf_t *f, size_t hsz, uint64_t content)
{
	ss_reader *r = f->r;
	long long got = stream_in_fill(r, r->pos + hsz, 3, r->pos);
	if (got < 3 || ((r->buf[r->pos + hsz - r->base] >> 1) & 3) != 0)
		return NOT_RAW;
	struct stat st;
	if (fstat(fileno(r->f), &st) != 0 || (uint64_t)st.st_size < r->pos + hsz + 3)
		return NOT_RAW;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), m0 = r->pos / page * page;
	uint64_t end = r->pos + hsz + frame_bound(content);
	if (end > (uint64_t)st.st_size)
		end = (uint64_t)st.st_size;
	f->mlen = (size_t)(end - m0);
	f->map = mmap(NULL, f->mlen, PROT_READ, MAP_SHARED | MAP_POPULATE, fileno(r->f), (off_t)m0);
	if (f->map == MAP_FAILED)
		return NOT_RAW;
	f->base = (const unsigned char *)f->map + (r->pos - m0);
	f->lim = (const unsigned char *)f->map + f->mlen;
	return 0;
}

/* Lists the frame's blocks as segments of r->seg: raw, within the content
 * and the file, adding up to the content, the checksum after them (f->ck).
 * 0, NOT_RAW, or SS_ERR_NOMEM. */
static int list_blocks(rawf_t *f, size_t hsz, uint64_t content)
{
	ss_reader *r = f->r;
	const unsigned char *b = f->base + hsz, *lim = f->lim;
	uint64_t made = 0;
	for (;;) {
		if (lim - b < 3)
			return NOT_RAW;
		uint32_t bh = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
		size_t bsize = bh >> 3;
		if (((bh >> 1) & 3) != 0 || bsize > RAW_BLOCK || (size_t)(lim - b - 3) < bsize || bsize > content - made)
			return NOT_RAW;
		if (f->n == r->seg_cap) {
			size_t cap = r->seg_cap ? 2 * r->seg_cap : 256;
			struct raw_seg *sg = realloc(r->seg, cap * sizeof *sg);
			if (!sg)
				return stream_rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
			r->seg = sg;
			r->seg_cap = cap;
		}
		if (bsize)
			r->seg[f->n++] = (struct raw_seg){made, b + 3, bsize};
		made += bsize;
		b += 3 + bsize;
		if (bh & 1)
			break;
	}
	if (made != content || lim - b < 4)
		return NOT_RAW;
	f->ck = b;
	return 0;
}

/* Finds the record's layout: its metadata, copied out to r->out until the
 * entries before "conv"/"ssm" are whole (a few KiB; q8 scales, MBs at the
 * 2.7b shape), into q; then "conv" and "ssm", bins, the last two entries:
 * their bodies at content bytes body[i], len[i] bytes each. 0, NOT_RAW,
 * or SS_ERR_NOMEM. */
static int find_arrays(rawf_t *f, size_t hsz, uint64_t content, prefix_t *q, uint64_t body[2], uint64_t len[2])
{
	ss_reader *r = f->r;
	memset(q, 0, sizeof *q);
	q->hsz = hsz, q->checksum = 1, q->content = content, q->off = r->pos;
	size_t copied = 0;
	for (size_t i = 0; i < f->n; i++) {
		if (stream_grow(&r->out, &r->out_cap, copied + r->seg[i].len) != 0)
			return stream_rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
		memcpy(r->out + copied, r->seg[i].p, r->seg[i].len);
		copied += r->seg[i].len;
		if ((q->cut = stream_meta_prefix(r->out, copied, &q->n_before, &q->hdr, &q->whole, &q->n_entries)) >= 0)
			break;
	}
	if (q->cut < 0 || q->whole || q->n_entries - q->n_before != 2)
		return NOT_RAW;
	unsigned char h[10];
	size_t hl[2];
	uint64_t at = (uint64_t)q->cut;
	for (int which = 0; which < 2; which++) {
		size_t kl = stream_piece_key_len[which], n = content - at < 10 ? (size_t)(content - at) : 10;
		if (gather(f, at, n, h) || n < kl + 2 || memcmp(h, stream_piece_key[which], kl) ||
		    stream_bin_header(h + kl, n - kl, &hl[which], &len[which]) || len[which] > content - at - kl - hl[which])
			return NOT_RAW;
		body[which] = at + kl + hl[which];
		at = body[which] + len[which];
	}
	return at == content ? 0 : NOT_RAW;
}

/* Hands the record over: its metadata (q) to fn, then conv and ssm where
 * they lie, hashing the content as it goes, and checks the checksum.
 * 1 with *recp set, or a negative error. */
static int hand_over(rawf_t *f, const prefix_t *q, const uint64_t body[2], const uint64_t len[2],
		     const ss_record **recp, ss_piece_fn fn, void *arg)
{
	ss_reader *r = f->r;
	int rc = stream_unpack_prefix(r, q);
	if (rc < 0)
		return rc;
	ss_record *rec = &r->rec;
	take_annotation(r, rec);
	rec->in_place = 0;
	XXH64_reset(&f->xh, 0);
	if ((rc = fn(arg, rec, -1, 0, NULL, 0)) != 0)
		return stream_rerr(r, rc, q->off, "stopped by the caller");
	for (int which = 0; which < 2; which++) {
		hash_to(f, body[which]);
		if ((rc = raw_array(f, rec, which, body[which], len[which], fn, arg)) != 0)
			return stream_rerr(r, rc, q->off, "stopped by the caller");
	}
	hash_to(f, q->content);
	const unsigned char *b = f->ck;
	uint32_t want = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	if ((uint32_t)XXH64_digest(&f->xh) != want)
		return stream_rerr(r, SS_ERR_CHECKSUM, q->off, "corrupt zstd frame: %s",
				   ZSTD_getErrorName((size_t)-ZSTD_error_checksum_wrong));
	rec->length = (uint64_t)(b + 4 - f->base);
	rec->content = q->content;
	r->pos += rec->length;
	r->index++, r->n_read++;
	*recp = rec;
	return 1;
}

/* A file cut short while a frame of it is mapped: reading a page past its
 * new end raises SIGBUS, which would end the process with no word of the
 * file. While this thread reads its map (from the mapping to the unmapping,
 * the caller's fn included), a fault inside the map jumps back to
 * stream_raw_pieces, which reports the record as cut short; any other
 * SIGBUS goes to the handler there was before (the default: the process
 * ends as it would have). The handler is (re)installed before each frame
 * read in place when another has taken SIGBUS since. */
typedef struct {
	sigjmp_buf jb;
	const unsigned char *lo, *hi; /* the map */
} bus_guard;

static _Thread_local bus_guard *volatile bus_armed;
static _Thread_local volatile int bus_forwarding; /* in the handler before ours */
static struct sigaction bus_before;
static pthread_mutex_t bus_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	bus_guard *g = bus_armed;
	const unsigned char *a = si->si_addr;
	if (g && si->si_code > 0 && a >= g->lo && a < g->hi) /* > 0: the kernel's, a fault */
		siglongjmp(g->jb, 1);
	if (bus_forwarding) { /* that handler handed it back to us: the default ends it */
		signal(SIGBUS, SIG_DFL);
		return;
	}
	bus_forwarding = 1;
	if (bus_before.sa_flags & SA_SIGINFO)
		bus_before.sa_sigaction(sig, si, uc);
	else if (bus_before.sa_handler != SIG_DFL && bus_before.sa_handler != SIG_IGN)
		bus_before.sa_handler(sig);
	else { /* the default again: a fault recurs on return, a sent signal is sent again */
		sigaction(SIGBUS, &bus_before, NULL);
		if (si->si_code <= 0)
			raise(sig);
	}
	bus_forwarding = 0;
}

static void bus_install(void)
{
	struct sigaction cur, sa;
	pthread_mutex_lock(&bus_mu);
	if (sigaction(SIGBUS, NULL, &cur) == 0 && !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)) {
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO;
		sigemptyset(&sa.sa_mask);
		bus_before = cur;
		sigaction(SIGBUS, &sa, NULL);
	}
	pthread_mutex_unlock(&bus_mu);
}

/* The frame mapped in f, read: its blocks listed, its arrays found and
 * handed over. Not inlined into stream_raw_pieces, which calls sigsetjmp
 * (the compiler keeps such a function's locals out of registers): with
 * the reading loops inlined there and the signal mask saved a record, 10
 * f32 states of the 130m shape composed on 2 threads took 34-35 -> 37-39
 * ms (bench/compose); as here, 35-36. */
static __attribute__((noinline)) int raw_read(rawf_t *f, size_t hsz, uint64_t content, const ss_record **recp,
					      ss_piece_fn fn, void *arg)
{
	prefix_t q;
	uint64_t body[2], len[2];
	int rc;
	if ((rc = list_blocks(f, hsz, content)) == 0 && (rc = find_arrays(f, hsz, content, &q, body, len)) == 0)
		rc = hand_over(f, &q, body, len, recp, fn, arg);
	return rc;
}

/* ss_reader_next_pieces of an uncompressed frame (raw blocks only:
 * formats/states.md "raw frames") in a regular file: the frame is mapped,
 * its metadata copied out, conv and ssm handed to fn where they lie, and
 * the frame's checksum computed over the content as it goes (XXH64, as
 * zstd's). Returns 1 as ss_reader_next_pieces, a negative error, or
 * NOT_RAW (3) when the frame is not for this path. */
int stream_raw_pieces(ss_reader *r, const ss_record **recp, ss_piece_fn fn, void *arg)
{
	size_t hsz;
	uint64_t content;
	int checksum, rc;
	while ((rc = stream_frame_header(r, &hsz, &content, &checksum)) == 2)
		;
	if (rc <= 0 || !checksum)
		return rc <= 0 ? rc : NOT_RAW;
	rawf_t f;
	memset(&f, 0, sizeof f);
	f.r = r;
	if (map_frame(&f, hsz, content) != 0)
		return NOT_RAW;
	bus_install();
	bus_guard g = {.lo = f.map, .hi = (const unsigned char *)f.map + f.mlen};
	bus_guard *before = bus_armed;
	/* the signal mask is not saved (a system call a record): the jump
	 * leaves SIGBUS blocked, as in its handler, and unblocks it here */
	if (sigsetjmp(g.jb, 0)) {
		sigset_t bus;
		sigemptyset(&bus);
		sigaddset(&bus, SIGBUS);
		pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
		bus_armed = before;
		munmap(f.map, f.mlen);
		struct stat st;
		long long size = fstat(fileno(r->f), &st) == 0 ? (long long)st.st_size : -1;
		return stream_rerr(r, SS_ERR_TRUNCATED, r->pos,
				   "the file was cut short while being read (now %lld bytes)", size);
	}
	bus_armed = &g;
	rc = raw_read(&f, hsz, content, recp, fn, arg);
	bus_armed = before;
	munmap(f.map, f.mlen);
	return rc;
}

int ss_writer_begin_raw(ss_writer *w, uint64_t len, uint64_t *offset)
{
	if (offset)
		*offset = w->off;
	if (!w->blk && !(w->blk = malloc(RAW_BLOCK)))
		return SS_ERR_NOMEM;
	/* Frame_Header_Descriptor 0xC4: an 8-byte Frame_Content_Size, a
	 * Window_Descriptor (not single segment: a decoder's window stays
	 * 128 KiB whatever the record's size), Content_Checksum_flag. */
	unsigned char h[14] = {0x28, 0xB5, 0x2F, 0xFD, 0xC4, RAW_WINDOW_DESC};
	for (int i = 0; i < 8; i++)
		h[6 + i] = (unsigned char)(len >> (8 * i));
	w->capture = 0;
	w->raw = 1;
	w->fill = 0;
	w->raw_left = len;
	w->raw_start = w->off;
	XXH64_reset(&w->xh, 0);
	return stream_write(w, h, sizeof h);
}

/* Writes the block w->blk[0..n) as a raw block (last: the frame's last). */
static int raw_block(ss_writer *w, const unsigned char *p, size_t n, int last)
{
	uint32_t bh = (uint32_t)n << 3 | (unsigned)last; /* Block_Type 0: Raw_Block */
	unsigned char h[3] = {(unsigned char)bh, (unsigned char)(bh >> 8), (unsigned char)(bh >> 16)};
	int rc = stream_write(w, h, 3);
	return rc ? rc : stream_write(w, p, n);
}

void ss_writer_cut(ss_writer *w)
{
	if (!w->raw || !w->fill)
		return;
	/* The pending bytes go out as k + 1 blocks, k of one byte each, where
	 * k (< 4) puts the next block's payload at an offset from the frame's
	 * start that 4 divides: each block header is 3 bytes, and 3·3 = 1
	 * (mod 4). Relative to the frame, so that a record's bytes do not
	 * depend on where it is written. */
	uint64_t at = w->off - w->raw_start + 3 + w->fill + 3;
	size_t k = (size_t)((4 - at % 4) % 4 * 3 % 4);
	if (k + 1 > w->fill)
		k = 0;
	for (size_t i = 0; i < k; i++)
		raw_block(w, w->blk + i, 1, 0);
	raw_block(w, w->blk + k, w->fill - k, 0);
	w->fill = 0;
}

/* Appends len bytes at buf to the raw frame being written. */
int stream_raw_add(ss_writer *w, const unsigned char *buf, size_t len)
{
	if (len > w->raw_left)
		return SS_ERR_INVALID;
	w->raw_left -= len;
	XXH64_update(&w->xh, buf, len);
	int rc = 0;
	while (len && !rc) {
		if (w->fill == RAW_BLOCK) { /* full, and more comes: not the last */
			rc = raw_block(w, w->blk, w->fill, 0);
			w->fill = 0;
			/* Empty blocks (a header each, up to 3) put the next
			 * payload at an offset 4 divides, as the one before:
			 * an array's f32 stay aligned across its blocks. */
			while (!rc && (w->off - w->raw_start + 3) % 4)
				rc = raw_block(w, w->blk, 0, 0);
		}
		size_t take = RAW_BLOCK - w->fill < len ? RAW_BLOCK - w->fill : len;
		memcpy(w->blk + w->fill, buf, take);
		w->fill += take, buf += take, len -= take;
	}
	return rc;
}

int stream_raw_end(ss_writer *w)
{
	w->raw = 0;
	if (w->raw_left)
		return SS_ERR_INVALID;
	uint32_t x = (uint32_t)XXH64_digest(&w->xh);
	unsigned char c[4] = {(unsigned char)x, (unsigned char)(x >> 8), (unsigned char)(x >> 16),
			      (unsigned char)(x >> 24)};
	/* empty blocks make the frame's length a multiple of 4: the next raw
	 * frame starts aligned as this one did */
	int rc = 0;
	while (!rc && (w->off - w->raw_start + 3 + w->fill + 4) % 4)
		rc = raw_block(w, w->blk, 0, 0);
	if (!rc)
		rc = raw_block(w, w->blk, w->fill, 1);
	return rc ? rc : stream_write(w, c, 4);
}
