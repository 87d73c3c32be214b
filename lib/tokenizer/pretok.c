/*
 * pretok.c — the pre-tokenizer: splits normalized text with the GPT-2 split
 * regex (PCRE2, JIT where available) and hands each pre-token to BPE.
 */
#include "internal.h"

/*
 * The GPT-2 split regex as HF tokenizers runs it through Oniguruma, where \s
 * is exactly 9-13, U+0085 and the Z categories. PCRE2's UCP \s also takes
 * U+180E, so the class is spelled out.
 * ref: tokenizers pre_tokenizers/byte_level.rs; GPT-2 encoder.py `pat`.
 */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
static const char split_regex[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+"
	"|[" WS "]+(?![^" WS "])|[" WS "]+";

/* Pre-tokenizes normalized text (no added tokens left in it) and merges
 * each pre-token. s is valid UTF-8. */
int tok_pretokenize(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
{
	size_t pos = 0;
	while (pos < n) {
		int rc = t->jit
			? pcre2_jit_match(t->re, (PCRE2_SPTR)s, n, pos, 0, t->md, t->mctx)
			: pcre2_match(t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, t->md, t->mctx);
		size_t b, e;
		if (rc == PCRE2_ERROR_NOMATCH) {
			b = e = n;
		} else if (rc < 0) {
			return SS_ERR_INVALID; /* e.g. JIT stack exhausted; reported as a regex failure */
		} else {
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
			b = ov[0];
			e = ov[1];
		}
		/* Every code point is in one of the regex's classes, so gaps and
		 * empty matches do not occur; they would still be kept, as HF's
		 * Isolated split keeps unmatched text. */
		if (b > pos && (rc = tok_bpe_word(t, s + pos, b - pos, out)))
			return rc;
		if (e <= b) {
			if (b >= n)
				break;
			e = b + 1;
			while (e < n && ((unsigned char)s[e] & 0xC0) == 0x80)
				e++;
		}
		if ((rc = tok_bpe_word(t, s + b, e - b, out)))
			return rc;
		pos = e;
	}
	return 0;
}

int tok_regex_compile(ss_tokenizer *t, char *errmsg)
{
	int err;
	PCRE2_SIZE eoff;
	t->re = pcre2_compile((PCRE2_SPTR)split_regex, PCRE2_ZERO_TERMINATED,
	                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &eoff, NULL);
	if (!t->re) {
		PCRE2_UCHAR msg[128];
		pcre2_get_error_message(err, msg, sizeof msg);
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "PCRE2 cannot compile the split regex: %s", (char *)msg);
	}
	/* Without JIT support (some platforms) the interpreter runs the same
	 * pattern; inputs are validated UTF-8 either way. */
	t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
	t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
	t->mctx = pcre2_match_context_create(NULL);
	if (!t->md || !t->mctx)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	if (t->jit) {
		t->jstack = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
		if (!t->jstack)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		pcre2_jit_stack_assign(t->mctx, NULL, t->jstack);
	}
	return 0;
}
