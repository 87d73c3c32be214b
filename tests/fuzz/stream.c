/* Fuzz target: the record stream reader (lib/stream/stream.c) and the typed
 * record decoders and JSON rendering (lib/stream/record.c), full and meta-only. */
#include "fuzz.h"
#include "ss.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!devnull)
		devnull = fopen("/dev/null", "w");
	const char *p = fuzz_file("in.states", data, size);
	char err[SS_ERRMSG_MAX];
	for (int meta = 0; meta < 2; meta++) {
		ss_reader *r;
		const ss_record *rec;
		/* A small limit: the fuzzer's memory limit is not what is tested. */
		if (ss_reader_open(&r, p, 64u << 20, err))
			abort();
		for (int k = 0; k < 64; k++) {
			int rc = meta ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec);
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
