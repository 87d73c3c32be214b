/*
 * ss_tokenizer.h — byte-level BPE read from a HF tokenizer.json (part of
 * libss; include "ss.h", not this file).
 * Public: part of libss's interface (ss.h says what that means).
 *
 * Encoding follows HF tokenizers for a tokenizer.json with model type BPE,
 * an NFC (or no) normalizer and a ByteLevel pre-tokenizer, as GPT-NeoX-20B
 * (the Mamba / Mamba-2 / Pythia tokenizer) has:
 *   1. added tokens with "normalized": false (<|endoftext|>, <|padding|>)
 *      are split out of the raw text, leftmost-longest;
 *   2. each remaining piece is normalized (NFC, utf8proc);
 *   3. added tokens with "normalized": true (GPT-NeoX: runs of 2..24 spaces,
 *      ids 50254..50276) are split out of the normalized piece,
 *      leftmost-longest;
 *   4. the rest is pre-tokenized by the GPT-2 split regex (PCRE2, UTF+UCP,
 *      JIT, whitespace classes spelled as Oniguruma's \s), and each
 *      pre-token's bytes are merged by rank.
 * No BOS/EOS is added (HF encode(add_special_tokens=False)).
 * ref: HF tokenizers AddedVocabulary::extract_and_normalize,
 *      pre_tokenizers/byte_level.rs, models/bpe/word.rs merge_all();
 *      GPT-2 encoder.py bytes_to_unicode() and bpe().
 *
 * A tokenizer holds a merge cache and scratch buffers that encoding mutates:
 * use one ss_tokenizer per thread. Decoding does not mutate it.
 */
#ifndef SS_TOKENIZER_H
#define SS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_tokenizer ss_tokenizer;

/* Loads a tokenizer.json. Supported: model.type "BPE" (no dropout, no
 * byte_fallback, no subword prefix/suffix), normalizer null or NFC,
 * pre_tokenizer ByteLevel (add_prefix_space false, use_regex true), added
 * tokens without lstrip/rstrip/single_word; merges as "a b" strings or
 * ["a", "b"] pairs. Anything else is refused, never approximated.
 * path may also be a GGUF file: its tokenizer.ggml.* metadata is read as the
 * tokenizer.json it was converted from (lib/tokenizer/gguf.c says what is
 * accepted), and the fingerprint hashes that metadata.
 * Returns 0 and sets *out (free with ss_tokenizer_free), or SS_ERR_IO
 * (cannot read), SS_ERR_FORMAT (bad JSON, merge naming a missing token),
 * SS_ERR_UNSUPPORTED (a component above not handled), SS_ERR_NOMEM; errmsg
 * (SS_ERRMSG_MAX bytes, may be NULL) says which. */
int ss_tokenizer_load(ss_tokenizer **out, const char *path, char *errmsg);

/* Frees the tokenizer; NULL is fine. */
void ss_tokenizer_free(ss_tokenizer *tok);

/* Fingerprint of the tokenizer: 16 lower-case hex digits of the 64-bit
 * FNV-1a hash of the tokenizer.json bytes (of a GGUF: of its tokenizer
 * metadata, lib/tokenizer/gguf.c). Stored in token records so that
 * decoding can refuse ids from another vocabulary. Owned by tok. */
const char *ss_tokenizer_fingerprint(const ss_tokenizer *tok);

/* Number of ids: 1 + the largest id in vocab or added_tokens (GPT-NeoX:
 * 50277). Ids below it may still be unassigned (decode refuses those). */
int32_t ss_tokenizer_n_vocab(const ss_tokenizer *tok);

/* Pre-tokens (regex pieces) longer than this many bytes are merged in
 * pieces of at most this size, cut before a character, which bounds the
 * encoder's working memory (HF merges them whole: the ids can differ only
 * for such pre-tokens, which no natural text has). */
#define SS_TOKENIZER_MAX_PRETOKEN ((size_t)64 << 10)

/* Encodes `len` bytes of UTF-8 `text` (NUL bytes allowed) to token ids.
 * ids: *ids = malloc'd [*n_ids] int32 (caller frees; NULL when *n_ids is 0).
 * Returns 0, or SS_ERR_UTF8 with errmsg "invalid UTF-8 at byte offset N"
 * (N counts bytes of `text` from 0; nothing is tokenized), SS_ERR_NOMEM.
 * Not thread-safe on one tok (see above).
 * ref: HF tokenizers TokenizerImpl::encode (steps 1-4 above); GPT-2
 *      encoder.py encode(). */
int ss_tokenizer_encode(ss_tokenizer *tok, const char *text, size_t len,
                        int32_t **ids, size_t *n_ids, char *errmsg);

/* Decodes ids to bytes: the concatenation of each id's bytes (vocab tokens
 * through the byte-level map, added and special tokens as their content).
 * *bytes = malloc'd [*len + 1] with a NUL after the last byte (caller
 * frees). The bytes need not be valid UTF-8 when the ids cut a character.
 * Returns 0, or SS_ERR_INVALID with errmsg naming the first unknown id,
 * SS_ERR_NOMEM. ref: HF decoders/byte_level.rs. */
int ss_tokenizer_decode(const ss_tokenizer *tok, const int32_t *ids, size_t n_ids,
                        char **bytes, size_t *len, char *errmsg);

/* The bytes of one id, borrowed from tok (not NUL-terminated); *len set.
 * NULL for an id that is out of range or unassigned. */
const char *ss_tokenizer_id_bytes(const ss_tokenizer *tok, int32_t id, size_t *len);

/* Applies the tokenizer's normalizer (NFC or none) to the whole text.
 * *out = malloc'd [*out_len + 1], NUL-terminated (caller frees).
 * Returns 0, SS_ERR_UTF8 (errmsg gives the byte offset), SS_ERR_NOMEM.
 * decode(encode(x)) equals this for any x in which no special token
 * (<|endoftext|>) is followed by a combining mark.
 * ref: UAX #15 (NFC); HF tokenizers normalizers/unicode.rs NFC. */
int ss_tokenizer_normalize(const ss_tokenizer *tok, const char *text, size_t len,
                           char **out, size_t *out_len, char *errmsg);

/* Checks that s[0..len) is well-formed UTF-8 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF; NUL allowed). Returns 0, or
 * SS_ERR_UTF8 and sets *bad_offset (may be NULL) to the offset of the first
 * byte of the first ill-formed sequence.
 * ref: Unicode §3.9 Table 3-7 (well-formed UTF-8 byte sequences). */
int ss_utf8_validate(const char *s, size_t len, size_t *bad_offset);

#ifdef __cplusplus
}
#endif
#endif /* SS_TOKENIZER_H */
