/*
 * model_cli.h — what the model-running tools (ss-encode, ss-decode,
 * ss-score) share: loading the model (found by defaults.h), checking a state
 * against it, reading states, parsing id lists. Every function
 * here reports through cli.h and exits on failure: callers get valid results
 * or never return.
 */
#ifndef SS_MODEL_CLI_H
#define SS_MODEL_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "ss.h"

/* Loads the model at dir with SS_MODEL_* flags, its weight matrices in
 * --weights-dtype WTYPE ("f32", "bf16", "f16"; NULL or "auto": the
 * checkpoint's dtype); a bad WTYPE is a usage error (exit 2), a failed load
 * "prog: <loader message>", exit 1. */
ss_model *mcli_load_model(const char *dir, unsigned flags, const char *weights_dtype,
			  const char *usage);

/* Dies (exit 1) unless state s, read from `file` record `index`, was made by
 * model m (same fingerprint and dims). The message names the file, the
 * record and both fingerprints. */
void mcli_check_state(const ss_model *m, const char *model_dir, const ss_state *s,
		      const char *file, uint64_t index);

/* The device of --device WANT ("cpu", "cuda", "cuda:N", "auto"; NULL =
 * "auto": a GPU when the CUDA plugin finds one, else the CPU, silently).
 * A bad name is a usage error (exit 2); "cuda" without a plugin or a GPU
 * dies with one line (exit 1). -v names the device on stderr. */
ss_device *mcli_device(const char *want, const char *usage);
/* The forward context of model m on dev; dies (exit 1) naming model_dir. */
ss_forward_ctx *mcli_forward_ctx(const ss_model *m, const char *model_dir, ss_device *dev,
				 int threads);

/* Parses "1,2,3" (commas and/or blanks) into a malloc'd id array (*n may be
 * 0, then NULL is returned). Usage error naming `opt` on anything else. */
int32_t *mcli_parse_ids(const char *opt, const char *s, size_t *n, const char *usage);

/* Reads a whole file ("-" = stdin) into a malloc'd NUL-terminated buffer;
 * dies naming the file on failure. */
char *mcli_read_file(const char *path, size_t *len);
/* The same, of at most max bytes: past them it dies "PATH: larger than
 * 64 MiB, the limit for WHAT" (a regular file before it is read, a pipe
 * after max + 1 bytes: memory stays within about max). */
char *mcli_read_file_max(const char *path, uint64_t max, const char *what, size_t *len);

/* The bound on a text input held in memory whole: a --prompt-file (one
 * prompt is one document: ss-tokenize's --max-doc default), and all of a
 * --prompts or --pairs file (every prompt or pair is kept, for every state). */
#define MCLI_MAX_TEXT (UINT64_C(64) << 20)

/* Ids in [0, n) that generation and NLL may use: the model's vocab_size
 * capped at vocab_padded. */
int32_t mcli_vocab(const ss_model *m);
/* Ids in [0, n) that decoding may produce (ss-decode's sampler, the greedy
 * answers ss-eval recall compares): mcli_vocab capped at the tokenizer's
 * vocabulary, so that every id can be printed (tok NULL: no cap). */
int32_t mcli_gen_vocab(const ss_model *m, const ss_tokenizer *tok);

/* A source of starting states for ss-decode / ss-score: a state stream
 * (`path`, "-" = stdin), or none (path NULL: one zero state). */
typedef struct {
	const char *path;
	ss_reader *r;
	int done;
	int implicit; /* stdin by default, not named (said when it is empty) */
	uint64_t count;
} mcli_states;

/* Opens the source; path NULL means "no stream: a single zero state".
 * implicit: the stream is stdin by default rather than by --state. An empty
 * stream is an error either way (the message points at --no-state). */
void mcli_states_open(mcli_states *src, const char *path, int implicit);
/* Next starting state into *s (freed by the caller with ss_state_free),
 * checked against m: from the stream, or the zero state once when path is
 * NULL (id "zero"). Returns 1, or 0 at the end; dies on a bad record. */
int mcli_states_next(mcli_states *src, const ss_model *m, const char *model_dir, ss_state *s);
void mcli_states_close(mcli_states *src);


/* A JSON-lines input of objects, one a line (ss-score --pairs, ss-decode
 * --prompts, ss-eval recall --qa): libss's ss_jsonl_reader (lines of at
 * most 16 MiB, blank lines skipped), dying with its messages. */
typedef struct {
	ss_jsonl_reader *r;
	const char *path;
	const char *where; /* "PATH: line N" of the last object read (the reader's: valid until
			    * the next mcli_jsonl_next) */
	long lineno;       /* N */
} mcli_jsonl;

/* Opens path ("-" = stdin); dies naming it when it cannot. */
void mcli_jsonl_open(mcli_jsonl *r, const char *path);
/* Bounds the whole input to max bytes: past them mcli_jsonl_next (or this
 * call, for a regular file) dies "PATH: larger than 64 MiB, the limit for
 * WHAT". */
void mcli_jsonl_limit(mcli_jsonl *r, uint64_t max, const char *what);
/* Room for element n of array p (elem bytes each, *cap of them allocated):
 * returns p, or p reallocated to twice *cap (16 at first) when n == *cap;
 * dies when out of memory. */
void *mcli_grow(void *p, size_t n, size_t *cap, size_t elem);
/* The next line's object (the caller cJSON_Delete()s it), or NULL at the
 * end, under the one JSON-lines rule (ss_jsonl_parse: keys, NULL-terminated,
 * are the only keys allowed; numbers exact with ss_json_int). Dies "PATH:
 * line N: not a JSON object" (then ": expected <expected>" unless expected
 * is NULL), "PATH: line N: a NUL character (\u0000) in a string", "PATH:
 * line N: unknown key ...", on a longer line or a read error. */
struct cJSON *mcli_jsonl_next(mcli_jsonl *r, const char *expected, const char *const *keys);
/* The object's "id" as a malloc'd string: a string as is, an integer
 * exactly (ss_json_int), another number in %.17g, absent: "PATH:LINE".
 * Dies on another type. */
char *mcli_jsonl_id(const mcli_jsonl *r, const struct cJSON *obj);
/* obj's `key_tokens` as a malloc'd array of *n token ids (*n may be 0), or
 * NULL when obj has no such key. Dies "WHERE: \"KEY\" must be an array of
 * token ids" on anything else (range checks are the caller's). */
int32_t *mcli_json_token_ids(const struct cJSON *obj, const char *key_tokens, size_t *n,
			     const char *where);
void mcli_jsonl_close(mcli_jsonl *r);


#endif /* SS_MODEL_CLI_H */
