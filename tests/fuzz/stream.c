/* Fuzz target: the record stream reader (lib/stream/reader.c, pieces.c, raw.c) and the typed
 * record decoders and JSON rendering (lib/stream/record.c), full, meta-only
 * and in pieces (ss_reader_next_pieces: raw frames read without zstd,
 * formats/states.md "raw frames"). */
#include "fuzz.h"
#include "ss.h"
#include "stream/internal.h"

static FILE *devnull;

static void decode(const ss_record *rec)
{
	char err[SS_ERRMSG_MAX];
	ss_record_to_json(rec, devnull, 0);
	if (!strcmp(ss_record_format(rec), SS_FORMAT_TOKENS)) {
		ss_tokens t;
		if (ss_record_tokens(rec, &t, err) == 0)
			ss_tokens_free(&t);
	} else {
		ss_state s;
		if (ss_record_state(rec, &s, err) == 0)
			ss_state_free(&s);
		if (ss_record_state_meta(rec, &s, err) == 0)
			ss_state_free(&s);
	}
}

/* Reads every byte of each piece (the sanitizers see a read past a map
 * or a buffer) and checks the pieces' contract: in order, and whole 16-byte
 * units until an array's last. */
static int on_piece(void *arg, const ss_record *meta, int which, uint64_t off, const void *p, size_t len)
{
	uint64_t *at = arg;
	(void)meta;
	if (which < 0) {
		at[0] = at[1] = at[2] = 0;
		return 0;
	}
	if (off != at[which] || (at[2] >> which & 1))
		abort(); /* out of order, or after the array's short last piece */
	const volatile unsigned char *b = p;
	unsigned char x = 0;
	for (size_t i = 0; i < len; i++)
		x ^= b[i];
	(void)x;
	at[which] += len;
	if (len % 16)
		at[2] |= 1u << which;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!devnull)
		devnull = fopen("/dev/null", "w");
	const char *p = fuzz_file("in.states", data, size);
	char err[SS_ERRMSG_MAX];
	for (int meta = 0; meta < 3; meta++) {
		ss_reader *r;
		const ss_record *rec;
		/* A small limit: the fuzzer's memory limit is not what is tested. */
		if (ss_reader_open(&r, p, 64u << 20, err))
			abort();
		for (int k = 0; k < 64; k++) {
			uint64_t at[3] = {0, 0, 0};
			int rc = meta == 2 ? ss_reader_next_pieces(r, &rec, on_piece, at)
			       : meta	   ? ss_reader_next_meta(r, &rec)
					   : ss_reader_next(r, &rec);
			if (rc <= 0) {
				if (rc < 0 && !strstr(ss_reader_error(r), "byte offset"))
					abort(); /* every error names the record's offset */
				break;
			}
			decode(rec);
		}
		ss_reader_close(r);
	}
	return 0;
}
