/* test_stream.c — the stream layer: records round-trip, offsets address
 * records, cat concatenates, pipes work, and every kind of bad input is
 * refused with the record number and byte offset. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <malloc.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <msgpack.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_frameHeaderSize: exported by libzstd.so */
#include <zstd.h>
#include <cJSON.h>
#include <cmocka.h>
#if defined(__SANITIZE_ADDRESS__)
/* ASan's allocator statistics (in libasan; gcc ships no header for it). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include "ss.h"
#include "stream/internal.h"
#include "util/tmpdir.h"

static char tmpdir[256];

static const char *tpath(const char *name)
{
	static char buf[4][512];
	static int i;
	i = (i + 1) % 4;
	snprintf(buf[i], sizeof buf[i], "%s/%s", tmpdir, name);
	return buf[i];
}

static ss_state_dims tiny = { "mamba2", 2, 3, 4, 5, 6, 4 };

static void fill_state(ss_state *s, const char *id, float seed, ss_dtype dt)
{
	assert_int_equal(ss_state_alloc(s, &tiny), 0);
	s->id = strdup(id);
	snprintf(s->fingerprint, sizeof s->fingerprint, "00ff00ff00ff00ff");
	s->n_tokens = 42;
	s->dtype = dt;
	for (size_t i = 0; i < ss_state_ssm_len(&tiny); i++)
		s->ssm[i] = seed + 0.001f * (float)i - 0.3f;
	for (size_t i = 0; i < ss_state_conv_len(&tiny); i++)
		s->conv[i] = -seed + 0.01f * (float)i;
	for (size_t i = 0; i < ss_state_logdecay_len(&tiny); i++)
		s->logdecay[i] = -0.5f * (float)i - seed;
}

static void write_states(const char *path, int n, ss_dtype dt, uint64_t *offs)
{
	ss_writer *w;
	char err[SS_ERRMSG_MAX];
	assert_int_equal(ss_writer_open(&w, path, 0, err), 0);
	for (int i = 0; i < n; i++) {
		ss_state s;
		char id[32];
		snprintf(id, sizeof id, "doc%d", i);
		fill_state(&s, id, (float)i, dt);
		assert_int_equal(ss_writer_put_state(w, &s, offs ? &offs[i] : NULL), 0);
		ss_state_free(&s);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
}

static long fsize(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static void test_dtype_conversions(void **ctx)
{
	(void)ctx;
	/* f16: exact values, rounding to nearest even, overflow, subnormals. */
	assert_int_equal(ss_f32_to_f16(1.0f), 0x3c00);
	assert_int_equal(ss_f32_to_f16(-2.0f), 0xc000);
	assert_int_equal(ss_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(ss_f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(ss_f32_to_f16(0x1p-24f), 0x0001);
	assert_int_equal(ss_f32_to_f16(0x1p-25f), 0x0000);            /* tie → even (0) */
	assert_int_equal(ss_f32_to_f16(0x1.8p-24f), 0x0002);          /* tie → even (2) */
	assert_int_equal(ss_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie → even */
	assert_int_equal(ss_f32_to_f16(1.0f + 0x1.8p-11f), 0x3c01);
	assert_true(ss_f16_to_f32(0x7e00) != ss_f16_to_f32(0x7e00));  /* NaN */
	assert_true(ss_f16_to_f32(0x0001) == 0x1p-24f);
	/* Every f16 bit pattern that is not NaN survives f16→f32→f16. */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue;
		assert_int_equal(ss_f32_to_f16(ss_f16_to_f32((uint16_t)h)), h);
	}
	/* bf16 */
	assert_int_equal(ss_f32_to_bf16(1.0f), 0x3f80);
	assert_int_equal(ss_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie → even */
	assert_int_equal(ss_f32_to_bf16(1.0f + 0x1.8p-7f), 0x3f82);     /* tie → even */
	assert_int_equal(ss_f32_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);
	assert_true(ss_bf16_to_f32(0x3f81) == 1.0f + 0x1p-7f);
	ss_dtype t;
	assert_int_equal(ss_dtype_parse("bf16", &t), 0);
	assert_int_equal(t, SS_DTYPE_BF16);
	assert_int_equal(ss_dtype_parse("f64", &t), SS_ERR_INVALID);
}

/* Bulk conversions (F16C where the CPU has it) equal the scalar ones. */
static void test_dtype_bulk(void **ctx)
{
	(void)ctx;
	enum { N = 0x10000 + 5 };
	uint16_t *h = malloc(N * 2), *back = malloc(N * 2);
	float *f = malloc(N * 4);
	for (uint32_t i = 0; i < N; i++)
		h[i] = (uint16_t)(i * 40503u); /* every pattern, scrambled, and a tail of 5 */
	ss_to_f32(f, h, SS_DTYPE_F16, N);
	for (uint32_t i = 0; i < N; i++) {
		float want = ss_f16_to_f32(h[i]);
		if (isnan(want))
			assert_true(isnan(f[i]));
		else
			assert_memory_equal(&f[i], &want, 4);
	}
	/* f32 → f16: values around every rounding boundary, subnormals, overflow */
	for (uint32_t i = 0; i < N; i++) {
		uint32_t u = (uint32_t)h[i] << 13 ^ (i * 2654435761u & 0x1fffu); /* the dropped bits vary */
		u = ((u & 0x0fffffffu) + (0x38000000u & -(uint32_t)(i & 1))) ^ (i & 2 ? 0x80000000u : 0);
		memcpy(&f[i], &u, 4);
		if (isnan(f[i]))
			f[i] = 1.0f;
	}
	ss_from_f32(back, SS_DTYPE_F16, f, N);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(back[i], ss_f32_to_f16(f[i]));
	free(h);
	free(back);
	free(f);
}

/* ss_reader_next_pieces: the pieces of a state record are its arrays,
 * aligned; other layouts come back whole (2); damage is an error. */
typedef struct {
	unsigned char *a[2];
	size_t n[2], pieces;
	int meta, misaligned, unaligned4, odd; /* odd: pieces not of whole 16-byte units */
} pieces_t;

static int collect(void *arg, const ss_record *meta, int which, uint64_t off, const void *p, size_t len)
{
	pieces_t *c = arg;
	(void)meta;
	if (which < 0) {
		c->meta++;
		return 0;
	}
	if (off != c->n[which] || ((uintptr_t)p % 16 && off))
		c->misaligned++;
	c->unaligned4 += (uintptr_t)p % 4 != 0;
	c->odd += len % 16 != 0;
	c->a[which] = realloc(c->a[which], c->n[which] + len);
	memcpy(c->a[which] + c->n[which], p, len);
	c->n[which] += len;
	c->pieces++;
	return 0;
}

static void test_next_pieces(void **ctx)
{
	(void)ctx;
	const char *p = tpath("pieces.ss");
	/* ssm 2·6·64·80 floats = 240 KiB in f32: several pieces, split inside heads */
	ss_state_dims d = {"mamba2", 2, 6, 64, 80, 99, 4};
	char err[SS_ERRMSG_MAX];
	static const ss_dtype dts[3] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16};
	ss_writer *w;
	ss_state s;
	assert_int_equal(ss_writer_open(&w, p, 1, err), 0);
	ss_writer_set_shuffle(w, 0); /* the pieces are compared with the view's bytes */
	assert_int_equal(ss_state_alloc(&s, &d), 0);
	strcpy(s.fingerprint, "fp");
	s.id = "x";
	for (size_t i = 0; i < ss_state_ssm_len(&d); i++)
		s.ssm[i] = (float)((i * 7919) % 1000) / 999.0f - 0.5f;
	for (size_t i = 0; i < ss_state_conv_len(&d); i++)
		s.conv[i] = (float)i;
	for (size_t i = 0; i < ss_state_logdecay_len(&d); i++)
		s.logdecay[i] = -(float)i;
	for (int t = 0; t < 3; t++) {
		s.dtype = dts[t];
		assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	}
	/* a record with "ssm" before "conv": valid, but not laid out for pieces */
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 14);
#define KEY(k) msgpack_pack_str(&pk, strlen(k)), msgpack_pack_str_body(&pk, k, strlen(k))
#define STR(v) msgpack_pack_str(&pk, strlen(v)), msgpack_pack_str_body(&pk, v, strlen(v))
	KEY("format"), STR("ss-states"), KEY("version"), msgpack_pack_unsigned_int(&pk, 1);
	KEY("id"), STR("swapped"), KEY("fingerprint"), STR("fp"), KEY("arch"), STR("mamba2");
	KEY("n_layer"), msgpack_pack_int(&pk, d.n_layer), KEY("nheads"), msgpack_pack_int(&pk, d.nheads);
	KEY("headdim"), msgpack_pack_int(&pk, d.headdim), KEY("d_state"), msgpack_pack_int(&pk, d.d_state);
	KEY("conv_dim"), msgpack_pack_int(&pk, d.conv_dim), KEY("d_conv"), msgpack_pack_int(&pk, d.d_conv);
	KEY("dtype"), STR("f32"), KEY("logdecay");
	msgpack_pack_bin(&pk, ss_state_logdecay_len(&d) * 4);
	msgpack_pack_bin_body(&pk, s.logdecay, ss_state_logdecay_len(&d) * 4);
	KEY("ssm");
	msgpack_pack_bin(&pk, ss_state_ssm_len(&d) * 4);
	msgpack_pack_bin_body(&pk, s.ssm, ss_state_ssm_len(&d) * 4);
#undef KEY
#undef STR
	assert_int_equal(ss_writer_put(w, sb.data, sb.size, NULL), 0);
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(ss_writer_close(w, err), 0);

	ss_reader *r, *rw;
	const ss_record *rec, *whole;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_open(&rw, p, 0, err), 0);
	for (int t = 0; t < 3; t++) {
		pieces_t c = {0};
		assert_int_equal(ss_reader_next_pieces(r, &rec, collect, &c), 1);
		assert_int_equal(ss_reader_next(rw, &whole), 1);
		assert_int_equal(c.meta, 1);
		assert_int_equal(c.misaligned, 0);
		assert_true(c.pieces >= (t ? 2u : 3u)); /* conv, then ssm in more than one */
		assert_int_equal(ss_record_offset(rec), ss_record_offset(whole));
		assert_int_equal(ss_record_length(rec), ss_record_length(whole));
		ss_state m;
		const void *cv, *sm;
		assert_int_equal(ss_record_state_view(whole, &m, &cv, &sm, err), 0);
		size_t es = ss_dtype_size(m.dtype);
		assert_int_equal(c.n[0], ss_state_conv_len(&d) * es);
		assert_int_equal(c.n[1], ss_state_ssm_len(&d) * es);
		assert_memory_equal(c.a[0], cv, c.n[0]);
		assert_memory_equal(c.a[1], sm, c.n[1]);
		ss_state_free(&m);
		assert_int_equal(ss_record_state_meta(rec, &m, err), 0); /* the meta record */
		assert_int_equal(m.dtype, dts[t]);
		ss_state_free(&m);
		free(c.a[0]);
		free(c.a[1]);
	}
	pieces_t c = {0};
	assert_int_equal(ss_reader_next_pieces(r, &rec, collect, &c), 2);
	assert_int_equal(c.meta + c.pieces, 0);
	assert_non_null(ss_map_get(rec->root, "ssm")); /* the whole record */
	assert_int_equal(ss_reader_next_pieces(r, &rec, collect, &c), 0);
	ss_reader_close(r);
	ss_reader_close(rw);

	/* damage: a file cut inside the first array, and a flipped byte in the
	 * compressed arrays, are errors naming the record */
	FILE *f = fopen(p, "rb");
	unsigned char *all = malloc(1 << 22);
	size_t len = fread(all, 1, 1 << 22, f);
	fclose(f);
	const char *q = tpath("pieces-cut.ss");
	for (int damage = 0; damage < 2; damage++) {
		f = fopen(q, "wb");
		if (damage)
			all[len / 8] ^= 0x55;
		fwrite(all, 1, damage ? len : len / 16, f);
		fclose(f);
		assert_int_equal(ss_reader_open(&r, q, 0, err), 0);
		int rc = ss_reader_next_pieces(r, &rec, collect, &c);
		assert_true(rc < 0);
		assert_non_null(strstr(ss_reader_error(r), "record 0"));
		ss_reader_close(r);
	}
	free(all);
	free(c.a[0]);
	free(c.a[1]);
	s.id = NULL;
	ss_state_free(&s);
}

static void write_bytes(const char *p, const void *b, size_t n);

/* Uncompressed frames (formats/states.md "raw frames"): a state zstd saves
 * little on is written raw (and one it saves much on compressed; at
 * min_saving 0 every one); both read back alike through zstd and through
 * next_pieces, whose pieces (read from the file into the reader's buffer)
 * are 16-byte aligned, whole 16-byte units but each array's last.
 * A byte changed in an array is a checksum error, and a file cut inside
 * one a truncation, each naming the record's byte offset. */
static void test_raw_frames(void **ctx)
{
	(void)ctx;
	const char *p = tpath("raw.ss");
	/* ssm 2·6·64·80 f32 = 240 KiB: arrays across several raw blocks */
	ss_state_dims d = {"mamba2", 2, 6, 64, 80, 99, 4};
	char err[SS_ERRMSG_MAX];
	ss_state s;
	assert_int_equal(ss_state_alloc(&s, &d), 0);
	strcpy(s.fingerprint, "fp");
	s.id = "x";
	uint64_t x = 3;
	static const ss_dtype dts[5] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16, SS_DTYPE_Q8, SS_DTYPE_F32};
	uint64_t offs[6];
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 1, err), 0);
	for (int t = 0; t < 6; t++) {
		/* random mantissas: zstd saves < 20% (raw); record 5 all zero (compressed) */
		for (size_t i = 0; i < ss_state_ssm_len(&d); i++)
			s.ssm[i] = t == 5 ? 0 : (float)(ss_splitmix64(&x) >> 40) / 16777216.0f - 0.5f;
		for (size_t i = 0; i < ss_state_conv_len(&d); i++)
			s.conv[i] = t == 5 ? 0 : (float)(ss_splitmix64(&x) >> 40) / 16777216.0f;
		for (size_t i = 0; i < ss_state_logdecay_len(&d); i++)
			s.logdecay[i] = -(float)i;
		s.dtype = t < 5 ? dts[t] : SS_DTYPE_F32;
		/* 0, 5: by the saving; 1-3 raw whatever it is (the exponents
		 * of random values compress); 4 compressed, as before */
		ss_writer_set_min_saving(w, t == 4 ? 0 : t >= 1 && t <= 3 ? 2 : SS_MIN_SAVING_DEFAULT);
		assert_int_equal(ss_writer_put_state(w, &s, &offs[t]), 0);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
	long n = fsize(p);
	unsigned char *all = malloc((size_t)n);
	FILE *f = fopen(p, "rb");
	assert_int_equal(fread(all, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	for (int t = 0; t < 6; t++) {
		/* the first block's type */
		size_t hsz = ZSTD_frameHeaderSize(all + offs[t], 18);
		assert_false(ZSTD_isError(hsz));
		int type = (all[offs[t] + hsz] >> 1) & 3;
		if ((type == 0) != (t < 4))
			fail_msg("record %d: first block of type %d", t, type);
	}
	ss_reader *r, *rw;
	const ss_record *rec, *whole;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_open(&rw, p, 0, err), 0);
	for (int t = 0; t < 6; t++) {
		pieces_t c = {0};
		assert_int_equal(ss_reader_next_pieces(r, &rec, collect, &c), 1);
		assert_int_equal(ss_record_offset(rec), offs[t]);
		assert_int_equal(ss_record_length(rec), (t < 5 ? offs[t + 1] : (uint64_t)n) - offs[t]);
		assert_int_equal(ss_reader_next(rw, &whole), 1);
		ss_state m;
		const void *cv, *sm;
		assert_int_equal(ss_record_state_view(whole, &m, &cv, &sm, err), 0);
		assert_int_equal(m.shuffle, 0); /* raw frames are never shuffled */
		size_t es = ss_dtype_size(m.dtype);
		assert_int_equal(c.meta, 1);
		assert_int_equal(c.n[0], ss_state_conv_len(&d) * es);
		assert_int_equal(c.n[1], ss_state_ssm_len(&d) * es);
		assert_memory_equal(c.a[0], cv, c.n[0]);
		assert_memory_equal(c.a[1], sm, c.n[1]);
		assert_int_equal(c.unaligned4, 0);
		assert_int_equal(c.misaligned, 0); /* in order, 16-byte aligned */
		assert_true(c.odd <= 2); /* each array's last piece only */
		ss_state_free(&m);
		free(c.a[0]);
		free(c.a[1]);
	}
	assert_int_equal(ss_reader_next_pieces(r, &rec, collect, &(pieces_t){0}), 0);
	ss_reader_close(r);
	ss_reader_close(rw);

	/* damage in record 1's ssm (f16, raw): a byte changed, then the file cut */
	uint64_t at = offs[2] - 4 - 1000;
	char want[64];
	snprintf(want, sizeof want, "record 1 (byte offset %llu)", (unsigned long long)offs[1]);
	for (int how = 0; how < 2; how++) {
		unsigned char save = all[at];
		all[at] ^= 0x01; /* the low mantissa bit of an f16: still finite */
		write_bytes(tpath("raw-bad.ss"), all, how ? (size_t)at : (size_t)n);
		all[at] = save;
		for (int pieces = 0; pieces < 2; pieces++) {
			assert_int_equal(ss_reader_open(&r, tpath("raw-bad.ss"), 0, err), 0);
			pieces_t c = {0};
			assert_int_equal(pieces ? ss_reader_next_pieces(r, &rec, collect, &c) : ss_reader_next(r, &rec), 1);
			int rc = pieces ? ss_reader_next_pieces(r, &rec, collect, &c) : ss_reader_next(r, &rec);
			assert_int_equal(rc, how ? SS_ERR_TRUNCATED : SS_ERR_CHECKSUM);
			if (!strstr(ss_reader_error(r), want))
				fail_msg("how %d, pieces %d: '%s' lacks '%s'", how, pieces, ss_reader_error(r), want);
			ss_reader_close(r);
			free(c.a[0]);
			free(c.a[1]);
		}
	}
	/* ss_frame_verify, each frame as fetched whole: raw (0-3) and
	 * compressed (4, 5) pass; a changed content byte (raw) or checksum
	 * byte (either) is SS_ERR_CHECKSUM, a frame cut or with a byte more
	 * is refused. */
	for (int t = 0; t < 6; t++) {
		size_t len = (size_t)((t < 5 ? offs[t + 1] : (uint64_t)n) - offs[t]);
		unsigned char *fr = all + offs[t];
		assert_int_equal(ss_frame_verify(fr, len, err), 0);
		size_t flip[2] = { len - 1, len / 2 };
		for (int k = 0; k < (t < 4 ? 2 : 1); k++) {
			fr[flip[k]] ^= 0x01;
			int rc = ss_frame_verify(fr, len, err);
			fr[flip[k]] ^= 0x01;
			if (rc != SS_ERR_CHECKSUM)
				fail_msg("record %d, byte %zu changed: %d (%s)", t, flip[k], rc, err);
		}
		assert_int_not_equal(ss_frame_verify(fr, len - 1, err), 0);
		if (t < 5)
			assert_int_equal(ss_frame_verify(fr, len + 1, err), SS_ERR_FORMAT);
	}
	free(all);
	s.id = NULL;
	ss_state_free(&s);
}

/* A file cut short while a raw frame of it is read (another program
 * truncating it in place): the reader's next read of the frame comes back
 * short, and the read is refused as a truncation naming the record. */
static const char *cut_path;

static int cut_then_collect(void *arg, const ss_record *meta, int which, uint64_t off, const void *p, size_t len)
{
	pieces_t *c = arg;
	if (which == 0 && off == 0) {
		int fd = open(cut_path, O_WRONLY);
		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, 4096), 0);
		close(fd);
	}
	return collect(c, meta, which, off, p, len);
}

static void test_raw_cut_while_read(void **ctx)
{
	(void)ctx;
	cut_path = tpath("raw-cut.ss");
	ss_state_dims d = {"mamba2", 2, 6, 64, 80, 99, 4}; /* ssm 240 KiB: past the first page */
	char err[SS_ERRMSG_MAX];
	ss_state s;
	assert_int_equal(ss_state_alloc(&s, &d), 0);
	strcpy(s.fingerprint, "fp");
	s.id = "x";
	uint64_t x = 5;
	for (size_t i = 0; i < ss_state_ssm_len(&d); i++)
		s.ssm[i] = (float)(ss_splitmix64(&x) >> 40) / 16777216.0f - 0.5f;
	for (size_t i = 0; i < ss_state_conv_len(&d); i++)
		s.conv[i] = (float)(ss_splitmix64(&x) >> 40) / 16777216.0f;
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, cut_path, 1, err), 0);
	ss_writer_set_min_saving(w, 2); /* raw whatever zstd saves */
	assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	assert_int_equal(ss_writer_close(w, err), 0);
	assert_true(fsize(cut_path) > 200000);

	ss_reader *r;
	const ss_record *rec;
	pieces_t c = {0};

	assert_int_equal(ss_reader_open(&r, cut_path, 0, err), 0);
	assert_int_equal(ss_reader_next_pieces(r, &rec, cut_then_collect, &c), SS_ERR_TRUNCATED);
	if (!strstr(ss_reader_error(r), "record 0 (byte offset 0): the file was cut short while being read"))
		fail_msg("'%s'", ss_reader_error(r));
	ss_reader_close(r);
	free(c.a[0]);
	free(c.a[1]);

	s.id = NULL;
	ss_state_free(&s);
}

/* A record over 1 MiB is judged on its first MiB: random values, raw; a
 * first MiB of zeros, compressed (the rest, random, streamed compressed
 * after the sample); each reads back the values written, whole and in
 * pieces. */
static void test_raw_decided_on_sample(void **ctx)
{
	(void)ctx;
	const char *p = tpath("rawbig.ss");
	ss_state_dims d = {"mamba2", 2, 24, 64, 128, 600, 4}; /* ssm 1.5 MiB in f32 */
	char err[SS_ERRMSG_MAX];
	ss_state s;
	assert_int_equal(ss_state_alloc(&s, &d), 0);
	strcpy(s.fingerprint, "fp");
	s.id = "x";
	size_t ns = ss_state_ssm_len(&d), zeros = (1u << 20) / 4;
	uint64_t offs[2], x = 5;
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 1, err), 0);
	for (int t = 0; t < 2; t++) {
		for (size_t i = 0; i < ns; i++)
			s.ssm[i] = t && i < zeros ? 0 : (float)(ss_splitmix64(&x) >> 40) / 16777216.0f - 0.5f;
		assert_int_equal(ss_writer_put_state(w, &s, &offs[t]), 0);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
	FILE *f = fopen(p, "rb");
	unsigned char h[32];
	for (int t = 0; t < 2; t++) {
		fseek(f, (long)offs[t], SEEK_SET);
		assert_int_equal(fread(h, 1, sizeof h, f), sizeof h);
		size_t hsz = ZSTD_frameHeaderSize(h, sizeof h);
		assert_false(ZSTD_isError(hsz));
		assert_int_equal((h[hsz] >> 1) & 3, t ? 2 : 0); /* compressed : raw */
	}
	fclose(f);
	x = 5;
	ss_reader *r, *rp;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_open(&rp, p, 0, err), 0);
	for (int t = 0; t < 2; t++) {
		ss_state back;
		pieces_t c = {0};
		assert_int_equal(ss_reader_next_pieces(rp, &rec, collect, &c), 1);
		assert_int_equal(ss_reader_next(r, &rec), 1);
		assert_int_equal(ss_record_state(rec, &back, err), 0);
		assert_int_equal(c.n[1], ns * 4);
		for (size_t i = 0; i < ns; i++) {
			float want = t && i < zeros ? 0 : (float)(ss_splitmix64(&x) >> 40) / 16777216.0f - 0.5f;
			float got;
			memcpy(&got, c.a[1] + 4 * i, 4);
			if (back.ssm[i] != want || got != want)
				fail_msg("record %d: ssm[%zu] %g / %g, wrote %g", t, i, (double)back.ssm[i], (double)got,
					 (double)want);
		}
		ss_state_free(&back);
		free(c.a[0]);
		free(c.a[1]);
	}
	ss_reader_close(r);
	ss_reader_close(rp);
	s.id = NULL;
	ss_state_free(&s);
}

static void test_tokens_roundtrip_and_seek(void **ctx)
{
	(void)ctx;
	const char *p = tpath("t.tokens");
	ss_writer *w;
	char err[SS_ERRMSG_MAX];
	uint64_t offs[3];
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	for (int i = 0; i < 3; i++) {
		int32_t toks[5] = { i, 50276, 0, 7, -1 };
		char id[16], text[32];
		snprintf(id, sizeof id, "d%d", i);
		snprintf(text, sizeof text, "text of d%d", i);
		ss_tokens t = { id, toks, 5 - i, text, strlen(text), "fp" };
		assert_int_equal(ss_writer_put_tokens(w, &t, &offs[i]), 0);
	}
	/* Not visible under its name until closed. */
	assert_int_equal(fsize(p), -1);
	assert_int_equal(ss_writer_close(w, err), 0);
	assert_true(fsize(p) > 0);
	assert_int_equal(offs[0], 0);

	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ss_reader_next(r, &rec), 1);
		assert_int_equal(ss_record_offset(rec), offs[i]);
		assert_string_equal(ss_record_format(rec), SS_FORMAT_TOKENS);
		ss_tokens t;
		assert_int_equal(ss_record_tokens(rec, &t, err), 0);
		assert_int_equal(t.n_tokens, 5 - i);
		assert_int_equal(t.tokens[0], i);
		assert_int_equal(t.tokens[1], 50276);
		assert_string_equal(t.tokenizer, "fp");
		assert_non_null(strstr(t.text, "text of d"));
		ss_tokens_free(&t);
	}
	assert_int_equal(ss_reader_next(r, &rec), 0);
	/* Seek straight to the middle record and decode only it. */
	assert_int_equal(ss_reader_seek(r, offs[1]), 0);
	assert_int_equal(ss_reader_next(r, &rec), 1);
	ss_tokens t;
	assert_int_equal(ss_record_tokens(rec, &t, err), 0);
	assert_string_equal(t.id, "d1");
	ss_tokens_free(&t);
	/* A token record is not a state record. */
	ss_state s;
	assert_int_equal(ss_record_state(rec, &s, err), SS_ERR_FORMAT);
	assert_non_null(strstr(err, "expected a ss-states record"));
	ss_reader_close(r);
}

static void check_state(const ss_state *s, int i, ss_dtype dt)
{
	ss_state ref;
	char id[32];
	snprintf(id, sizeof id, "doc%d", i);
	fill_state(&ref, id, (float)i, dt);
	assert_string_equal(s->id, id);
	assert_int_equal(s->dtype, dt);
	assert_int_equal(s->n_tokens, 42);
	assert_int_equal(ss_state_dims_check(&s->dims, &tiny, NULL), 0);
	for (size_t k = 0; k < ss_state_ssm_len(&tiny); k++) {
		float want = ref.ssm[k];
		if (dt == SS_DTYPE_F16)
			want = ss_f16_to_f32(ss_f32_to_f16(want));
		if (dt == SS_DTYPE_BF16)
			want = ss_bf16_to_f32(ss_f32_to_bf16(want));
		assert_true(s->ssm[k] == want);
	}
	/* logdecay is always f32, whatever the storage dtype. */
	for (size_t k = 0; k < ss_state_logdecay_len(&tiny); k++)
		assert_true(s->logdecay[k] == ref.logdecay[k]);
	ss_state_free(&ref);
}

static void test_states_roundtrip_dtypes(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	for (int dt = 0; dt < 3; dt++) {
		const char *p = tpath("s.states");
		write_states(p, 3, (ss_dtype)dt, NULL);
		ss_reader *r;
		const ss_record *rec;
		assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(ss_reader_next(r, &rec), 1);
			ss_state s;
			assert_int_equal(ss_record_state(rec, &s, err), 0);
			check_state(&s, i, (ss_dtype)dt);
			ss_state_free(&s);
		}
		assert_int_equal(ss_reader_next(r, &rec), 0);
		ss_reader_close(r);
	}
}

static void test_provenance_and_rank(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	const char *p = tpath("prov.states");
	ss_state s;
	fill_state(&s, "picaso-r(a,b)", 1, SS_DTYPE_F32);
	s.mode = strdup("picaso-r");
	s.n_sources = 2;
	s.sources = calloc(2, sizeof(char *));
	s.sources[0] = strdup("a");
	s.sources[1] = strdup("b");
	s.weights = calloc(ss_state_logdecay_len(&tiny) * 2, sizeof(float));
	s.weights[3] = 0.25f;
	s.has_rank = 1;
	s.rank = 3;
	s.score = 7.5;
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	assert_int_equal(ss_writer_close(w, err), 0);
	ss_state_free(&s);
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_next(r, &rec), 1);
	assert_int_equal(ss_record_state(rec, &s, err), 0);
	assert_string_equal(s.mode, "picaso-r");
	assert_int_equal(s.n_sources, 2);
	assert_string_equal(s.sources[1], "b");
	assert_true(s.weights[3] == 0.25f);
	assert_int_equal(s.has_rank, 1);
	assert_int_equal(s.rank, 3);
	assert_true(s.score == 7.5);
	ss_state_free(&s);
	ss_reader_close(r);
}

/* ss_state_copy: a deep copy of the arrays, dims, fingerprint and n_tokens;
 * not the id, provenance or annotation. */
static void test_state_copy(void **ctx)
{
	(void)ctx;
	ss_state s, c;
	fill_state(&s, "doc", 2, SS_DTYPE_BF16);
	s.has_rank = 1;
	assert_int_equal(ss_state_copy(&c, &s), 0);
	assert_int_equal(ss_state_dims_check(&c.dims, &s.dims, NULL), 0);
	assert_string_equal(c.fingerprint, s.fingerprint);
	assert_int_equal(c.n_tokens, 42);
	assert_int_equal(c.dtype, SS_DTYPE_F32);
	assert_null(c.id);
	assert_int_equal(c.has_rank, 0);
	assert_true(c.ssm != s.ssm && c.conv != s.conv && c.logdecay != s.logdecay);
	assert_memory_equal(c.ssm, s.ssm, ss_state_ssm_len(&tiny) * sizeof(float));
	assert_memory_equal(c.conv, s.conv, ss_state_conv_len(&tiny) * sizeof(float));
	assert_memory_equal(c.logdecay, s.logdecay, ss_state_logdecay_len(&tiny) * sizeof(float));
	ss_state_free(&s);
	ss_state_free(&c);
}

/* Annotation frames (ss-retrieve's rank/score) attach to the next record,
 * in full and meta reads, and are dropped by a seek. */
static void test_annotation_frames(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	const char *p = tpath("annot.states");
	uint64_t offs[3];
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	for (int i = 0; i < 3; i++) {
		ss_state s;
		fill_state(&s, "x", (float)i, SS_DTYPE_F32);
		if (i != 1)
			assert_int_equal(ss_writer_put_annotation(w, 3 - i, 10.5 - i), 0);
		assert_int_equal(ss_writer_put_state(w, &s, &offs[i]), 0);
		ss_state_free(&s);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
	for (int meta = 0; meta < 2; meta++) {
		ss_reader *r;
		const ss_record *rec;
		assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(meta ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec), 1);
			assert_int_equal(ss_record_offset(rec), offs[i]);
			ss_state s;
			assert_int_equal(meta ? ss_record_state_meta(rec, &s, err) : ss_record_state(rec, &s, err), 0);
			assert_int_equal(s.has_rank, i != 1);
			if (i != 1) {
				assert_int_equal(s.rank, 3 - i);
				assert_true(s.score == 10.5 - i);
			}
			ss_state_free(&s);
		}
		assert_int_equal(ss_reader_next(r, &rec), 0);
		/* Seeking to a record's frame skips its annotation. */
		assert_int_equal(ss_reader_seek(r, offs[2]), 0);
		assert_int_equal(ss_reader_next(r, &rec), 1);
		assert_int_equal(ss_record_rank(rec, NULL, NULL), 0);
		ss_reader_close(r);
	}
}

/* Plan frames: one ahead of the first record is read back as written, the
 * records are untouched by it, one after a record is skipped, and a
 * malformed one is a format error. */
static void test_plan_frames(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	const char *p = tpath("plan.states");
	const float plan[2][3] = { { -1.5f, -0.25f, 0 }, { -3, -2, -1e-3f } };
	size_t n = 0, H = 0;
	const float *got;
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	assert_int_equal(ss_writer_put_plan(w, 0, 3, &plan[0][0]), SS_ERR_INVALID);
	/* over SS_PLAN_MAX: refused before a byte of logdecay is read */
	assert_int_equal(ss_writer_put_plan(w, SS_PLAN_MAX, 1, &plan[0][0]), SS_ERR_INVALID);
	assert_int_equal(ss_writer_put_plan(w, 2, SS_PLAN_MAX / 8, &plan[0][0]), SS_ERR_INVALID);
	assert_int_equal(ss_writer_put_plan(w, 2, 3, &plan[0][0]), 0);
	for (int i = 0; i < 2; i++) {
		ss_state s;
		fill_state(&s, "x", (float)i, SS_DTYPE_F32);
		assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
		if (i == 0) /* a later plan frame: skipped */
			assert_int_equal(ss_writer_put_plan(w, 1, 3, &plan[1][0]), 0);
		ss_state_free(&s);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_plan(r, &n, &H, &got), 1);
	assert_int_equal(n, 2);
	assert_int_equal(H, 3);
	assert_memory_equal(got, plan, sizeof plan);
	assert_int_equal(ss_reader_plan(r, &n, &H, &got), 1); /* asked again: the same */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ss_reader_next(r, &rec), 1);
		ss_state s;
		assert_int_equal(ss_record_state(rec, &s, err), 0);
		assert_true(s.ssm[0] == (float)i + 0.001f * 0.0f - 0.3f); /* fill_state's */
		ss_state_free(&s);
		assert_int_equal(ss_reader_plan(r, &n, &H, &got), 0); /* a record was read */
	}
	assert_int_equal(ss_reader_next(r, &rec), 0);
	ss_reader_close(r);

	/* No plan: 0, and the first record still comes. */
	w = NULL;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	ss_state s;
	fill_state(&s, "y", 1, SS_DTYPE_F32);
	assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	ss_state_free(&s);
	assert_int_equal(ss_writer_close(w, err), 0);
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_plan(r, &n, &H, &got), 0);
	assert_int_equal(ss_reader_next(r, &rec), 1);
	ss_reader_close(r);

	/* Malformed payloads: no logdecay, a size not a multiple of 4n, a
	 * positive decay, n 0. */
	static const unsigned char bad[][32] = {
		{ 0x81, 0xa1, 'n', 0x01 },
		{ 0x82, 0xa1, 'n', 0x02, 0xa8, 'l', 'o', 'g', 'd', 'e', 'c', 'a', 'y', 0xc4, 4, 0, 0, 0, 0 },
		{ 0x82, 0xa1, 'n', 0x01, 0xa8, 'l', 'o', 'g', 'd', 'e', 'c', 'a', 'y', 0xc4, 4, 0, 0, 0x80, 0x3f },
		{ 0x82, 0xa1, 'n', 0x00, 0xa8, 'l', 'o', 'g', 'd', 'e', 'c', 'a', 'y', 0xc4, 4, 0, 0, 0, 0 },
	};
	static const size_t bad_len[] = { 4, 19, 19, 19 };
	for (size_t b = 0; b < sizeof bad_len / sizeof *bad_len; b++) {
		FILE *f = fopen(p, "wb");
		const unsigned char hdr[8] = { 0x54, 0x2a, 0x4d, 0x18, (unsigned char)bad_len[b], 0, 0, 0 };
		assert_int_equal(fwrite(hdr, 1, 8, f), 8);
		assert_int_equal(fwrite(bad[b], 1, bad_len[b], f), bad_len[b]);
		fclose(f);
		assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
		assert_int_equal(ss_reader_plan(r, &n, &H, &got), SS_ERR_FORMAT);
		assert_non_null(strstr(ss_reader_error(r), "malformed plan frame"));
		ss_reader_close(r);
	}
}

static void test_meta_then_full(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	const char *p = tpath("m.states");
	uint64_t offs[4];
	/* Large enough that conv/ssm span several zstd blocks. */
	ss_state_dims big = { "mamba2", 4, 8, 32, 64, 320, 4 };
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 1, err), 0);
	for (int i = 0; i < 4; i++) {
		ss_state s;
		assert_int_equal(ss_state_alloc(&s, &big), 0);
		char id[16];
		snprintf(id, sizeof id, "big%d", i);
		s.id = strdup(id);
		for (size_t k = 0; k < ss_state_ssm_len(&big); k++)
			s.ssm[k] = (float)((k * 2654435761u + (unsigned)i) % 1000003) * 1e-6f;
		for (size_t k = 0; k < ss_state_logdecay_len(&big); k++)
			s.logdecay[k] = -(float)(i + 1) * (float)k;
		assert_int_equal(ss_writer_put_state(w, &s, &offs[i]), 0);
		ss_state_free(&s);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
	/* Alternate meta and full reads, from a file and from a pipe. */
	for (int pipe_mode = 0; pipe_mode < 2; pipe_mode++) {
		ss_reader *r;
		const ss_record *rec;
		char src[600];
		int pfd[2] = { -1, -1 };
		pid_t pid = -1;
		if (pipe_mode) {
			assert_int_equal(pipe(pfd), 0);
			pid = fork();
			if (pid == 0) {
				close(pfd[0]);
				int fd = open(p, O_RDONLY);
				char b[4096];
				ssize_t n;
				while ((n = read(fd, b, sizeof b)) > 0)
					if (write(pfd[1], b, (size_t)n) != n)
						_exit(1);
				_exit(0);
			}
			close(pfd[1]);
			snprintf(src, sizeof src, "/dev/fd/%d", pfd[0]);
		} else {
			snprintf(src, sizeof src, "%s", p);
		}
		assert_int_equal(ss_reader_open(&r, src, 0, err), 0);
		assert_int_equal(ss_reader_seekable(r), !pipe_mode);
		for (int i = 0; i < 4; i++) {
			ss_state s;
			int meta = (i % 2 == 0);
			assert_int_equal(meta ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec), 1);
			assert_int_equal(ss_record_offset(rec), offs[i]);
			assert_int_equal(meta ? ss_record_state_meta(rec, &s, err) : ss_record_state(rec, &s, err), 0);
			assert_true(s.logdecay[5] == -(float)(i + 1) * 5.0f);
			if (meta)
				assert_null(s.ssm);
			else
				assert_true(s.ssm[77] == (float)(((size_t)77 * 2654435761u + (unsigned)i) % 1000003) * 1e-6f);
			ss_state_free(&s);
		}
		assert_int_equal(ss_reader_next(r, &rec), 0);
		ss_reader_close(r);
		if (pipe_mode) {
			close(pfd[0]);
			waitpid(pid, NULL, 0);
		}
	}
	/* A frame's length as a caller stored it (ss_reader_expect_length):
	 * taken by the metadata read when the file holds it, the same record
	 * and length as the walk gives; a length past the file's end is a
	 * truncation, one shorter than a header is not a frame; a seek forgets
	 * it. */
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	uint64_t len = offs[2] - offs[1];
	assert_int_equal(ss_reader_seek(r, offs[1]), 0);
	ss_reader_expect_length(r, len);
	assert_int_equal(ss_reader_next_meta(r, &rec), 1);
	assert_int_equal(ss_record_size(rec) > 0, 1);
	assert_string_equal(ss_record_format(rec), SS_FORMAT_STATES);
	assert_int_equal(ss_reader_next_meta(r, &rec), 1); /* the next one, at offs[1] + len */
	assert_int_equal(ss_record_offset(rec), offs[2]);
	assert_int_equal(ss_reader_seek(r, offs[3]), 0);
	ss_reader_expect_length(r, (uint64_t)1 << 40);
	assert_int_equal(ss_reader_next_meta(r, &rec), SS_ERR_TRUNCATED);
	assert_non_null(strstr(ss_reader_error(r), "truncated"));
	assert_int_equal(ss_reader_seek(r, offs[3]), 0);
	ss_reader_expect_length(r, 2);
	assert_int_equal(ss_reader_next_meta(r, &rec), SS_ERR_FORMAT);
	ss_reader_expect_length(r, (uint64_t)1 << 40);
	assert_int_equal(ss_reader_seek(r, offs[3]), 0); /* forgotten */
	assert_int_equal(ss_reader_next_meta(r, &rec), 1);
	assert_int_equal(ss_reader_next_meta(r, &rec), 0);
	ss_reader_close(r);
}

static void test_cat_concatenates(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX], cmd[2048];
	uint64_t a[2], b[3];
	write_states(tpath("a.states"), 2, SS_DTYPE_F32, a);
	write_states(tpath("b.states"), 3, SS_DTYPE_F16, b);
	snprintf(cmd, sizeof cmd, "cat '%s' '%s' > '%s'", tpath("a.states"), tpath("b.states"), tpath("ab.states"));
	assert_int_equal(system(cmd), 0);
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, tpath("ab.states"), 0, err), 0);
	long asz = fsize(tpath("a.states"));
	for (int i = 0; i < 5; i++) {
		assert_int_equal(ss_reader_next(r, &rec), 1);
		assert_int_equal(ss_record_index(rec), (uint64_t)i);
		assert_int_equal(ss_record_offset(rec), i < 2 ? a[i] : (uint64_t)asz + b[i - 2]);
	}
	assert_int_equal(ss_reader_next(r, &rec), 0);
	ss_reader_close(r);
}

/* Truncating a valid two-record stream anywhere inside the second record
 * must give SS_ERR_TRUNCATED naming record 1 and its offset. */
static void test_truncated(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	uint64_t offs[2];
	const char *p = tpath("tr.states");
	write_states(p, 2, SS_DTYPE_F32, offs);
	long n = fsize(p);
	FILE *f = fopen(p, "rb");
	unsigned char *all = malloc((size_t)n);
	assert_int_equal(fread(all, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	char want[64];
	snprintf(want, sizeof want, "record 1 (byte offset %llu)", (unsigned long long)offs[1]);
	for (long cut = (long)offs[1] + 1; cut < n; cut += 1 + (n - (long)offs[1]) / 17) {
		f = fopen(tpath("cut.states"), "wb");
		fwrite(all, 1, (size_t)cut, f);
		fclose(f);
		ss_reader *r;
		const ss_record *rec;
		assert_int_equal(ss_reader_open(&r, tpath("cut.states"), 0, err), 0);
		assert_int_equal(ss_reader_next(r, &rec), 1);
		int rc = ss_reader_next(r, &rec);
		assert_int_equal(rc, SS_ERR_TRUNCATED);
		assert_non_null(strstr(ss_reader_error(r), want));
		ss_reader_close(r);
	}
	free(all);
}

static int read_all(const char *p, uint64_t max, char *msg)
{
	ss_reader *r;
	const ss_record *rec;
	char err[SS_ERRMSG_MAX];
	int rc = ss_reader_open(&r, p, max, err);
	if (rc)
		return rc;
	while ((rc = ss_reader_next(r, &rec)) == 1) {
		ss_state s;
		if ((rc = ss_record_state(rec, &s, err)) != 0)
			break;
		ss_state_free(&s);
	}
	snprintf(msg, SS_ERRMSG_MAX, "%s", rc == 0 || rc == 1 ? "" : ss_reader_error(r));
	ss_reader_close(r);
	return rc;
}

static void write_bytes(const char *p, const void *b, size_t n)
{
	FILE *f = fopen(p, "wb");
	assert_non_null(f);
	fwrite(b, 1, n, f);
	fclose(f);
}

static void test_corrupt_inputs(void **ctx)
{
	(void)ctx;
	char msg[SS_ERRMSG_MAX];
	/* Flipped byte inside the compressed payload: checksum or format error. */
	const char *p = tpath("c.states");
	write_states(p, 1, SS_DTYPE_F32, NULL);
	long n = fsize(p);
	FILE *f = fopen(p, "r+b");
	fseek(f, n / 2, SEEK_SET);
	int c = fgetc(f);
	fseek(f, n / 2, SEEK_SET);
	fputc(c ^ 0x40, f);
	fclose(f);
	int rc = read_all(p, 0, msg);
	assert_true(rc == SS_ERR_CHECKSUM || rc == SS_ERR_FORMAT);
	assert_non_null(strstr(msg, "record 0 (byte offset 0)"));

	/* Not a stream at all. */
	write_bytes(tpath("g"), "hello, world\n", 13);
	assert_int_equal(read_all(tpath("g"), 0, msg), SS_ERR_FORMAT);
	assert_non_null(strstr(msg, "not an ss stream"));

	/* Empty input: a clean end with no records. */
	write_bytes(tpath("e"), "", 0);
	assert_int_equal(read_all(tpath("e"), 0, msg), 0);

	/* Declared content size beyond the limit: refused before allocating. */
	write_states(p, 1, SS_DTYPE_F32, NULL);
	assert_int_equal(read_all(p, 100, msg), SS_ERR_TOO_LARGE);
	assert_non_null(strstr(msg, "exceeds the limit"));
	/* A hand-made frame header declaring 2^40 bytes. */
	unsigned char hdr[] = { 0x28, 0xb5, 0x2f, 0xfd, 0xe4 /* FCS 8 bytes, checksum, single segment */,
				0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0 };
	write_bytes(tpath("huge"), hdr, sizeof hdr);
	assert_int_equal(read_all(tpath("huge"), 0, msg), SS_ERR_TOO_LARGE);

	/* Valid zstd, but msgpack declaring a 2^32-1-element array. */
	unsigned char mp[] = { 0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x00 };
	unsigned char z[256];
	size_t zn = ZSTD_compress(z, sizeof z, mp, sizeof mp, 1);
	write_bytes(tpath("mp"), z, zn);
	assert_int_equal(read_all(tpath("mp"), 0, msg), SS_ERR_FORMAT);
	assert_non_null(strstr(msg, "exceeds the record size"));

	/* A record from a newer version. */
	unsigned char nv[] = { 0x82, 0xa6, 'f', 'o', 'r', 'm', 'a', 't', 0xa9, 's', 's', '-', 's', 't', 'a', 't', 'e',
			       's', 0xa7, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x63 };
	zn = ZSTD_compress(z, sizeof z, nv, sizeof nv, 1);
	write_bytes(tpath("nv"), z, zn);
	assert_int_equal(read_all(tpath("nv"), 0, msg), SS_ERR_VERSION);

	/* Missing file. */
	ss_reader *r;
	char err[SS_ERRMSG_MAX];
	assert_int_equal(ss_reader_open(&r, tpath("nope"), 0, err), SS_ERR_NOTFOUND);
}

/* Packs the head of a hand-made state record into pk: a map of n_keys
 * entries, the string fields (dtype f32, or `dtype_head` when set) and
 * dims[7] (n_layer, nheads, headdim, d_state, conv_dim, d_conv, n_tokens);
 * the caller packs the arrays. */
static const char *dtype_head = "f32";
static void pack_state_head(msgpack_packer *pk, int n_keys, const int64_t *dims)
{
	msgpack_pack_map(pk, (size_t)n_keys);
	const char *ks[] = { "format", "version", "id", "fingerprint", "arch", "dtype" };
	const char *vs[] = { "ss-states", NULL, "x", "ff", "mamba2", dtype_head };
	for (int i = 0; i < 6; i++) {
		msgpack_pack_str_with_body(pk, ks[i], strlen(ks[i]));
		if (vs[i])
			msgpack_pack_str_with_body(pk, vs[i], strlen(vs[i]));
		else
			msgpack_pack_int(pk, 1);
	}
	const char *dk[] = { "n_layer", "nheads", "headdim", "d_state", "conv_dim", "d_conv", "n_tokens" };
	for (int i = 0; i < 7; i++) {
		msgpack_pack_str_with_body(pk, dk[i], strlen(dk[i]));
		msgpack_pack_int64(pk, dims[i]);
	}
}

/* Writes one record (sb's bytes) as the stream `name` and reads it back. */
static ss_reader *one_record(const char *name, const msgpack_sbuffer *sb, const ss_record **rec)
{
	char err[SS_ERRMSG_MAX];
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, tpath(name), 0, err), 0);
	assert_int_equal(ss_writer_put(w, sb->data, sb->size, NULL), 0);
	assert_int_equal(ss_writer_close(w, err), 0);
	ss_reader *r;
	assert_int_equal(ss_reader_open(&r, tpath(name), 0, err), 0);
	assert_int_equal(ss_reader_next(r, rec), 1);
	return r;
}

static void test_bad_state_fields(void **ctx)
{
	(void)ctx;
	/* A state record whose ssm bin is shorter than its dims declare. */
	char err[SS_ERRMSG_MAX];
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	const int64_t dims[7] = { 1, 1, 1, 2, 1, 4, 3 };
	pack_state_head(&pk, 14, dims);
	msgpack_pack_str_with_body(&pk, "logdecay", 8);
	float ld = -1;
	msgpack_pack_bin_with_body(&pk, &ld, 4);
	const ss_record *rec;
	ss_reader *r = one_record("bad.states", &sb, &rec);
	msgpack_sbuffer_destroy(&sb);
	ss_state s;
	assert_int_equal(ss_record_state_meta(rec, &s, err), 0);
	ss_state_free(&s);
	assert_int_equal(ss_record_state(rec, &s, err), SS_ERR_FORMAT);
	assert_non_null(strstr(err, "missing field \"conv\""));
	ss_reader_close(r);
}

/* q8 and q4 (qt) round trip: every element within half its block's scale
 * of the f32 value, each scale max|x|/127 (q8) or /7 (q4) of its block (an
 * independent loop over the layout of formats/states.md), an all-zero row
 * read back as zeros; conv's last channel group is short (conv_dim 6,
 * headdim 4). */
static void quant_roundtrip(ss_dtype qt)
{
	const float qmax = (float)ss_dtype_info_of(qt)->scaled;
	char err[SS_ERRMSG_MAX];
	ss_state s, t;
	fill_state(&s, "q", 0.5f, qt);
	const ss_state_dims *d = &tiny;
	size_t ns = ss_state_ssm_len(d), nc = ss_state_conv_len(d), K = (size_t)d->d_conv - 1;
	for (size_t i = 0; i < ns; i++) /* rows of magnitudes 1e-6 .. 1e2, one row zero */
		s.ssm[i] = i / 5 == 3 ? 0 : sinf(0.37f * (float)i + 1) * powf(10, (float)((i / 5) % 9) - 6);
	for (size_t i = 0; i < nc; i++)
		s.conv[i] = cosf(0.7f * (float)i) * (i % (6 * K) < 4 * K ? 3.0f : 0.01f);
	const char *p = tpath(qt == SS_DTYPE_Q4 ? "q4.states" : "q8.states");
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	assert_int_equal(ss_writer_close(w, err), 0);
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_next(r, &rec), 1);
	const void *cv, *sm;
	assert_int_equal(ss_record_state_view(rec, &t, &cv, &sm, err), 0);
	ss_state_free(&t);
	assert_int_equal(ss_record_state(rec, &t, err), 0);
	assert_int_equal(t.dtype, qt);
	assert_int_equal(ss_state_q8_n_scales(d, 1), (size_t)(d->n_layer * d->nheads * d->headdim));
	assert_int_equal(ss_state_q8_n_scales(d, 0), (size_t)(d->n_layer * 2));
	for (size_t row = 0; row < ns / (size_t)d->d_state; row++) {
		float mx = 0;
		for (int n = 0; n < d->d_state; n++)
			mx = fmaxf(mx, fabsf(s.ssm[row * (size_t)d->d_state + (size_t)n]));
		assert_true(t.ssm_scale[row] == mx / qmax);
		for (int n = 0; n < d->d_state; n++) {
			size_t i = row * (size_t)d->d_state + (size_t)n;
			double e = fabs((double)s.ssm[i] - t.ssm[i]);
			if (e > t.ssm_scale[row] / 2 * (1 + 1e-6))
				fail_msg("ssm[%zu]: %.9g read back as %.9g, scale %.9g", i, s.ssm[i], t.ssm[i],
					 t.ssm_scale[row]);
		}
	}
	for (int n = 0; n < d->d_state; n++)
		assert_true(t.ssm[3 * (size_t)d->d_state + (size_t)n] == 0);
	for (int l = 0; l < d->n_layer; l++)
		for (int g = 0; g < 2; g++) {
			size_t c0 = (size_t)g * 4, c1 = g ? 6 : 4;
			float mx = 0, sc = t.conv_scale[l * 2 + g];
			for (size_t c = c0; c < c1; c++)
				for (size_t k = 0; k < K; k++)
					mx = fmaxf(mx, fabsf(s.conv[((size_t)l * 6 + c) * K + k]));
			assert_true(sc == mx / qmax);
			for (size_t c = c0; c < c1; c++)
				for (size_t k = 0; k < K; k++) {
					size_t i = ((size_t)l * 6 + c) * K + k;
					if (fabs((double)s.conv[i] - t.conv[i]) > sc / 2 * (1 + 1e-6))
						fail_msg("conv[%zu]: %.9g read back as %.9g, scale %.9g", i, s.conv[i],
							 t.conv[i], sc);
				}
		}
	ss_state_free(&t);
	ss_reader_close(r);
	/* A value near FLT_MAX whose block scale a reader would refuse (above
	 * FLT_MAX/128 for q8, FLT_MAX/8 for q4: the most negative code times
	 * it would overflow) is refused by the writer; one just inside is
	 * stored and reads back finite. */
	const float edge = FLT_MAX / (qmax + 1) * qmax;
	for (int over = 1; over >= 0; over--) {
		s.ssm[7] = over ? FLT_MAX : edge * 0.999f;
		assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
		if (over) {
			assert_int_equal(ss_writer_put_state(w, &s, NULL), SS_ERR_INVALID);
			ss_writer_abort(w);
			continue;
		}
		assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
		assert_int_equal(ss_writer_close(w, err), 0);
		assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
		assert_int_equal(ss_reader_next(r, &rec), 1);
		if (ss_record_state(rec, &t, err))
			fail_msg("%s", err);
		assert_true(isfinite(t.ssm[7]) && fabs((double)t.ssm[7] - s.ssm[7]) <= t.ssm_scale[1] / 2 * 1.001);
		ss_state_free(&t);
		ss_reader_close(r);
	}
	/* A NaN is refused, never stored as a plausible number. */
	s.ssm[7] = NAN;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	assert_int_equal(ss_writer_put_state(w, &s, NULL), SS_ERR_INVALID);
	ss_writer_abort(w);
	ss_state_free(&s);
}

static void test_q8_roundtrip(void **ctx)
{
	(void)ctx;
	quant_roundtrip(SS_DTYPE_Q8);
}

static void test_q4_roundtrip(void **ctx)
{
	(void)ctx;
	quant_roundtrip(SS_DTYPE_Q4);
}

/* Byte shuffle: the layout of formats/states.md written out by hand (es 2,
 * 5 elements, blocks of 3: the last block short), and its inverse. */
static void test_shuffle_layout(void **ctx)
{
	(void)ctx;
	const unsigned char x[10] = { 0x10, 0x11, 0x20, 0x21, 0x30, 0x31, 0x40, 0x41, 0x50, 0x51 };
	const unsigned char want[10] = { 0x10, 0x20, 0x30, 0x11, 0x21, 0x31, 0x40, 0x50, 0x41, 0x51 };
	unsigned char y[10], back[10];
	ss_shuffle(y, x, 2, 5, 3);
	assert_memory_equal(y, want, 10);
	ss_unshuffle(back, y, 2, 5, 3);
	assert_memory_equal(back, x, 10);
	/* es 4 (the general loop): 3 elements a, b, c in blocks of 2 */
	const unsigned char x4[12] = { 0xa0, 0xa1, 0xa2, 0xa3, 0xb0, 0xb1, 0xb2, 0xb3, 0xc0, 0xc1, 0xc2, 0xc3 };
	const unsigned char w4[12] = { 0xa0, 0xb0, 0xa1, 0xb1, 0xa2, 0xb2, 0xa3, 0xb3, 0xc0, 0xc1, 0xc2, 0xc3 };
	unsigned char y4[12], b4[12];
	ss_shuffle(y4, x4, 4, 3, 2);
	assert_memory_equal(y4, w4, 12);
	ss_unshuffle(b4, y4, 4, 3, 2);
	assert_memory_equal(b4, x4, 12);
}

/* f16/bf16 records are byte-shuffled by default ("shuffle" recorded in the
 * record), read back to the very values of the same state written
 * unshuffled (old layout, still read), refuse a view in place, and a bad
 * "shuffle" value is refused naming the field. */
static void test_shuffle_records(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	const ss_state_dims d = { "mamba2", 2, 3, 64, 130, 70, 4 }; /* ssm 49920: one short block */
	for (int dt = SS_DTYPE_F16; dt <= SS_DTYPE_BF16; dt++) {
		ss_state s;
		assert_int_equal(ss_state_alloc(&s, &d), 0);
		s.id = strdup("sh");
		strcpy(s.fingerprint, "ff");
		s.dtype = (ss_dtype)dt;
		for (size_t i = 0; i < ss_state_ssm_len(&d); i++)
			s.ssm[i] = sinf(0.01f * (float)i) * (1 + (float)(i % 7));
		for (size_t i = 0; i < ss_state_conv_len(&d); i++)
			s.conv[i] = cosf(0.3f * (float)i);
		const char *p = tpath("sh.states");
		ss_writer *w;
		assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
		assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
		ss_writer_set_shuffle(w, 0);
		assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
		assert_int_equal(ss_writer_close(w, err), 0);
		ss_reader *r;
		const ss_record *rec;
		ss_state a, b;
		const void *cv, *sm;
		assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
		assert_int_equal(ss_reader_next(r, &rec), 1);
		assert_int_equal(ss_record_state(rec, &a, err), 0);
		assert_int_equal(a.shuffle, SS_SHUFFLE_BLOCK);
		assert_int_equal(ss_record_state_view(rec, &b, &cv, &sm, err), SS_ERR_UNSUPPORTED);
		assert_int_equal(ss_reader_next(r, &rec), 1);
		assert_int_equal(ss_record_state(rec, &b, err), 0);
		assert_int_equal(b.shuffle, 0);
		assert_memory_equal(a.ssm, b.ssm, ss_state_ssm_len(&d) * 4);
		assert_memory_equal(a.conv, b.conv, ss_state_conv_len(&d) * 4);
		ss_state_free(&a);
		assert_int_equal(ss_record_state_view(rec, &a, &cv, &sm, err), 0);
		ss_state_free(&a);
		ss_state_free(&b);
		ss_reader_close(r);
		ss_state_free(&s);
	}
	/* "shuffle" out of range */
	static const int64_t bad[2] = { 0, SS_SHUFFLE_MAX + 1 };
	for (int c = 0; c < 2; c++) {
		msgpack_sbuffer sb;
		msgpack_sbuffer_init(&sb);
		msgpack_packer pk;
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		const int64_t dims[7] = { 1, 1, 1, 2, 1, 4, 3 };
		dtype_head = "f16";
		pack_state_head(&pk, 17, dims);
		dtype_head = "f32";
		unsigned char zero[8] = { 0 };
		msgpack_pack_str_with_body(&pk, "shuffle", 7);
		msgpack_pack_int64(&pk, bad[c]);
		msgpack_pack_str_with_body(&pk, "logdecay", 8);
		msgpack_pack_bin_with_body(&pk, zero, 4);
		msgpack_pack_str_with_body(&pk, "conv", 4);
		msgpack_pack_bin_with_body(&pk, zero, 6);
		msgpack_pack_str_with_body(&pk, "ssm", 3);
		msgpack_pack_bin_with_body(&pk, zero, 4);
		const ss_record *rec;
		ss_reader *r = one_record("badsh.states", &sb, &rec);
		msgpack_sbuffer_destroy(&sb);
		ss_state s;
		assert_int_equal(ss_record_state(rec, &s, err), SS_ERR_FORMAT);
		assert_non_null(strstr(err, "field \"shuffle\""));
		ss_reader_close(r);
	}
}

/* A q8 or q4 record (dtype_head) of the dims { 1, 1, 1, 2, 1, 4, 3 }
 * (ssm 2 codes, conv 3, one scale each) with the given scale and code
 * bytes, as one_record. */
static ss_reader *quant_record(const char *name, float conv_scale, const float *ssm_scale,
			       size_t n_ssm_scales, const void *conv, size_t conv_bytes, const void *ssm,
			       size_t ssm_bytes, const ss_record **rec)
{
	static const int64_t dims[7] = { 1, 1, 1, 2, 1, 4, 3 };
	const float ld = -1;
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	pack_state_head(&pk, 18, dims);
	msgpack_pack_str_with_body(&pk, "conv_scale", 10);
	msgpack_pack_bin_with_body(&pk, &conv_scale, 4);
	msgpack_pack_str_with_body(&pk, "ssm_scale", 9);
	msgpack_pack_bin_with_body(&pk, ssm_scale, 4 * n_ssm_scales);
	msgpack_pack_str_with_body(&pk, "logdecay", 8);
	msgpack_pack_bin_with_body(&pk, &ld, 4);
	msgpack_pack_str_with_body(&pk, "conv", 4);
	msgpack_pack_bin_with_body(&pk, conv, conv_bytes);
	msgpack_pack_str_with_body(&pk, "ssm", 3);
	msgpack_pack_bin_with_body(&pk, ssm, ssm_bytes);
	ss_reader *r = one_record(name, &sb, rec);
	msgpack_sbuffer_destroy(&sb);
	return r;
}

/* A q8 record with a scale count that does not fit its dims, a bad scale
 * or a short code payload is refused with the field named, by the record
 * decoders and by composition (which reads codes in pieces). */
static void test_q8_corrupt(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	struct { int ssm_scales, ssm_codes; float scale; const char *want; } cases[] = {
		{ 2, 2, 0.5f, "field \"ssm_scale\" has 8 bytes, expected 4" },
		{ 0, 2, 0.5f, "field \"ssm_scale\" has 0 bytes, expected 4" },
		{ 1, 1, 0.5f, "field \"ssm\" has 1 bytes, expected 2" },
		{ 1, 2, -1.0f, "field \"ssm_scale\": scale 0 is -1" },
		{ 1, 2, NAN, "field \"ssm_scale\": scale 0 is nan" },
		/* finite, but -128 times it is not (issue 32 item 9) */
		{ 1, 2, 3e38f, "field \"ssm_scale\": scale 0 is 3e+38, not in [0, 2.65846e+36]" },
		{ 1, 2, 0.5f, NULL }, /* the good record */
	};
	dtype_head = "q8";
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		/* room for up to two ssm scales */
		const float sc[2] = { cases[c].scale, cases[c].scale };
		const signed char codes[3] = { 1, -2, 3 };
		const ss_record *rec;
		ss_reader *r = quant_record("badq8.states", 0.25f, sc, (size_t)cases[c].ssm_scales, codes, 3,
					    codes, (size_t)cases[c].ssm_codes, &rec);
		ss_state s;
		if (!cases[c].want) { /* codes times scales: 1, -2, 3 by 0.25; 1, -2 by 0.5 */
			assert_int_equal(ss_record_state(rec, &s, err), 0);
			assert_true(s.conv[0] == 0.25f && s.conv[1] == -0.5f && s.conv[2] == 0.75f);
			assert_true(s.ssm[0] == 0.5f && s.ssm[1] == -1.0f);
			ss_state_free(&s);
			ss_reader_close(r);
			continue;
		}
		assert_int_equal(ss_record_state(rec, &s, err), SS_ERR_FORMAT);
		if (!strstr(err, cases[c].want))
			fail_msg("case %zu: \"%s\" lacks \"%s\"", c, err, cases[c].want);
		ss_reader_close(r);
		ss_compose_opts o = { SS_COMPOSE_SOUP, 0, SS_COMPOSE_CONV_MEAN };
		const char *paths[1] = { tpath("badq8.states") };
		ss_compose_run_opts ro = { .paths = paths, .n_paths = 1 };
		ss_compose_result res;
		assert_int_equal(ss_compose_run(&o, &ro, &res, err), SS_ERR_FORMAT);
		if (!strstr(err, "record 0") || !strstr(err, c == 2 ? "\"ssm\" has 1 bytes" : cases[c].want))
			fail_msg("case %zu: compose: \"%s\"", c, err);
	}
	dtype_head = "f32";
}

/* q4 (formats/states.md "q4"): two codes a byte, element 2i in the low
 * nibble; a nibble of 8 reads as -8, so a scale above FLT_MAX/8 is refused;
 * an array is ceil(n/2) bytes (conv's 3 codes in 2). */
static void test_q4_codes(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	struct { float scale; size_t ssm_bytes; const char *want; } cases[] = {
		{ 0.5f, 1, NULL },
		{ 1e38f, 1, "field \"ssm_scale\": scale 0 is 1e+38, not in [0, 4.25353e+37]" },
		{ 0.5f, 2, "field \"ssm\" has 2 bytes, expected 1" },
	};
	dtype_head = "q4";
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const unsigned char conv[2] = { 0xe1, 0x03 }, ssm[2] = { 0x81, 0x00 }; /* 1 -2 3; 1 -8 */
		const ss_record *rec;
		ss_reader *r = quant_record("q4codes.states", 0.25f, &cases[c].scale, 1, conv, 2, ssm,
					    cases[c].ssm_bytes, &rec);
		ss_state s;
		if (cases[c].want) {
			assert_int_equal(ss_record_state(rec, &s, err), SS_ERR_FORMAT);
			if (!strstr(err, cases[c].want))
				fail_msg("case %zu: \"%s\" lacks \"%s\"", c, err, cases[c].want);
		} else {
			assert_int_equal(ss_record_state(rec, &s, err), 0);
			assert_int_equal(s.dtype, SS_DTYPE_Q4);
			assert_true(s.conv[0] == 0.25f && s.conv[1] == -0.5f && s.conv[2] == 0.75f);
			assert_true(s.ssm[0] == 0.5f && s.ssm[1] == -4.0f);
			ss_state_free(&s);
		}
		ss_reader_close(r);
	}
	dtype_head = "f32";
}

/* The kinds of hostile or odd record test_one_validator makes of a good one. */
enum { H_REVERSED, H_LOGDECAY_LAST, H_DUP_KEY, H_CONV_EMPTY, H_NAN, H_INF16, H_BIG_SCALE, H_NEG_SCALE,
       H_LOGDECAY_POS, H_KINDS };

/* Writes record `name`: the map of the one record of stream src re-packed
 * as kind says (keys reordered, a key twice, an array emptied, a value
 * made NaN, a scale made huge...). */
static void write_hostile(const char *src, const char *name, int kind)
{
	char err[SS_ERRMSG_MAX];
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, tpath(src), 0, err), 0);
	assert_int_equal(ss_reader_next(r, &rec), 1);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t used = 0;
	assert_int_equal(msgpack_unpack_next(&u, ss_record_bytes(rec), ss_record_size(rec), &used),
			 MSGPACK_UNPACK_SUCCESS);
	msgpack_object_map *m = &u.data.via.map;
	uint32_t n = m->size, order[32];
	assert_true(n <= 30);
	for (uint32_t i = 0; i < n; i++)
		order[i] = kind == H_REVERSED ? n - 1 - i : i;
	if (kind == H_LOGDECAY_LAST) { /* logdecay after conv and ssm */
		uint32_t k = 0;
		for (uint32_t i = 0; i < n; i++)
			if (m->ptr[i].key.via.str.size != 8 || memcmp(m->ptr[i].key.via.str.ptr, "logdecay", 8))
				order[k++] = i;
			else
				order[n - 1] = i;
	}
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n + (kind == H_DUP_KEY));
	for (uint32_t j = 0; j < n; j++) {
		const msgpack_object *k = &m->ptr[order[j]].key, *v = &m->ptr[order[j]].val;
		char key[32] = "";
		memcpy(key, k->via.str.ptr, k->via.str.size < 31 ? k->via.str.size : 31);
		msgpack_pack_object(&pk, *k);
		unsigned char buf[4096];
		if (v->type == MSGPACK_OBJECT_BIN && v->via.bin.size <= sizeof buf) {
			size_t len = v->via.bin.size;
			memcpy(buf, v->via.bin.ptr, len);
			const float nan = NAN, big = 3e38f, neg = -1, pos = 0.5f;
			const uint16_t inf16 = 0x7c00;
			if (kind == H_CONV_EMPTY && !strcmp(key, "conv"))
				len = 0;
			if (kind == H_NAN && !strcmp(key, "ssm"))
				memcpy(buf + 4 * 3, &nan, 4);
			if (kind == H_INF16 && !strcmp(key, "ssm"))
				memcpy(buf + 2 * 3, &inf16, 2);
			if ((kind == H_BIG_SCALE || kind == H_NEG_SCALE) && !strcmp(key, "ssm_scale"))
				memcpy(buf + 4, kind == H_BIG_SCALE ? &big : &neg, 4);
			if (kind == H_LOGDECAY_POS && !strcmp(key, "logdecay"))
				memcpy(buf + 4, &pos, 4);
			msgpack_pack_bin_with_body(&pk, buf, len);
		} else {
			msgpack_pack_object(&pk, *v);
		}
		if (kind == H_DUP_KEY && !strcmp(key, "n_layer")) {
			msgpack_pack_object(&pk, *k);
			msgpack_pack_object(&pk, *v);
		}
	}
	msgpack_unpacked_destroy(&u);
	ss_reader_close(r);
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, tpath(name), 0, err), 0);
	assert_int_equal(ss_writer_put(w, sb.data, sb.size, NULL), 0);
	assert_int_equal(ss_writer_close(w, err), 0);
	msgpack_sbuffer_destroy(&sb);
}

/* Piece collector of test_one_validator: counts the bytes of conv and ssm. */
static int count_pieces(void *arg, const ss_record *meta, int which, uint64_t off, const void *p, size_t len)
{
	(void)meta, (void)off, (void)p;
	if (which >= 0)
		((size_t *)arg)[which] += len;
	return 0;
}

/* One validator (issue 32 item 13): the same hostile or odd record is
 * accepted or refused alike by every way of reading it: ss_reader_next
 * with ss_record_state, ss_record_state_view, ss_record_check;
 * ss_reader_next_meta with ss_record_state_meta (what it can see: a NaN in
 * ssm it does not read) and ss_reader_next_pieces. Records in another key
 * order read as the original, through the metadata path too. */
static void test_one_validator(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	static const struct {
		ss_dtype dt;
		const char *want;  /* NULL: accepted */
		int meta_sees;     /* the metadata path refuses it too */
	} cases[H_KINDS] = {
		[H_REVERSED] = {SS_DTYPE_F32, NULL, 0},
		[H_LOGDECAY_LAST] = {SS_DTYPE_F32, NULL, 0},
		[H_DUP_KEY] = {SS_DTYPE_F32, "key \"n_layer\" appears twice", 1},
		[H_CONV_EMPTY] = {SS_DTYPE_F32, "field \"conv\" has 0 bytes, expected 144", 0},
		[H_NAN] = {SS_DTYPE_F32, "field \"ssm\": element 3 is nan, not finite", 0},
		[H_INF16] = {SS_DTYPE_F16, "field \"ssm\": element 3 is inf, not finite", 0},
		[H_BIG_SCALE] = {SS_DTYPE_Q8, "field \"ssm_scale\": scale 1 is 3e+38", 1},
		[H_NEG_SCALE] = {SS_DTYPE_Q8, "field \"ssm_scale\": scale 1 is -1", 1},
		[H_LOGDECAY_POS] = {SS_DTYPE_F32, "field \"logdecay\": element 1 is 0.5, not <= 0", 1},
	};
	for (int kind = 0; kind < H_KINDS; kind++) {
		ss_state good, s;
		fill_state(&good, "x", 0.5f, cases[kind].dt);
		ss_writer *w;
		assert_int_equal(ss_writer_open(&w, tpath("good.states"), 0, err), 0);
		ss_writer_set_shuffle(w, 0);
		assert_int_equal(ss_writer_put_state(w, &good, NULL), 0);
		assert_int_equal(ss_writer_close(w, err), 0);
		write_hostile("good.states", "odd.states", kind);
		ss_reader *r;
		const ss_record *rec;
		const void *cv, *sm;
		const char *want = cases[kind].want;
		/* whole: decode, view, check */
		assert_int_equal(ss_reader_open(&r, tpath("odd.states"), 0, err), 0);
		assert_int_equal(ss_reader_next(r, &rec), 1);
		int rc = ss_record_state(rec, &s, err);
		if (want ? rc != SS_ERR_FORMAT || !strstr(err, want) : rc != 0)
			fail_msg("kind %d: state: %d \"%s\"", kind, rc, rc ? err : "");
		if (!rc) {
			assert_memory_equal(s.ssm, good.ssm, ss_state_ssm_len(&tiny) * 4);
			assert_memory_equal(s.logdecay, good.logdecay, ss_state_logdecay_len(&tiny) * 4);
			ss_state_free(&s);
		}
		rc = ss_record_state_view(rec, &s, &cv, &sm, err);
		if (want ? rc != SS_ERR_FORMAT || !strstr(err, want) : rc != 0)
			fail_msg("kind %d: view: %d \"%s\"", kind, rc, rc ? err : "");
		if (!rc)
			ss_state_free(&s);
		rc = ss_record_check(rec, err);
		if (want ? rc != SS_ERR_FORMAT || !strstr(err, want) : rc != 0)
			fail_msg("kind %d: check: %d \"%s\"", kind, rc, rc ? err : "");
		ss_reader_close(r);
		/* metadata only */
		assert_int_equal(ss_reader_open(&r, tpath("odd.states"), 0, err), 0);
		assert_int_equal(ss_reader_next_meta(r, &rec), 1);
		rc = ss_record_state_meta(rec, &s, err);
		if (want && cases[kind].meta_sees ? rc != SS_ERR_FORMAT || !strstr(err, want) : rc != 0)
			fail_msg("kind %d: meta: %d \"%s\"", kind, rc, rc ? err : "");
		if (!rc) {
			assert_string_equal(s.id, "x");
			assert_memory_equal(s.logdecay, good.logdecay, ss_state_logdecay_len(&tiny) * 4);
			ss_state_free(&s);
		}
		assert_int_equal(ss_reader_next_meta(r, &rec), 0);
		ss_reader_close(r);
		/* in pieces: another key order is read whole (2), sizes as declared */
		size_t got[2] = {0, 0};
		assert_int_equal(ss_reader_open(&r, tpath("odd.states"), 0, err), 0);
		rc = ss_reader_next_pieces(r, &rec, count_pieces, got);
		assert_int_equal(rc, kind == H_REVERSED || kind == H_LOGDECAY_LAST ? 2 : 1);
		ss_reader_close(r);
		ss_state_free(&good);
	}
}

/* Heap bytes in use now (glibc's counters, or ASan's allocator). */
static size_t heap_in_use(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return __sanitizer_get_current_allocated_bytes();
#else
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
#endif
}

/* A zstd frame by hand: 8-byte declared content size, 2 MiB window, the
 * given blocks (type 0 raw with payload, 1 RLE of one byte). */
static size_t hand_frame(unsigned char *out, uint64_t content, int type, const void *payload, uint32_t size)
{
	size_t n = 0;
	const unsigned char h[] = { 0x28, 0xb5, 0x2f, 0xfd, 0xc0, 0x58 };
	memcpy(out, h, sizeof h);
	n += sizeof h;
	for (int i = 0; i < 8; i++)
		out[n++] = (unsigned char)(content >> (8 * i));
	uint32_t bh = 1 | (uint32_t)type << 1 | size << 3;
	out[n++] = (unsigned char)bh;
	out[n++] = (unsigned char)(bh >> 8);
	out[n++] = (unsigned char)(bh >> 16);
	size_t pl = type == 1 ? 1 : size;
	memcpy(out + n, payload, pl);
	return n + pl;
}

/* Issue 11.1: a skippable frame whose size runs past the end of the input
 * is an error naming its offset, not a clean end after 0 records. */
static void test_skippable_frame_truncated(void **ctx)
{
	(void)ctx;
	char msg[SS_ERRMSG_MAX];
	const char *p = tpath("skip.states");
	write_states(p, 3, SS_DTYPE_F32, NULL);
	long n = fsize(p);
	unsigned char *b = malloc((size_t)n + 8);
	FILE *f = fopen(p, "rb");
	assert_int_equal(fread(b + 8, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	/* An annotation frame whose size (65536) swallows the stream. */
	const unsigned char ann[] = { 0x53, 0x2a, 0x4d, 0x18, 0x00, 0x00, 0x01, 0x00 };
	memcpy(b, ann, 8);
	write_bytes(tpath("skipbad.states"), b, (size_t)n + 8);
	assert_int_equal(read_all(tpath("skipbad.states"), 0, msg), SS_ERR_TRUNCATED);
	assert_non_null(strstr(msg, "record 0 (byte offset 0): skippable frame truncated"));
	/* A skippable frame that ends exactly at the end of input is fine. */
	const unsigned char tail[] = { 0x50, 0x2a, 0x4d, 0x18, 0x02, 0x00, 0x00, 0x00, 'h', 'i' };
	memcpy(b, tail, 8);
	write_bytes(tpath("skipok.states"), b + 8, (size_t)n);
	f = fopen(tpath("skipok.states"), "ab");
	fwrite(tail, 1, sizeof tail, f);
	fclose(f);
	assert_int_equal(read_all(tpath("skipok.states"), 0, msg), 0);
	free(b);
}

/* Issue 11.2: memory follows the bytes a frame yields, not its declared
 * size: a 232-byte frame declaring 300 MB (under the default limit) costs
 * no more than a few MB before it is found corrupt. */
static void test_declared_size_not_trusted(void **ctx)
{
	(void)ctx;
	unsigned char fr[256], pay[215];
	memset(pay, 0xa0, sizeof pay);
	pay[0] = 0x8f;
	size_t n = hand_frame(fr, 300000000, 0, pay, sizeof pay);
	assert_int_equal(n, 232);
	write_bytes(tpath("declared.states"), fr, n);
	ss_reader *r;
	const ss_record *rec;
	char err[SS_ERRMSG_MAX];
	size_t base = heap_in_use();
	assert_int_equal(ss_reader_open(&r, tpath("declared.states"), 0, err), 0);
	assert_int_equal(ss_reader_next(r, &rec), SS_ERR_FORMAT);
	size_t used = heap_in_use() - base;
	assert_true(used < (16u << 20));
	assert_non_null(strstr(ss_reader_error(r), "record 0 (byte offset 0)"));
	ss_reader_close(r);
	/* Above the limit: refused before anything is decompressed. */
	n = hand_frame(fr, (uint64_t)1 << 30, 1, "\0", 131072);
	write_bytes(tpath("rle.states"), fr, n);
	char msg[SS_ERRMSG_MAX];
	assert_int_equal(read_all(tpath("rle.states"), 0, msg), SS_ERR_TOO_LARGE);
	assert_non_null(strstr(msg, "exceeds the limit"));
}

/* Records far above the 1 MiB trusted size round-trip through the growing
 * buffer (huge pages from 2 MiB on), from a file and from a pipe, and the
 * next record follows; written by one thread and by three
 * (ss_writer_set_threads: frames cut into zstd jobs, which must read back
 * as the same records). */
static const ss_state_dims big = { "mamba2", 4, 16, 64, 160, 8, 4 }; /* 2.6 MB f32 ssm */

/* Writes states "a" and "b" of dims `big`, ssm filled by splitmix64 (hardly
 * compressible: each frame is ~15 zstd blocks, beyond a reader's 1 MiB
 * window), compressed by `threads`; offs (may be NULL) gets their byte
 * offsets. */
static void write_big_threads(const char *p, uint64_t *offs, int threads)
{
	char err[SS_ERRMSG_MAX];
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	if (threads > 1)
		assert_int_equal(ss_writer_set_threads(w, threads), 0); /* Debian's libzstd has threads */
	for (int k = 0; k < 2; k++) {
		ss_state s;
		assert_int_equal(ss_state_alloc(&s, &big), 0);
		s.id = strdup(k ? "b" : "a");
		uint64_t x = 12345u + (uint64_t)k;
		for (size_t i = 0; i < ss_state_ssm_len(&big); i++) {
			s.ssm[i] = (float)(ss_splitmix64(&x) >> 40) / 16777216.0f;
		}
		assert_int_equal(ss_writer_put_state(w, &s, offs ? &offs[k] : NULL), 0);
		ss_state_free(&s);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
}

static void write_big(const char *p, uint64_t *offs)
{
	write_big_threads(p, offs, 1);
}

static void test_large_records(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	const char *p = tpath("big.states");
	for (int run = 0; run < 4; run++) {
		int pipe_in = run % 2;
		if (!pipe_in)
			write_big_threads(p, NULL, run < 2 ? 1 : 3);
		ss_reader *r;
		const ss_record *rec;
		FILE *saved = stdin;
		if (pipe_in) {
			char cmd[600];
			snprintf(cmd, sizeof cmd, "cat '%s'", p);
			stdin = popen(cmd, "r");
		}
		assert_int_equal(ss_reader_open(&r, pipe_in ? "-" : p, 0, err), 0);
		for (int k = 0; k < 2; k++) {
			assert_int_equal(ss_reader_next(r, &rec), 1);
			ss_state s;
			assert_int_equal(ss_record_state(rec, &s, err), 0);
			assert_string_equal(s.id, k ? "b" : "a");
			uint64_t x = 12345u + (uint64_t)k;
			for (size_t i = 0; i < ss_state_ssm_len(&big); i++) {
				if (s.ssm[i] != (float)(ss_splitmix64(&x) >> 40) / 16777216.0f)
					fail_msg("ssm[%zu] differs", i);
			}
			ss_state_free(&s);
		}
		assert_int_equal(ss_reader_next(r, &rec), 0);
		ss_reader_close(r);
		if (pipe_in) {
			pclose(stdin);
			stdin = saved;
		}
	}
}

/* ss_reader_next_meta skips the rest of a frame by its block headers, read
 * alone (pread) past the window of a file: the records' offsets and lengths
 * are right, and a file cut anywhere in a frame's far blocks is a truncation
 * naming that record. */
static void test_meta_skips_large_frames(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	uint64_t offs[2];
	const char *p = tpath("bigm.states");
	write_big(p, offs);
	long n = fsize(p);
	assert_true(offs[1] > (3u << 19) && (uint64_t)n - offs[1] > (3u << 19));
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(ss_reader_next_meta(r, &rec), 1);
		assert_int_equal(ss_record_offset(rec), offs[k]);
		assert_int_equal(ss_record_length(rec), (k ? (uint64_t)n : offs[1]) - offs[k]);
	}
	assert_int_equal(ss_reader_next_meta(r, &rec), 0);
	ss_reader_close(r);
	FILE *f = fopen(p, "rb");
	unsigned char *all = malloc((size_t)n);
	assert_int_equal(fread(all, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	for (int k = 0; k < 2; k++) {
		uint64_t end = k ? (uint64_t)n : offs[1];
		char want[64];
		snprintf(want, sizeof want, "record %d (byte offset %llu)", k, (unsigned long long)offs[k]);
		for (uint64_t cut = offs[k] + (1u << 20); cut < end; cut += 77777) {
			write_bytes(tpath("cutm.states"), all, (size_t)cut);
			assert_int_equal(ss_reader_open(&r, tpath("cutm.states"), 0, err), 0);
			if (k)
				assert_int_equal(ss_reader_next_meta(r, &rec), 1);
			assert_int_equal(ss_reader_next_meta(r, &rec), SS_ERR_TRUNCATED);
			if (!strstr(ss_reader_error(r), want))
				fail_msg("cut %llu: '%s' lacks '%s'", (unsigned long long)cut, ss_reader_error(r), want);
			ss_reader_close(r);
		}
	}
	free(all);
}

/* Issue 11.7: conv's length is validated like ssm's, with every product
 * checked: dims whose conv length wraps to 0 are refused. */
static void test_conv_len_wrap(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* n_layer * conv_dim * (d_conv - 1) = 2^17 * 2^24 * 2^23 = 2^64. */
	const int64_t dims[7] = { 1 << 17, 1, 1, 1, 1 << 24, (1 << 23) + 1, 3 };
	pack_state_head(&pk, 16, dims);
	size_t nb = (size_t)4 << 17;
	char *zeros = calloc(1, nb);
	msgpack_pack_str_with_body(&pk, "logdecay", 8);
	msgpack_pack_bin_with_body(&pk, zeros, nb);
	msgpack_pack_str_with_body(&pk, "conv", 4);
	msgpack_pack_bin_with_body(&pk, zeros, 0);
	msgpack_pack_str_with_body(&pk, "ssm", 3);
	msgpack_pack_bin_with_body(&pk, zeros, nb);
	free(zeros);
	const ss_record *rec;
	ss_reader *r = one_record("wrap.states", &sb, &rec);
	msgpack_sbuffer_destroy(&sb);
	ss_state s;
	assert_int_equal(ss_record_state(rec, &s, err), SS_ERR_FORMAT);
	assert_non_null(strstr(err, "absurd state size"));
	assert_int_equal(ss_record_state_meta(rec, &s, err), SS_ERR_FORMAT);
	ss_reader_close(r);
}

static void test_writer_abort_leaves_nothing(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	const char *p = tpath("aborted.states");
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, p, 0, err), 0);
	ss_state s;
	fill_state(&s, "x", 0, SS_DTYPE_F32);
	assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	ss_state_free(&s);
	ss_writer_abort(w);
	assert_int_equal(fsize(p), -1);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", tmpdir);
	assert_int_not_equal(system(cmd), 0);
	/* An existing non-regular file is written in place, never renamed over:
	 * "-o /dev/null" must not replace the device with a regular file. */
	assert_int_equal(ss_writer_open(&w, "/dev/null", 0, err), 0);
	fill_state(&s, "x", 0, SS_DTYPE_F32);
	assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	ss_state_free(&s);
	assert_int_equal(ss_writer_close(w, err), 0);
	struct stat st;
	assert_int_equal(stat("/dev/null", &st), 0);
	assert_true(S_ISCHR(st.st_mode));
	/* A directory that does not exist: open fails, nothing written. */
	assert_int_equal(ss_writer_open(&w, "/nonexistent-dir/x.states", 0, err), SS_ERR_IO);
}

/* Writes formats/golden/ (run once, by hand: SS_WRITE_GOLDEN=1). The samples
 * are made from golden/t1/c2 (llama.cpp's state after " Robert Boulter is an
 * English"), so what they hold is checked against an independent source. */
static void write_golden(const char *top, int32_t *toks, float *conv, float *ssm, const char *shared)
{
	char p[1024], err[SS_ERRMSG_MAX];
	float ld[16];
	snprintf(p, sizeof p, "%s/golden/t1/c2/logdecay.f32", shared);
	FILE *f = fopen(p, "rb");
	assert_non_null(f);
	assert_int_equal(fread(ld, 4, 16, f), 16);
	fclose(f);
	ss_writer *w;
	snprintf(p, sizeof p, "%s/formats/golden/t1-c2.tokens", top);
	assert_int_equal(ss_writer_open(&w, p, 19, err), 0);
	char text[] = " Robert Boulter is an English";
	ss_tokens t = { "wikitext-2-raw.test:2[0:29]", toks, 7, text, strlen(text), NULL };
	assert_int_equal(ss_writer_put_tokens(w, &t, NULL), 0);
	assert_int_equal(ss_writer_close(w, err), 0);
	/* t1-c2.states: the first layout (unshuffled), kept as the old-stream
	 * guard; t1-c2-v2.states: q8, then f16 and bf16 byte-shuffled. */
	snprintf(p, sizeof p, "%s/formats/golden/t1-c2.states", top);
	assert_int_equal(ss_writer_open(&w, p, 19, err), 0);
	ss_writer_set_shuffle(w, 0);
	for (int dt = 0; dt < 6; dt++) {
		if (dt == 3) {
			assert_int_equal(ss_writer_close(w, err), 0);
			snprintf(p, sizeof p, "%s/formats/golden/t1-c2-v2.states", top);
			assert_int_equal(ss_writer_open(&w, p, 19, err), 0);
		}
		ss_state s = { 0 };
		s.id = "wikitext-2-raw.test:2[0:29]";
		snprintf(s.fingerprint, sizeof s.fingerprint, "golden-t1");
		s.dims = (ss_state_dims){ "mamba2", 2, 8, 16, 16, 160, 4 };
		s.n_tokens = 7;
		s.dtype = dt == 3 ? SS_DTYPE_Q8 : (ss_dtype)(dt % 3);
		s.ssm = ssm;
		s.conv = conv;
		s.logdecay = ld;
		assert_int_equal(ss_writer_put_state(w, &s, NULL), 0);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
}

/* The committed samples in formats/golden/ decode to the golden fixtures
 * they were made from (golden/t1/c2): a format change that breaks old
 * streams fails here. */
static void test_golden_streams(void **ctx)
{
	(void)ctx;
	const char *top = getenv("SS_TOP"), *shared = getenv("SS_FIXTURES");
	if (!top || !shared)
		skip();
	char p[1024], err[SS_ERRMSG_MAX];
	float ssm[2 * 8 * 16 * 16], conv[2 * 160 * 3];
	int32_t toks[7];
	snprintf(p, sizeof p, "%s/golden/t1/c2/ssm.f32", shared);
	FILE *f = fopen(p, "rb");
	if (!f)
		skip();
	assert_int_equal(fread(ssm, 4, 4096, f), 4096);
	fclose(f);
	snprintf(p, sizeof p, "%s/golden/t1/c2/conv.f32", shared);
	f = fopen(p, "rb");
	assert_int_equal(fread(conv, 4, 960, f), 960);
	fclose(f);
	snprintf(p, sizeof p, "%s/golden/t1/c2/tokens.i32", shared);
	f = fopen(p, "rb");
	assert_int_equal(fread(toks, 4, 7, f), 7);
	fclose(f);

	if (getenv("SS_WRITE_GOLDEN"))
		write_golden(top, toks, conv, ssm, shared);
	ss_reader *r;
	const ss_record *rec;
	snprintf(p, sizeof p, "%s/formats/golden/t1-c2.tokens", top);
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	assert_int_equal(ss_reader_next(r, &rec), 1);
	ss_tokens t;
	assert_int_equal(ss_record_tokens(rec, &t, err), 0);
	assert_int_equal(t.n_tokens, 7);
	assert_memory_equal(t.tokens, toks, sizeof toks);
	assert_string_equal(t.text, " Robert Boulter is an English");
	ss_tokens_free(&t);
	assert_int_equal(ss_reader_next(r, &rec), 0);
	ss_reader_close(r);

	snprintf(p, sizeof p, "%s/formats/golden/t1-c2.states", top);
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	for (int dt = 0; dt < 3; dt++) {
		assert_int_equal(ss_reader_next(r, &rec), 1);
		ss_state s;
		assert_int_equal(ss_record_state(rec, &s, err), 0);
		assert_int_equal(s.dtype, dt);
		assert_int_equal(s.dims.n_layer, 2);
		assert_int_equal(s.dims.d_state, 16);
		assert_int_equal(s.n_tokens, 7);
		for (int i = 0; i < 4096; i++) {
			float want = ssm[i];
			if (dt == SS_DTYPE_F16)
				want = ss_f16_to_f32(ss_f32_to_f16(want));
			if (dt == SS_DTYPE_BF16)
				want = ss_bf16_to_f32(ss_f32_to_bf16(want));
			assert_true(s.ssm[i] == want);
		}
		if (dt == SS_DTYPE_F32)
			assert_memory_equal(s.conv, conv, sizeof conv);
		ss_state_free(&s);
	}
	assert_int_equal(ss_reader_next(r, &rec), 0);
	ss_reader_close(r);

	/* The q8 and shuffled layouts: q8 within half a scale of the golden
	 * state (and exactly its quantization now), f16/bf16 exact roundings. */
	snprintf(p, sizeof p, "%s/formats/golden/t1-c2-v2.states", top);
	assert_int_equal(ss_reader_open(&r, p, 0, err), 0);
	static const ss_dtype v2[3] = { SS_DTYPE_Q8, SS_DTYPE_F16, SS_DTYPE_BF16 };
	for (int k = 0; k < 3; k++) {
		assert_int_equal(ss_reader_next(r, &rec), 1);
		ss_state s;
		assert_int_equal(ss_record_state(rec, &s, err), 0);
		assert_int_equal(s.dtype, v2[k]);
		assert_int_equal(s.shuffle, k ? SS_SHUFFLE_BLOCK : 0);
		float sc[2 * 8 * 16], deq[4096];
		int8_t q[4096];
		if (k == 0) {
			ss_quant_scales(SS_DTYPE_Q8, sc, ssm, 4096, 16, 16);
			assert_memory_equal(s.ssm_scale, sc, sizeof sc);
			ss_quant_from_f32(SS_DTYPE_Q8, q, ssm, sc, 0, 4096, 16, 16);
			ss_quant_to_f32(SS_DTYPE_Q8, deq, q, sc, 0, 4096, 16, 16);
			assert_memory_equal(s.ssm, deq, sizeof deq);
		}
		for (int i = 0; i < 4096; i++) {
			float want = k == 1 ? ss_f16_to_f32(ss_f32_to_f16(ssm[i])) : ss_bf16_to_f32(ss_f32_to_bf16(ssm[i]));
			if (k == 0)
				assert_true(fabsf(s.ssm[i] - ssm[i]) <= s.ssm_scale[i / 16] / 2 * (1 + 1e-6f));
			else
				assert_true(s.ssm[i] == want);
		}
		ss_state_free(&s);
	}
	assert_int_equal(ss_reader_next(r, &rec), 0);
	ss_reader_close(r);
}

static int setup(void **ctx)
{
	(void)ctx;
	return ss_test_tmpdir_make(tmpdir, sizeof tmpdir, "stream");
}

static int teardown(void **ctx)
{
	(void)ctx;
	return ss_test_tmpdir_remove(tmpdir);
}

/* ss_nonfinite_find and ss_nonfinite_planes: a NaN, +inf or -inf at the
 * start, middle or end of runs shorter than, equal to and longer than the
 * scan's run of 1024 (and the tail) is found at its index; the largest
 * finite values, subnormals and -0 are not. */
static void test_nonfinite_scan(void **state)
{
	(void)state;
	static const ss_dtype ts[] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16};
	static const size_t ns[] = {1, 7, 1023, 1024, 1025, 3000};
	const float bad[] = {NAN, INFINITY, -INFINITY};
	for (size_t a = 0; a < 3; a++)
		for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
			const ss_dtype t = ts[a];
			const size_t n = ns[b], es = ss_dtype_size(t);
			const float top = t == SS_DTYPE_F32 ? FLT_MAX : t == SS_DTYPE_F16 ? 65504.0f : 3.3895e38f;
			float *x = malloc(n * sizeof *x);
			unsigned char *p = malloc(n * es), *lo = malloc(n), *hi = malloc(n);
			assert_non_null(x), assert_non_null(p), assert_non_null(lo), assert_non_null(hi);
			for (size_t i = 0; i < n; i++)
				x[i] = i % 4 == 0 ? top : i % 4 == 1 ? -top : i % 4 == 2 ? -0.0f : 1e-40f;
			ss_from_f32(p, t, x, n);
			assert_int_equal(ss_nonfinite_find(p, t, n), n);
			const size_t at[] = {0, n / 2, n - 1};
			for (size_t k = 0; k < 3; k++)
				for (size_t j = 0; j < 3; j++) {
					ss_from_f32(p, t, x, n);
					ss_from_f32(p + at[j] * es, t, &bad[k], 1);
					assert_int_equal(ss_nonfinite_find(p, t, n), at[j]);
					if (es == 2) {
						for (size_t i = 0; i < n; i++)
							lo[i] = p[2 * i], hi[i] = p[2 * i + 1];
						assert_int_equal(ss_nonfinite_planes(lo, hi, t, n), at[j]);
					}
				}
			free(x), free(p), free(lo), free(hi);
		}
}


/* The one JSON-lines rule (issue 48, items 9 and 19): NULs and unknown keys
 * refused; every number, at any depth, read exactly from its source text. */
static void test_jsonl_rule(void **unused)
{
	(void)unused;
	static const char *const keys[] = { "a", "s", "c", "e", "f", "g", "h", NULL };
	const char *line = " {\"a\": [1, {\"b\": 9007199254740993}], \"s\": \"x\\\"y\\u0041\", \"c\" :-5 ,"
			   "\"e\":{},\"f\":[ ],\"g\":1e3,\"h\":[true,null,false,7.5]}\n";
	char err[SS_ERRMSG_MAX];
	cJSON *o;
	int64_t x;
	assert_int_equal(ss_jsonl_parse(line, strlen(line), keys, &o, err), 0);
	const cJSON *b = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "a"), 1), "b");
	assert_string_equal(b->valuestring, "9007199254740993");
	assert_int_equal(ss_json_int(b, 0, INT64_MAX, &x), 0);
	assert_true(x == 9007199254740993LL);
	assert_int_equal(ss_json_int(b, 0, 9007199254740992LL, &x), SS_ERR_INVALID);
	assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "a"), 0)->valuestring, "1");
	assert_string_equal(cJSON_GetObjectItem(o, "c")->valuestring, "-5");
	assert_int_equal(ss_json_int(cJSON_GetObjectItem(o, "g"), 0, 1000, &x), 0);
	assert_true(x == 1000);
	assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "h"), 3)->valuestring, "7.5");
	assert_int_equal(ss_json_int(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "h"), 3), 0, 9, &x), SS_ERR_INVALID);
	assert_int_equal(ss_json_int(cJSON_GetObjectItem(o, "s"), 0, 9, &x), SS_ERR_INVALID);
	cJSON_Delete(o);
	assert_int_equal(ss_jsonl_parse(line, strlen(line), keys + 1, &o, err), SS_ERR_FORMAT);
	assert_null(o);
	assert_string_equal(err, "unknown key \"a\" (known: s, c, e, f, g, h)");
	const char *nul[] = { "{\"s\": \"a\\u0000b\"}", "{\"a\\u0000\": 1}", "{\"s\": [\"\\u0000\"]}" };
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(ss_jsonl_parse(nul[i], strlen(nul[i]), NULL, &o, err), SS_ERR_FORMAT);
		assert_string_equal(err, "a NUL character (\\u0000) in a string");
	}
	const char *ok = "{\"s\": \"a\\\\u0000b\"}"; /* an escaped backslash, then text */
	assert_int_equal(ss_jsonl_parse(ok, strlen(ok), NULL, &o, err), 0);
	cJSON_Delete(o);
	assert_int_equal(ss_jsonl_parse("[1]", 3, NULL, &o, err), SS_ERR_FORMAT);
	assert_string_equal(err, "not a JSON object");
}

/* Writes n bytes of p to path (a fresh file). */
static void put_file(const char *path, const char *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* One line of text, any length, as a JSON object {"s": "xxx..."} of n
 * bytes with its '\n' (n >= 10). */
static char *long_object(size_t n)
{
	char *p = malloc(n);
	assert_non_null(p);
	memcpy(p, "{\"s\": \"", 7);
	memset(p + 7, 'x', n - 10);
	memcpy(p + n - 3, "\"}\n", 3);
	return p;
}

/* ss_getline (issue 51 item 1): a line cut at max, the rest of it dropped
 * and the next read; a last line without '\n'; memory within max + 1. */
static void test_getline_bounded(void **unused)
{
	(void)unused;
	const char text[] = "abcdef\nxy\n\nzz";
	FILE *f = fmemopen((void *)text, sizeof text - 1, "rb");
	char *line = NULL;
	size_t cap = 0;
	assert_int_equal(ss_getline(&line, &cap, f, 4), SS_ERR_TOO_LARGE);
	assert_int_equal(ss_getline(&line, &cap, f, 4), 3);
	assert_string_equal(line, "xy\n");
	assert_int_equal(ss_getline(&line, &cap, f, 4), 1);
	assert_string_equal(line, "\n");
	assert_int_equal(ss_getline(&line, &cap, f, 4), 2);
	assert_string_equal(line, "zz");
	assert_int_equal(ss_getline(&line, &cap, f, 4), 0);
	assert_true(cap <= 5);
	fclose(f);
	free(line);
}

/* Every line's error through the reader: what ss_jsonl_parse says of the
 * line, located "P: line 1". */
static void check_line_as_parse(const char *path, const char *line, size_t n)
{
	char err[SS_ERRMSG_MAX] = "", want[SS_ERRMSG_MAX + 64], perr[SS_ERRMSG_MAX] = "";
	cJSON *o, *po;
	ss_jsonl_reader *r;
	put_file(path, line, n);
	int prc = ss_jsonl_parse(line, n, NULL, &po, perr);
	assert_int_equal(ss_jsonl_reader_open(&r, path, err), 0);
	int rc = ss_jsonl_reader_next(r, NULL, NULL, &o, err);
	if (prc) {
		assert_int_equal(rc, prc);
		assert_null(o);
		snprintf(want, sizeof want, "%s: line 1: %s", path, perr);
		assert_string_equal(err, want);
	} else {
		assert_int_equal(rc, 1);
		assert_string_equal(cJSON_GetObjectItem(o, "s")->valuestring,
				    cJSON_GetObjectItem(po, "s")->valuestring);
		cJSON_Delete(o);
		cJSON_Delete(po);
	}
	ss_jsonl_reader_close(r);
}

/* The next object of r: {"a": a} on line `line` of path. */
static void next_a(ss_jsonl_reader *r, const char *path, int64_t a, long line)
{
	static const char *const keys[] = { "a", NULL };
	char err[SS_ERRMSG_MAX] = "", want[SS_ERRMSG_MAX + 64];
	cJSON *o;
	int64_t x;
	assert_int_equal(ss_jsonl_reader_next(r, keys, NULL, &o, err), 1);
	assert_int_equal(ss_json_int(cJSON_GetObjectItem(o, "a"), 0, 9, &x), 0);
	assert_true(x == a);
	cJSON_Delete(o);
	snprintf(want, sizeof want, "%s: line %ld", path, line);
	assert_string_equal(ss_jsonl_reader_where(r), want);
	assert_int_equal(ss_jsonl_reader_lineno(r), line);
}

/* The one JSON-lines reader (issue 51 item 1): blank lines skipped, CRLF, a
 * last line without '\n', byte offsets to resume at, line numbers in every
 * message, the 16 MiB line bound, the whole-input bound, pipes, and the
 * parsing rule of ss_jsonl_parse for what the lines hold. */
static void test_jsonl_reader(void **unused)
{
	(void)unused;
	static const char *const keys[] = { "a", NULL };
	char err[SS_ERRMSG_MAX] = "", want[SS_ERRMSG_MAX + 64];
	cJSON *o;
	ss_jsonl_reader *r;
	const char *p = tpath("r.jsonl");

	/* blank lines (a CR alone too), CRLF, no final newline; offsets */
	const char *l[] = { "\n", " \t\r\n", "{\"a\": 1}\r\n", "\n", "{\"a\": 2}\n", "{\"a\": 3}" };
	char text[128] = "";
	for (size_t i = 0; i < 6; i++)
		strcat(text, l[i]);
	put_file(p, text, strlen(text));
	assert_int_equal(ss_jsonl_reader_open(&r, p, err), 0);
	assert_string_equal(ss_jsonl_reader_where(r), "");
	assert_int_equal(ss_jsonl_reader_tell(r), 0);
	next_a(r, p, 1, 3);
	int64_t after3 = (int64_t)(strlen(l[0]) + strlen(l[1]) + strlen(l[2]));
	assert_int_equal(ss_jsonl_reader_tell(r), after3);
	next_a(r, p, 2, 5);
	next_a(r, p, 3, 6);
	assert_int_equal(ss_jsonl_reader_tell(r), (int64_t)strlen(text));
	assert_int_equal(ss_jsonl_reader_next(r, keys, NULL, &o, err), 0);
	assert_null(o);
	/* back to an offset: the blank line there, then line 5's object as line 2 */
	assert_int_equal(ss_jsonl_reader_seek(r, after3), 0);
	next_a(r, p, 2, 2);
	assert_int_equal(ss_jsonl_reader_seek(r, 0), 0);
	next_a(r, p, 1, 3);
	ss_jsonl_reader_close(r);

	/* not an object, with and without what is expected; an unknown key */
	put_file(p, "\n[1]\n", 5);
	assert_int_equal(ss_jsonl_reader_open(&r, p, err), 0);
	assert_int_equal(ss_jsonl_reader_next(r, keys, NULL, &o, err), SS_ERR_FORMAT);
	assert_null(o);
	snprintf(want, sizeof want, "%s: line 2: not a JSON object", p);
	assert_string_equal(err, want);
	ss_jsonl_reader_close(r);
	assert_int_equal(ss_jsonl_reader_open(&r, p, err), 0);
	assert_int_equal(ss_jsonl_reader_next(r, keys, "{\"a\": 1}", &o, err), SS_ERR_FORMAT);
	snprintf(want, sizeof want, "%s: line 2: not a JSON object: expected {\"a\": 1}", p);
	assert_string_equal(err, want);
	ss_jsonl_reader_close(r);
	put_file(p, "{\"b\": 1}\n", 9);
	assert_int_equal(ss_jsonl_reader_open(&r, p, err), 0);
	assert_int_equal(ss_jsonl_reader_next(r, keys, NULL, &o, err), SS_ERR_FORMAT);
	snprintf(want, sizeof want, "%s: line 1: unknown key \"b\" (known: a)", p);
	assert_string_equal(err, want);
	ss_jsonl_reader_close(r);

	/* NULs (a raw byte, an escape) and bytes that are not UTF-8: as
	 * ss_jsonl_parse has them */
	check_line_as_parse(p, "{\"s\": \"x\0y\"}\n", 13);
	check_line_as_parse(p, "{\"s\": \"x\\u0000y\"}\n", 18);
	check_line_as_parse(p, "{\"s\": \"\xff\xfe\xc0\xaf\"}\n", 14);
	check_line_as_parse(p, "\0\n", 2);

	/* a line of 16 MiB with its '\n' is read, one a byte longer refused,
	 * the rest of it skipped */
	const size_t max = SS_JSONL_LINE_MAX;
	char *obj = long_object(max + 1);
	FILE *f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(obj + 1, 1, max, f), max); /* "\"s\": ..." is not an object */
	assert_int_equal(fwrite(obj, 1, 7, f), 7);          /* the line: {"s": " x... "}\n */
	assert_int_equal(fwrite(obj + 8, 1, max - 7, f), max - 7);
	assert_int_equal(fwrite(obj, 1, max + 1, f), max + 1);
	assert_int_equal(fwrite("{\"a\": 4}\n", 1, 9, f), 9);
	assert_int_equal(fclose(f), 0);
	free(obj);
	assert_int_equal(ss_jsonl_reader_open(&r, p, err), 0);
	assert_int_equal(ss_jsonl_reader_next(r, NULL, NULL, &o, err), SS_ERR_FORMAT);
	snprintf(want, sizeof want, "%s: line 1: not a JSON object", p);
	assert_string_equal(err, want);
	assert_int_equal(ss_jsonl_reader_next(r, NULL, NULL, &o, err), 1);
	assert_int_equal(strlen(cJSON_GetObjectItem(o, "s")->valuestring), max - 10);
	cJSON_Delete(o);
	assert_int_equal(ss_jsonl_reader_next(r, NULL, NULL, &o, err), SS_ERR_FORMAT);
	snprintf(want, sizeof want, "%s: line 3: longer than 16 MiB", p);
	assert_string_equal(err, want);
	ss_jsonl_reader_close(r);
	/* the whole input's bound, on a regular file: at once */
	assert_int_equal(ss_jsonl_reader_open(&r, p, err), 0);
	assert_int_equal(ss_jsonl_reader_limit(r, max, "a test", err), SS_ERR_TOO_LARGE);
	snprintf(want, sizeof want, "%s: larger than 16 MiB, the limit for a test", p);
	assert_string_equal(err, want);
	ss_jsonl_reader_close(r);

	/* a pipe: counted as it is read; no offset, no seek */
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	const char piped[] = "{\"a\": 1}\n\n{\"a\": 2}\n{\"a\": 3}\n";
	assert_int_equal(write(fd[1], piped, sizeof piped - 1), (ssize_t)(sizeof piped - 1));
	close(fd[1]);
	f = fdopen(fd[0], "rb");
	assert_non_null(f);
	assert_int_equal(ss_jsonl_reader_open_file(&r, f, "(pipe)", err), 0);
	assert_int_equal(ss_jsonl_reader_limit(r, 20, "a pipe", err), 0);
	assert_int_equal(ss_jsonl_reader_tell(r), -1);
	next_a(r, "(pipe)", 1, 1);
	next_a(r, "(pipe)", 2, 3);
	assert_int_equal(ss_jsonl_reader_seek(r, 0), SS_ERR_INVALID);
	assert_int_equal(ss_jsonl_reader_next(r, keys, NULL, &o, err), SS_ERR_TOO_LARGE);
	assert_null(o);
	assert_string_equal(err, "(pipe): larger than 20 bytes, the limit for a pipe");
	ss_jsonl_reader_close(r); /* closes f */

	/* what cannot be opened */
	assert_int_equal(ss_jsonl_reader_open(&r, tmpdir, err), SS_ERR_INVALID);
	assert_null(r);
	snprintf(want, sizeof want, "%s: not a regular file (a FIFO, a directory or a device)", tmpdir);
	assert_string_equal(err, want);
	const char *none = tpath("none.jsonl");
	assert_int_equal(ss_jsonl_reader_open(&r, none, err), SS_ERR_IO);
	snprintf(want, sizeof want, "%s: No such file or directory", none);
	assert_string_equal(err, want);
	ss_jsonl_reader_close(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dtype_conversions),
		cmocka_unit_test(test_dtype_bulk),
		cmocka_unit_test(test_next_pieces),
		cmocka_unit_test(test_raw_frames),
		cmocka_unit_test(test_raw_cut_while_read),
		cmocka_unit_test(test_raw_decided_on_sample),
		cmocka_unit_test(test_tokens_roundtrip_and_seek),
		cmocka_unit_test(test_states_roundtrip_dtypes),
		cmocka_unit_test(test_provenance_and_rank),
		cmocka_unit_test(test_state_copy),
		cmocka_unit_test(test_annotation_frames),
		cmocka_unit_test(test_plan_frames),
		cmocka_unit_test(test_meta_then_full),
		cmocka_unit_test(test_cat_concatenates),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_corrupt_inputs),
		cmocka_unit_test(test_bad_state_fields),
		cmocka_unit_test(test_q8_roundtrip),
		cmocka_unit_test(test_q4_roundtrip),
		cmocka_unit_test(test_q4_codes),
		cmocka_unit_test(test_q8_corrupt),
		cmocka_unit_test(test_one_validator),
		cmocka_unit_test(test_nonfinite_scan),
		cmocka_unit_test(test_shuffle_layout),
		cmocka_unit_test(test_shuffle_records),
		cmocka_unit_test(test_writer_abort_leaves_nothing),
		cmocka_unit_test(test_skippable_frame_truncated),
		cmocka_unit_test(test_declared_size_not_trusted),
		cmocka_unit_test(test_large_records),
		cmocka_unit_test(test_meta_skips_large_frames),
		cmocka_unit_test(test_conv_len_wrap),
		cmocka_unit_test(test_golden_streams),
		cmocka_unit_test(test_jsonl_rule),
		cmocka_unit_test(test_getline_bounded),
		cmocka_unit_test(test_jsonl_reader),
	};
	return cmocka_run_group_tests_name("stream", tests, setup, teardown);
}
