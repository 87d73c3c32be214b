/*
 * ss-tokenize — text, JSONL or archives in, a token stream out (GPT-NeoX
 * byte-level BPE, as HF tokenizers encodes); --decode turns a token stream
 * back into text, --ids prints ids as text. Spec of the output:
 * formats/tokens.md; manual: man/ss-tokenize.1.
 */
#include <archive.h>
#include <archive_entry.h>
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "ss.h"

#define PEEK 512
/* Default of --max-doc: 64 MiB, ~16 M tokens, far beyond any document a
 * state is encoded from, while its token record stays under the default
 * SS_MAX_RECORD. */
#define MAX_DOC_DEFAULT ((uint64_t)64 << 20)

static const char *usage =
	"ss-tokenize [--whole|--jsonl|--archive|--text] [--chunk N|--parts N] [--ids] [--max-doc SIZE]\n"
	"            [-t TOKENIZER] [-o FILE] [FILE...]\n"
	"       ss-tokenize --decode [--whole] [-t TOKENIZER] [-o FILE] [STREAM...]";

enum informat { IN_AUTO, IN_TEXT, IN_JSONL, IN_ARCHIVE };

static struct {
	enum informat format;
	int whole, ids, decode, no_text, level;
	long chunk, parts;
	uint64_t max_doc;
} opt = { .max_doc = MAX_DOC_DEFAULT };

static ss_tokenizer *tok;
static double t_begin;            /* cli_now() when tokenizing began */
static ss_writer *out_stream;     /* token stream output */
static FILE *out_text;            /* --ids / --decode output */
static const char *out_path = "-";
static uint64_t n_docs, n_records, n_tokens, n_bytes;
static double in_bytes, in_total; /* bytes of the input files read, their sum (0: unknown) */
static int n_named;               /* input files named on the command line */

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Tokenize documents with a HF tokenizer.json (byte-level BPE: the model's, or\n"
	       "GPT-NeoX-20B's) into a token stream (ss-tokens(5)). Input FILEs (stdin when none or\n"
	       "'-') are plain text (one document per line, line ending \\n removed, \\r kept,\n"
	       "empty lines skipped, id FILE:LINE; also for files named here: --whole for\n"
	       "one document per file), JSONL ({\"id\":..., \"text\":...} per line; files\n"
	       "ending in .jsonl, or whose first line is such an object: -v says so), or\n"
	       "archives (tar, zip, possibly compressed; one document per regular entry,\n"
	       "id = entry path), detected from the content. A directory is read\n"
	       "recursively, one document per regular file (id = its path; names that\n"
	       "begin with '.' skipped), in path order.\n"
	       "Empty lines and empty inputs give no record.\n\n"
	       "  --whole          each input (or archive entry) is one document, id FILE\n"
	       "  --text, --jsonl, --archive\n"
	       "                   force the input format instead of detecting it\n"
	       "  --chunk N        split documents into chunks of at most N tokens, ids\n"
	       "                   DOC#0, DOC#1, ...\n"
	       "  --parts N        split documents into N chunks of (nearly) equal token\n"
	       "                   counts (the first n %% N one token longer), ids DOC#0 ..\n"
	       "                   DOC#N-1; a document of fewer than N tokens gives one\n"
	       "                   chunk per token\n"
	       "  --ids            print token ids as text (one record per line, space-\n"
	       "                   separated) instead of writing a stream\n"
	       "  --no-text        do not store the document text in the records\n"
	       "  --max-doc SIZE   refuse a document (line, JSONL line, --whole file or\n"
	       "                   archive entry) over SIZE bytes (k/M/G; default 64M)\n"
	       "  --decode         read token streams and write their text: one record per\n"
	       "                   line (chunks of a document joined), or concatenated with\n"
	       "                   --whole\n"
	       "  -l, --level N    zstd level of the stream (1..19, default %d)\n",
	       usage, SS_ZSTD_LEVEL_DEFAULT);
	cli_common_help(19, CLI_HELP_TOKENIZER | CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	printf("\nThe output goes to stdout without -o; -v ends with a summary.\n"
	       "Invalid UTF-8 is an error naming the document and byte offset (exit 1).\n\n");
	cli_defaults_help();
	exit(0);
}

/* ----------------------------------------------------------------- output */

static void open_output(void)
{
	char err[SS_ERRMSG_MAX];
	int text = opt.ids || opt.decode;
	if (!text) {
		if (ss_writer_open(&out_stream, out_path, opt.level, err))
			cli_die("%s: %s", strcmp(out_path, "-") ? out_path : "standard output", err);
		return;
	}
	out_text = cli_out_open(out_path);
}

static void close_output(void)
{
	char err[SS_ERRMSG_MAX];
	if (out_stream) {
		ss_writer *w = out_stream;
		out_stream = NULL;
		if (ss_writer_close(w, err))
			cli_die("%s: %s", strcmp(out_path, "-") ? out_path : "standard output", err);
		return;
	}
	if (out_text) {
		FILE *f = out_text;
		out_text = NULL;
		cli_out_close(f);
	}
}

static void text_write(const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, out_text) != n)
		cli_die("%s: write error: %s", strcmp(out_path, "-") ? out_path : "standard output", strerror(errno));
}

/* One output record: a stream record or, with --ids, a line of ids. */
static void put_record(const char *src, const char *id, const int32_t *ids, size_t n,
                       char *text, size_t text_len)
{
	n_records++;
	if (opt.ids) {
		/* Hand-formatted: snprintf per id would dominate on big corpora. */
		char line[4096], *p = line;
		for (size_t i = 0; i < n; i++) {
			if (p - line > (ptrdiff_t)sizeof line - 16) {
				text_write(line, (size_t)(p - line));
				p = line;
			}
			if (i)
				*p++ = ' ';
			char dig[12], *d = dig + sizeof dig;
			int64_t v = ids[i];
			int neg = v < 0;
			uint64_t u = neg ? (uint64_t)-v : (uint64_t)v;
			do
				*--d = (char)('0' + u % 10);
			while (u /= 10);
			if (neg)
				*p++ = '-';
			memcpy(p, d, (size_t)(dig + sizeof dig - d));
			p += dig + sizeof dig - d;
		}
		*p++ = '\n';
		text_write(line, (size_t)(p - line));
		return;
	}
	ss_tokens t = {
		.id = (char *)id,
		.tokens = (int32_t *)ids,
		.n_tokens = (int64_t)n,
		.text = opt.no_text ? NULL : text,
		.text_len = opt.no_text ? 0 : text_len,
		.tokenizer = (char *)ss_tokenizer_fingerprint(tok),
	};
	int rc = ss_writer_put_tokens(out_stream, &t, NULL);
	if (rc) {
		ss_writer *w = out_stream;
		out_stream = NULL;
		cli_writer_die(w, out_path, rc);
	}
}

/* Tokenizes one document and writes its record(s). src names the input
 * for messages. */
static void put_document(const char *src, const char *id, const char *text, size_t len)
{
	char err[SS_ERRMSG_MAX];
	int32_t *ids;
	size_t n;
	if (ss_tokenizer_encode(tok, text, len, &ids, &n, err))
		cli_die("%s: document %s: %s", src, id, err);
	n_docs++;
	n_tokens += n;
	n_bytes += len;
	int want_text = !opt.ids && !opt.no_text;
	if (!opt.chunk && !opt.parts) {
		char *norm = NULL;
		size_t nlen = 0;
		if (want_text && ss_tokenizer_normalize(tok, text, len, &norm, &nlen, err))
			cli_die("%s: document %s: %s", src, id, err);
		put_record(src, id, ids, n, norm, nlen);
		free(norm);
	} else {
		size_t idlen = strlen(id);
		char *cid = malloc(idlen + 24);
		if (!cid)
			cli_die("out of memory");
		/* --chunk: fixed-size chunks; --parts: n_parts chunks whose sizes differ
		 * by at most one token (sizes base+1 first, then base). */
		size_t n_parts = opt.parts ? ((size_t)opt.parts < n ? (size_t)opt.parts : n)
					   : (n + (size_t)opt.chunk - 1) / (size_t)opt.chunk;
		if (n_parts == 0)
			n_parts = 1;
		size_t base = n / n_parts, extra = n % n_parts;
		size_t k = 0, off = 0;
		do {
			size_t m = opt.parts ? base + (k < extra)
					     : (n - off < (size_t)opt.chunk ? n - off : (size_t)opt.chunk);
			snprintf(cid, idlen + 24, "%s#%zu", id, k);
			char *dec = NULL;
			size_t dlen = 0;
			if (want_text && ss_tokenizer_decode(tok, ids + off, m, &dec, &dlen, err))
				cli_die("%s: document %s: %s", src, id, err);
			put_record(src, cid, ids + off, m, dec, dlen);
			free(dec);
			off += m;
			k++;
		} while (k < n_parts);
		free(cid);
	}
	free(ids);
	double el = cli_now() - t_begin;
	cli_progress_of(in_bytes, in_total, "%" PRIu64 " %s, %" PRIu64 " %s, %.1f MB/s", n_docs,
			cli_plural(n_docs, "document", "documents"), n_tokens, cli_plural(n_tokens, "token", "tokens"),
			el > 0 ? in_bytes / 1e6 / el : 0.0);
}

/* ------------------------------------------------------------------ input */

/* An input: a FILE (with its first bytes peeked for format detection) or
 * the data of a raw (compressed single-file) libarchive stream. */
struct src {
	const char *name;      /* for messages and ids: path as given, "stdin" */
	FILE *f;
	unsigned char *peek;   /* the first bytes, read ahead to detect the format */
	size_t plen, ppos, pcap;
	int is_stdin;
	struct archive *raw;   /* when set, data come from here */
	unsigned char *block;  /* libarchive read buffer */
};

/* Reads up to n bytes of s's data, past its peek buffer. */
static size_t src_fill(struct src *s, void *buf, size_t n)
{
	if (s->raw) {
		la_ssize_t r = archive_read_data(s->raw, buf, n);
		if (r < 0)
			cli_die("%s: %s", s->name, archive_error_string(s->raw));
		return (size_t)r;
	}
	size_t got = fread(buf, 1, n, s->f);
	if (ferror(s->f))
		cli_die("%s: read error: %s", s->name, strerror(errno));
	in_bytes += got;
	return got;
}

static size_t src_read(struct src *s, void *buf, size_t n)
{
	size_t got = 0;
	if (s->ppos < s->plen) {
		got = s->plen - s->ppos < n ? s->plen - s->ppos : n;
		memcpy(buf, s->peek + s->ppos, got);
		s->ppos += got;
	}
	while (got < n) {
		size_t r = src_fill(s, (char *)buf + got, n - got);
		if (r == 0)
			break;
		got += r;
	}
	return got;
}

/* Reads everything left in s (document `what`); *len set; NUL-terminated.
 * Dies past --max-doc bytes. */
static char *src_slurp(struct src *s, const char *what, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	for (;;) {
		if (!b)
			cli_die("out of memory");
		size_t r = src_read(s, b + n, cap - n - 1);
		n += r;
		if (r == 0)
			break;
		if (n > opt.max_doc)
			cli_die("%s: document %s: longer than the --max-doc limit of %" PRIu64 " bytes", s->name,
			        what, opt.max_doc);
		if (cap - n - 1 < (1 << 15)) {
			cap *= 2;
			char *nb = realloc(b, cap);
			if (!nb)
				free(b);
			b = nb;
		}
	}
	b[n] = 0;
	*len = n;
	return b;
}

struct lines {
	struct src *s;
	char *buf;
	size_t cap, start, end;
	int eof;
	uint64_t lineno;
};

static void line_too_long(const struct lines *L, uint64_t lineno) __attribute__((noreturn));
static void line_too_long(const struct lines *L, uint64_t lineno)
{
	cli_die("%s: line %" PRIu64 ": document longer than the --max-doc limit of %" PRIu64 " bytes", L->s->name,
	        lineno, opt.max_doc);
}

/* Next line without its \n (a final line without \n counts). Returns 0
 * at the end. The line is NUL-terminated in place. */
static int next_line(struct lines *L, char **line, size_t *len)
{
	size_t scan = L->start;
	for (;;) {
		char *nl = L->end > scan ? memchr(L->buf + scan, '\n', L->end - scan) : NULL;
		if (nl) {
			*nl = 0;
			*line = L->buf + L->start;
			*len = (size_t)(nl - *line);
			L->start = (size_t)(nl - L->buf) + 1;
			L->lineno++;
			if (*len > opt.max_doc)
				line_too_long(L, L->lineno);
			return 1;
		}
		if (L->eof) {
			if (L->start == L->end)
				return 0;
			L->buf[L->end] = 0;
			*line = L->buf + L->start;
			*len = L->end - L->start;
			L->start = L->end;
			L->lineno++;
			if (*len > opt.max_doc)
				line_too_long(L, L->lineno);
			return 1;
		}
		if (L->start > 0) {
			memmove(L->buf, L->buf + L->start, L->end - L->start);
			L->end -= L->start;
			L->start = 0;
		}
		scan = L->end;
		if (L->end - L->start > opt.max_doc)
			line_too_long(L, L->lineno + 1);
		if (L->cap - L->end < (1 << 15)) {
			L->cap = L->cap ? 2 * L->cap : 1 << 17;
			char *nb = realloc(L->buf, L->cap);
			if (!nb)
				cli_die("out of memory");
			L->buf = nb;
		}
		size_t r = src_read(L->s, L->buf + L->end, L->cap - L->end - 1);
		if (r == 0)
			L->eof = 1;
		L->end += r;
	}
}

static void read_text(struct src *s)
{
	if (opt.whole) {
		size_t len;
		char *b = src_slurp(s, s->name, &len);
		if (len)
			put_document(s->name, s->name, b, len);
		free(b);
		return;
	}
	struct lines L = { .s = s };
	char *line, id[4096];
	size_t len;
	uint64_t docs = 0;
	while (next_line(&L, &line, &len)) {
		if (!len)
			continue;
		snprintf(id, sizeof id, "%s:%" PRIu64, s->name, L.lineno);
		put_document(s->name, id, line, len);
		docs++;
	}
	free(L.buf);
	if (!s->is_stdin)
		cli_warn_line_docs(s->name, docs, n_named, "--whole makes each file one document");
}

/* Parses one JSONL document line {"id": string|number|null, "text": string}.
 * On success returns NULL with *o set (the caller deletes it), *text and
 * *text_len pointing into it, and *id a malloc'ed id (a string id whole,
 * an integral number as an integer, another number as %.17g; absent or
 * null: src:lineno). Otherwise returns why, one line; *o is NULL. */
static const char *jsonl_doc(const char *line, size_t len, const char *src, uint64_t lineno, cJSON **o,
                             char **id, const char **text, size_t *text_len)
{
	static char why[SS_ERRMSG_MAX];
	const char *end = NULL;
	*id = NULL;
	/* the tools' one JSON-lines rule, all keys allowed (a corpus's records carry metadata) */
	if (ss_jsonl_parse(line, len, NULL, o, why)) {
		cJSON *p = cJSON_ParseWithLengthOpts(line, len, &end, 0);
		if (!p)
			snprintf(why, sizeof why, "invalid JSON near column %td", end ? end - line + 1 : (ptrdiff_t)1);
		else if (!cJSON_IsObject(p))
			snprintf(why, sizeof why, "no \"text\" string");
		cJSON_Delete(p);
		return why;
	}
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(*o, "text");
	const cJSON *i = cJSON_GetObjectItemCaseSensitive(*o, "id");
	const char *bad = NULL;
	int rc = 0;
	int64_t x;
	if (!cJSON_IsObject(*o) || !cJSON_IsString(t))
		bad = "no \"text\" string";
	else if (cJSON_IsString(i))
		rc = (*id = strdup(i->valuestring)) ? 0 : -1;
	else if (cJSON_IsNumber(i) && !ss_json_int(i, INT64_MIN, INT64_MAX, &x)) /* exact: 2^53 + 1 too */
		rc = asprintf(id, "%lld", (long long)x);
	else if (cJSON_IsNumber(i))
		rc = asprintf(id, "%.17g", i->valuedouble);
	else if (!i || cJSON_IsNull(i))
		rc = asprintf(id, "%s:%" PRIu64, src, lineno);
	else
		bad = "\"id\" is neither a string nor a number";
	if (rc < 0)
		cli_die("out of memory");
	if (bad) {
		free(*id);
		*id = NULL;
		cJSON_Delete(*o);
		*o = NULL;
		return bad;
	}
	*text = t->valuestring;
	*text_len = strlen(t->valuestring);
	return NULL;
}

static void read_jsonl(struct src *s)
{
	struct lines L = { .s = s };
	char *line;
	size_t len;
	while (next_line(&L, &line, &len)) {
		if (strspn(line, " \t\r") == len)
			continue;
		cJSON *o;
		char *id;
		const char *text, *why;
		size_t text_len;
		if ((why = jsonl_doc(line, len, s->name, L.lineno, &o, &id, &text, &text_len)))
			cli_die("%s: line %" PRIu64 ": %s", s->name, L.lineno, why);
		put_document(s->name, id, text, text_len);
		free(id);
		cJSON_Delete(o);
	}
	free(L.buf);
}

/* Reads more of s into its peek buffer, up to `want` bytes in all. */
static void peek_more(struct src *s, size_t want)
{
	if (want > s->pcap) {
		size_t cap = s->pcap ? s->pcap : PEEK;
		while (cap < want)
			cap *= 2;
		unsigned char *p = realloc(s->peek, cap);
		if (!p)
			cli_die("out of memory");
		s->peek = p;
		s->pcap = cap;
	}
	while (s->plen < want) {
		size_t r = src_fill(s, s->peek + s->plen, want - s->plen);
		if (r == 0)
			break;
		s->plen += r;
	}
}

/* Whether s, of no known format, holds JSONL: its first non-blank byte is
 * '{' and its first non-blank line a JSON object with a "text" string (that
 * line is read ahead, up to --max-doc bytes). Returns 1 for JSONL; 0 for
 * text, with *braced set when the data began with '{' all the same. */
static int sniff_jsonl(struct src *s, int *braced)
{
	size_t i = 0;
	*braced = 0;
	for (;;) {
		while (i < s->plen && strchr(" \t\r\n", s->peek[i]))
			i++;
		if (i < s->plen || s->plen < s->pcap || s->plen > opt.max_doc)
			break;
		peek_more(s, 2 * s->pcap);
	}
	if (i >= s->plen || s->peek[i] != '{')
		return 0;
	*braced = 1;
	size_t scan = i;
	unsigned char *nl;
	while (!(nl = memchr(s->peek + scan, '\n', s->plen - scan))) {
		scan = s->plen;
		if (s->plen < s->pcap || s->plen - i > opt.max_doc)
			break;
		peek_more(s, 2 * s->pcap);
	}
	size_t end = nl ? (size_t)(nl - s->peek) : s->plen;
	cJSON *o;
	char *id;
	const char *text;
	size_t tlen;
	if (jsonl_doc((const char *)s->peek + i, end - i, s->name, 1, &o, &id, &text, &tlen))
		return 0;
	free(id);
	cJSON_Delete(o);
	return 1;
}

/* The format of s when neither named nor forced: JSONL when sniff_jsonl
 * says so (-v tells), else text (with a warning when it began with '{'). */
static enum informat text_or_jsonl(struct src *s)
{
	int braced;
	if (sniff_jsonl(s, &braced)) {
		if (cli_verbosity >= 2)
			cli_warn("%s: JSONL (its first line is a JSON object with a \"text\" string); "
				 "--text reads it as plain text", s->name);
		return IN_JSONL;
	}
	if (braced)
		cli_warn("%s: plain text, one document per line, although it begins with '{': its first "
			 "line is not a JSON object with a \"text\" string (--jsonl: read it as JSONL)", s->name);
	return IN_TEXT;
}

static void read_stream_as(struct src *s, enum informat f)
{
	if (f == IN_JSONL)
		read_jsonl(s);
	else
		read_text(s);
}

static la_ssize_t archive_cb(struct archive *a, void *data, const void **buf)
{
	struct src *s = data;
	*buf = s->block;
	return (la_ssize_t)src_read(s, s->block, 1 << 16);
}

static void read_archive(struct src *s, int allow_raw, enum informat raw_as)
{
	struct archive *a = archive_read_new();
	if (!a)
		cli_die("out of memory");
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_zip(a);
	archive_read_support_format_cpio(a);
	archive_read_support_format_7zip(a);
	if (allow_raw)
		archive_read_support_format_raw(a); /* a compressed single file */
	s->block = malloc(1 << 16);
	if (!s->block)
		cli_die("out of memory");
	if (archive_read_open(a, s, NULL, archive_cb, NULL) != ARCHIVE_OK)
		cli_die("%s: %s", s->name, archive_error_string(a));
	struct archive_entry *e;
	int rc;
	while ((rc = archive_read_next_header(a, &e)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
		if (archive_format(a) == ARCHIVE_FORMAT_RAW) {
			struct src inner = { .name = s->name, .raw = a, .is_stdin = s->is_stdin };
			enum informat as = raw_as;
			if (as == IN_TEXT && opt.format == IN_AUTO && !opt.whole) {
				peek_more(&inner, PEEK);
				as = text_or_jsonl(&inner);
			}
			read_stream_as(&inner, as);
			free(inner.peek);
			continue;
		}
		if (archive_entry_filetype(e) != AE_IFREG)
			continue;
		const char *path = archive_entry_pathname_utf8(e);
		if (!path)
			path = archive_entry_pathname(e);
		if (!path)
			cli_die("%s: an entry has no path", s->name);
		char *id = strdup(path);
		if (!id)
			cli_die("out of memory");
		if (archive_entry_size_is_set(e) && (uint64_t)archive_entry_size(e) > opt.max_doc)
			cli_die("%s: document %s: %" PRId64 " bytes, over the --max-doc limit of %" PRIu64 " bytes",
			        s->name, id, (int64_t)archive_entry_size(e), opt.max_doc);
		struct src inner = { .name = s->name, .raw = a };
		size_t len;
		char *data = src_slurp(&inner, id, &len);
		put_document(s->name, id, data, len);
		free(data);
		free(id);
	}
	if (rc != ARCHIVE_EOF)
		cli_die("%s: %s", s->name, archive_error_string(a));
	archive_read_free(a);
	free(s->block);
	s->block = NULL;
}

/* FILE.jsonl, also compressed (FILE.jsonl.gz, .bz2, .xz, .zst). */
static int jsonl_name(const char *s)
{
	static const char *const sufs[] = { ".jsonl", ".jsonl.gz", ".jsonl.bz2", ".jsonl.xz", ".jsonl.zst" };
	size_t n = strlen(s);
	for (size_t i = 0; i < sizeof sufs / sizeof *sufs; i++) {
		size_t m = strlen(sufs[i]);
		if (n >= m && !strcmp(s + n - m, sufs[i]))
			return 1;
	}
	return 0;
}

/* Archive or compressed data, by magic number. */
static int looks_archive(const unsigned char *p, size_t n)
{
	static const struct { const char *m; size_t len, at; } magic[] = {
		{ "\x1f\x8b", 2, 0 },                 /* gzip */
		{ "BZh", 3, 0 },                      /* bzip2 */
		{ "\xfd" "7zXZ\0", 6, 0 },            /* xz */
		{ "\x28\xb5\x2f\xfd", 4, 0 },         /* zstd */
		{ "PK\x03\x04", 4, 0 },               /* zip */
		{ "PK\x05\x06", 4, 0 },               /* empty zip */
		{ "7z\xbc\xaf\x27\x1c", 6, 0 },       /* 7z */
		{ "ustar", 5, 257 },                  /* tar (POSIX and GNU) */
	};
	for (size_t i = 0; i < sizeof magic / sizeof *magic; i++)
		if (n >= magic[i].at + magic[i].len && !memcmp(p + magic[i].at, magic[i].m, magic[i].len))
			return 1;
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory: every regular file under it (symbolic links to files
 * followed, to directories not; names beginning with '.' skipped), in byte
 * order of the paths, is one document, id the path as given joined with the
 * names below it. */
static void read_dir(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		cli_die("%s: %s", path, strerror(errno));
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	errno = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.') /* ., .., and hidden files (.git, .DS_Store), as globs skip them */
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			char **t = realloc(names, cap * sizeof *t);
			if (!t)
				cli_die("out of memory");
			names = t;
		}
		size_t pl = strlen(path);
		int slash = pl && path[pl - 1] == '/';
		if (asprintf(&names[n++], "%s%s%s", path, slash ? "" : "/", e->d_name) < 0)
			cli_die("out of memory");
	}
	if (errno)
		cli_die("%s: %s", path, strerror(errno));
	closedir(d);
	if (n)
		qsort(names, n, sizeof *names, cmp_name);
	for (size_t k = 0; k < n; k++) {
		struct stat st;
		if (lstat(names[k], &st))
			cli_die("%s: %s", names[k], strerror(errno));
		if (S_ISDIR(st.st_mode)) {
			read_dir(names[k]);
		} else if (S_ISREG(st.st_mode) || (S_ISLNK(st.st_mode) && !stat(names[k], &st) &&
						   S_ISREG(st.st_mode))) {
			if ((uint64_t)st.st_size > opt.max_doc)
				cli_die("%s: document %s: %" PRId64 " bytes, over the --max-doc limit of %" PRIu64
					" bytes", names[k], names[k], (int64_t)st.st_size, opt.max_doc);
			struct src s = { .name = names[k], .f = fopen(names[k], "rb") };
			if (!s.f)
				cli_die("%s: %s", names[k], strerror(errno));
			size_t len;
			char *b = src_slurp(&s, names[k], &len);
			fclose(s.f);
			if (len)
				put_document(names[k], names[k], b, len);
			free(b);
		}
		free(names[k]);
	}
	free(names);
}

static void encode_input(const char *path)
{
	struct stat st;
	if (strcmp(path, "-") && !stat(path, &st) && S_ISDIR(st.st_mode)) {
		read_dir(path);
		return;
	}
	struct src s = { .name = strcmp(path, "-") ? path : "stdin", .is_stdin = !strcmp(path, "-") };
	s.f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	if (!s.f)
		cli_die("%s: %s", path, strerror(errno));
	peek_more(&s, PEEK);
	enum informat f = opt.format;
	enum informat stream_as = IN_TEXT;
	if (f == IN_JSONL || (f == IN_AUTO && !opt.whole && jsonl_name(path)))
		stream_as = IN_JSONL;
	if (f == IN_AUTO && looks_archive(s.peek, s.plen)) {
		f = IN_ARCHIVE;
	} else if (f == IN_AUTO && stream_as == IN_TEXT && !opt.whole) {
		stream_as = text_or_jsonl(&s);
	}
	if (f == IN_AUTO)
		f = stream_as;
	if (f == IN_ARCHIVE)
		read_archive(&s, opt.format != IN_ARCHIVE, stream_as);
	else
		read_stream_as(&s, f);
	if (s.f != stdin)
		fclose(s.f);
	free(s.peek);
}

/* ----------------------------------------------------------------- decode */

/* True when id is "P#k" (k >= 1) and prev is "P#k-1": the next chunk of
 * the same document. */
static int continues(const char *prev, const char *id)
{
	const char *h = strrchr(id, '#');
	if (!prev || !h || !h[1] || (h[1] == '0' && h[2]))
		return 0;
	char *end;
	errno = 0;
	unsigned long long k = strtoull(h + 1, &end, 10);
	if (errno || *end || k == 0 || h[1] < '0' || h[1] > '9')
		return 0;
	size_t pl = (size_t)(h - id);
	char want[32];
	snprintf(want, sizeof want, "#%llu", k - 1);
	return !strncmp(prev, id, pl) && !strcmp(prev + pl, want);
}

static char *prev_id;   /* id of the last record decoded */
static int pending_nl;  /* a newline ends that record unless the next continues it */

static void decode_input(const char *path)
{
	char err[SS_ERRMSG_MAX];
	ss_reader *r;
	const ss_record *rec;
	if (ss_reader_open(&r, path, cli_max_record(), err))
		cli_die("%s: %s", path, err);
	const char *name = ss_reader_path(r);
	int rc;
	while ((rc = ss_reader_next(r, &rec)) == 1) {
		ss_tokens t;
		if (ss_record_tokens(rec, &t, err))
			cli_die("%s: record %" PRIu64 " (byte offset %" PRIu64 "): %s", name, ss_record_index(rec),
			        ss_record_offset(rec), err);
		if (t.tokenizer && strcmp(t.tokenizer, ss_tokenizer_fingerprint(tok)))
			cli_die("%s: record %" PRIu64 " (%s): made by tokenizer %s, not %s (see --tokenizer)", name,
			        ss_record_index(rec), t.id, t.tokenizer, ss_tokenizer_fingerprint(tok));
		char *bytes;
		size_t len;
		if (ss_tokenizer_decode(tok, t.tokens, (size_t)t.n_tokens, &bytes, &len, err))
			cli_die("%s: record %" PRIu64 " (%s): %s", name, ss_record_index(rec), t.id, err);
		if (pending_nl && !continues(prev_id, t.id))
			text_write("\n", 1);
		text_write(bytes, len);
		pending_nl = !opt.whole;
		free(bytes);
		free(prev_id);
		prev_id = t.id;
		t.id = NULL;
		n_records++;
		n_tokens += (uint64_t)t.n_tokens;
		n_bytes += len;
		ss_tokens_free(&t);
		cli_progress("%" PRIu64 " %s, %" PRIu64 " tokens", n_records,
			     cli_plural(n_records, "record", "records"), n_tokens);
	}
	if (rc < 0)
		cli_die("%s: %s", name, ss_reader_error(r));
	ss_reader_close(r);
}

static void decode_finish(void)
{
	if (pending_nl)
		text_write("\n", 1);
	free(prev_id);
	prev_id = NULL;
}

/* Reads the options into opt and out_path; returns --tokenizer's path
 * (NULL: the defaults'). Exits 2 on a usage error. */
static const char *parse_args(int argc, char **argv)
{
	const char *tpath = NULL;
	enum { O_WHOLE = 256, O_TEXT, O_JSONL, O_ARCHIVE, O_CHUNK, O_PARTS, O_IDS, O_DECODE, O_NOTEXT, O_MAXDOC };
	static const struct option opts[] = {
		{ "whole", no_argument, 0, O_WHOLE },     { "text", no_argument, 0, O_TEXT },
		{ "jsonl", no_argument, 0, O_JSONL },     { "archive", no_argument, 0, O_ARCHIVE },
		{ "chunk", required_argument, 0, O_CHUNK }, { "parts", required_argument, 0, O_PARTS },
		{ "ids", no_argument, 0, O_IDS },
		{ "decode", no_argument, 0, O_DECODE },   { "no-text", no_argument, 0, O_NOTEXT },
		{ "max-doc", required_argument, 0, O_MAXDOC },
		{ "tokenizer", required_argument, 0, 't' }, { "level", required_argument, 0, 'l' },
		{ 0, 0, 0, 0 },
	};
	const cli_options co = { "t:l:", opts, usage, help, &out_path, NULL };
	int c, nformat = 0;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case O_WHOLE: opt.whole = 1; break;
		case O_TEXT: opt.format = IN_TEXT; nformat++; break;
		case O_JSONL: opt.format = IN_JSONL; nformat++; break;
		case O_ARCHIVE: opt.format = IN_ARCHIVE; nformat++; break;
		case O_CHUNK: opt.chunk = cli_long("--chunk", optarg, 1, INT32_MAX, usage); break;
		case O_PARTS: opt.parts = cli_long("--parts", optarg, 1, INT32_MAX, usage); break;
		case O_IDS: opt.ids = 1; break;
		case O_DECODE: opt.decode = 1; break;
		case O_NOTEXT: opt.no_text = 1; break;
		case O_MAXDOC:
			if (!(opt.max_doc = cli_size(optarg)))
				cli_usage(usage, "--max-doc: '%s' is not a size (bytes, with optional k/M/G)", optarg);
			break;
		case 't': tpath = optarg; break;
		case 'l': opt.level = (int)cli_long("--level", optarg, 1, 19, usage); break;
		}
	}
	if (nformat > 1)
		cli_usage(usage, "--text, --jsonl and --archive exclude each other");
	if (opt.decode && (opt.ids || opt.chunk || opt.parts || nformat || opt.no_text))
		cli_usage(usage, "--decode takes no --ids, --chunk, --parts, --no-text or input format option");
	if (opt.chunk && opt.parts)
		cli_usage(usage, "--chunk and --parts exclude each other");
	if (opt.whole && opt.format == IN_JSONL)
		cli_usage(usage, "--whole and --jsonl exclude each other");
	return tpath;
}

/* -v's summary line, the clock started at t0. */
static void summary(double t0)
{
	double elapsed_s = cli_now() - t0;
	fprintf(stderr, "ss-tokenize: %" PRIu64 " %s, %" PRIu64 " %s, %" PRIu64
	        " %s, %.1f MB of text in %.2f s (%.1f MB/s)\n",
	        n_docs, cli_plural(n_docs, "document", "documents"), n_records,
	        cli_plural(n_records, "record", "records"), n_tokens, cli_plural(n_tokens, "token", "tokens"), n_bytes / 1e6, elapsed_s,
	        elapsed_s > 0 ? n_bytes / 1e6 / elapsed_s : 0.0);
}

int main(int argc, char **argv)
{
	cli_init("ss-tokenize");
	const char *tpath = parse_args(argc, argv);
	char *stdin_only[] = { "-" };
	char **files = optind < argc ? argv + optind : stdin_only;
	int nfiles = optind < argc ? argc - optind : 1;
	for (int i = 0; i < nfiles; i++)
		cli_out_not_input(out_path, files[i]);
	cli_out_not_input(out_path, tpath);

	tok = cli_tokenizer(tpath, cli_model_dir(NULL, NULL));

	open_output();
	double t0 = cli_now();
	n_named = optind < argc ? argc - optind : 0;
	in_total = cli_inputs_size(files, nfiles);
	t_begin = t0;
	cli_progress_begin();
	for (int i = 0; i < nfiles; i++) {
		if (opt.decode)
			decode_input(files[i]);
		else
			encode_input(files[i]);
	}
	if (opt.decode)
		decode_finish();
	close_output();
	cli_progress_end();
	if (cli_verbosity >= 2)
		summary(t0);
	ss_tokenizer_free(tok);
	return 0;
}
