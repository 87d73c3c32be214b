/*
 * xxh64.c — XXH64 (seed 0), the checksum of zstd frames: a frame's last 4
 * bytes are the low 32 bits of XXH64 of its content, little-endian. The
 * reader of uncompressed (raw-block) state frames verifies it itself while
 * it hands the arrays over in place (ss_reader_next_pieces), and the writer
 * of such frames computes it (stream.c); zstd's own copy is not exported by
 * libzstd.so and libxxhash-dev is one more build dependency for 80 lines.
 * ref: xxHash's doc/xxhash_spec.md §"XXH64 Algorithm Description" (v0.1.1);
 * checked against zstd's frame checksum (tests/test_stream.c).
 */
#include <string.h>

#include "stream/internal.h"

#define P1 UINT64_C(0x9E3779B185EBCA87)
#define P2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define P3 UINT64_C(0x165667B19E3779F9)
#define P4 UINT64_C(0x85EBCA77C2B2AE63)
#define P5 UINT64_C(0x27D4EB2F165667C5)

static inline uint64_t rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }

/* Little-endian loads at any alignment (the hosts libss builds on are
 * little-endian: formats/states.md stores arrays as they lie). */
static inline uint64_t ld64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t ld32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static inline uint64_t round64(uint64_t acc, uint64_t in)
{
	acc += in * P2;
	return rotl(acc, 31) * P1;
}

static inline uint64_t merge64(uint64_t acc, uint64_t v)
{
	acc ^= round64(0, v);
	return acc * P1 + P4;
}

void ss_xxh64_init(ss_xxh64 *h)
{
	memset(h, 0, sizeof *h);
	h->v[0] = P1 + P2;
	h->v[1] = P2;
	h->v[2] = 0;
	h->v[3] = (uint64_t)0 - P1;
}

/* The stripes of 32 bytes at p[0..n), n a multiple of 32. */
static void stripes(ss_xxh64 *h, const unsigned char *p, size_t n)
{
	uint64_t v0 = h->v[0], v1 = h->v[1], v2 = h->v[2], v3 = h->v[3];
	for (size_t i = 0; i < n; i += 32) {
		v0 = round64(v0, ld64(p + i));
		v1 = round64(v1, ld64(p + i + 8));
		v2 = round64(v2, ld64(p + i + 16));
		v3 = round64(v3, ld64(p + i + 24));
	}
	h->v[0] = v0, h->v[1] = v1, h->v[2] = v2, h->v[3] = v3;
}

void ss_xxh64_update(ss_xxh64 *h, const void *data, size_t n)
{
	const unsigned char *p = data;
	h->total += n;
	if (h->fill) {
		size_t take = 32 - h->fill < n ? 32 - h->fill : n;
		memcpy(h->mem + h->fill, p, take);
		h->fill += take, p += take, n -= take;
		if (h->fill < 32)
			return;
		stripes(h, h->mem, 32);
		h->fill = 0;
	}
	size_t whole = n & ~(size_t)31;
	stripes(h, p, whole);
	memcpy(h->mem, p + whole, n - whole);
	h->fill = n - whole;
}

uint64_t ss_xxh64_digest(const ss_xxh64 *h)
{
	uint64_t x;
	if (h->total >= 32) {
		x = rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) + rotl(h->v[3], 18);
		for (int i = 0; i < 4; i++)
			x = merge64(x, h->v[i]);
	} else {
		x = P5;
	}
	x += h->total;
	const unsigned char *p = h->mem;
	size_t n = h->fill;
	for (; n >= 8; p += 8, n -= 8)
		x = rotl(x ^ round64(0, ld64(p)), 27) * P1 + P4;
	if (n >= 4) {
		x = rotl(x ^ (uint64_t)ld32(p) * P1, 23) * P2 + P3;
		p += 4, n -= 4;
	}
	for (; n; p++, n--)
		x = rotl(x ^ *p * P5, 11) * P1;
	x ^= x >> 33;
	x *= P2;
	x ^= x >> 29;
	x *= P3;
	x ^= x >> 32;
	return x;
}
