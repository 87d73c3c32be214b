/* test_escape.c — the one escaper of the tools' JSON and TSV output (ss_escape,
 * ss_json_str; lib/stream/jsonl.c): each mode on the characters that could forge a
 * line, break a JSON string or reach a terminal (C0, DEL, C1), on UTF-8 that
 * RFC 3629 refuses (overlong, surrogate, past U+10FFFF, truncated), and on
 * valid text, which passes unchanged. The expected strings are written out by
 * hand from RFC 8259 §7 and the mode's rule in ss_stream.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ss.h"

/* s[0..n) through mode, as a string (malloc'ed). */
static char *esc(const char *s, size_t n, int mode)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	if (mode < 0)
		ss_json_str(f, s, n);
	else
		ss_escape(f, s, n, (ss_esc_mode)mode);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static void test_modes(void **st)
{
	(void)st;
	static const struct {
		const char *in;
		size_t n; /* 0: strlen */
		const char *json, *plain, *layout;
	} c[] = {
		{ "plain text", 0, "plain text", "plain text", "plain text" },
		{ "a\"b\\c", 0, "a\\\"b\\\\c", "a\"b\\\\c", "a\"b\\c" },
		{ "t\tn\nr\r", 0, "t\\tn\\nr\\r", "t\\tn\\nr\\r", "t\tn\nr\\r" },
		{ "esc\x1b[2J", 0, "esc\\u001b[2J", "esc\\x1b[2J", "esc\\x1b[2J" },
		{ "del\x7f", 0, "del\\u007f", "del\\x7f", "del\\x7f" },
		{ "c1\xc2\x85\xc2\x9b", 0, "c1\\u0085\\u009b", "c1\\xc2\\x85\\xc2\\x9b", "c1\\xc2\\x85\\xc2\\x9b" },
		{ "nbsp\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 0, "nbsp\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
		  "nbsp\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "nbsp\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" },
		{ "over\xc0\xaf", 0, "over\xef\xbf\xbd\xef\xbf\xbd", "over\\xc0\\xaf", "over\\xc0\\xaf" },
		{ "sur\xed\xa0\x80", 0, "sur\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", "sur\\xed\\xa0\\x80", "sur\\xed\\xa0\\x80" },
		{ "big\xf4\x90\x80\x80", 0, "big\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
		  "big\\xf4\\x90\\x80\\x80", "big\\xf4\\x90\\x80\\x80" },
		{ "cut\xe2\x82", 0, "cut\xef\xbf\xbd\xef\xbf\xbd", "cut\\xe2\\x82", "cut\\xe2\\x82" },
		{ "nul\0x", 5, "nul\\u0000x", "nul\\x00x", "nul\\x00x" },
	};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		size_t n = c[i].n ? c[i].n : strlen(c[i].in);
		const char *want[] = { c[i].json, c[i].plain, c[i].layout };
		for (int m = SS_ESC_JSON; m <= SS_ESC_LAYOUT; m++) {
			char *got = esc(c[i].in, n, m);
			if (strcmp(got, want[m]))
				fail_msg("case %zu mode %d: got \"%s\", want \"%s\"", i, m, got, want[m]);
			free(got);
		}
	}
	char *q = esc("a\"\x7f", 3, -1);
	assert_string_equal(q, "\"a\\\"\\u007f\"");
	free(q);
	q = esc("abc", (size_t)-1, SS_ESC_JSON); /* (size_t)-1: strlen */
	assert_string_equal(q, "abc");
	free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_modes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
