/*
 * ss-cat — print the records of ss streams (tokens or states) as JSON lines,
 * for people and scripts. Large arrays are summarised unless --full. Also
 * the exchange with llama.cpp: a state record exported as llama.cpp's
 * sequence state (--export) and such a blob imported as a record (--import),
 * ss_llama_seq_* in ss_stream.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ss.h"

static const char *usage =
	"ss-cat [--full] [--meta] [--stats] [--at OFFSET] [-n N] [FILE...]\n"
	"       ss-cat --export llama-seq|llama-seq-file [--seq-id N] [--at OFFSET] [-o OUT] [FILE]\n"
	"       ss-cat --import llama-seq --like STATES [--at OFFSET] [--id ID] [--state-dtype T] [-o OUT] BLOB";

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Print each record of the given ss streams (token or state streams; stdin\n"
	       "when no FILE or '-') as one line of JSON, with its byte \"offset\".\n\n"
	       "  --full         print arrays (tokens, logdecay, conv, ssm, weights) in full\n"
	       "                 instead of {dtype, shape, min, max, mean, head}\n"
	       "  --meta         decode only the metadata of state records (fast: skips\n"
	       "                 conv and ssm without decompressing them)\n"
	       "  --stats        instead of the records, one line per format and dtype:\n"
	       "                 records, bytes stored (decompressed) and compressed, in\n"
	       "                 all and per record; then a line of totals\n"
	       "  --at OFFSET    print only the record at byte OFFSET (regular files)\n"
	       "  -n N           stop after N records per file\n"
	       "  --export F     write the one state record read (pick it with --at) as\n"
	       "                 llama.cpp's sequence state: llama-seq is the blob of\n"
	       "                 llama_state_seq_get_data/set_data, llama-seq-file the file\n"
	       "                 of llama_state_seq_save_file/load_file (no prompt tokens);\n"
	       "                 f32 rows whatever the record's dtype, pos = n_tokens - 1\n"
	       "  --seq-id N     the blob's sequence id (default 0)\n"
	       "  --import F     read BLOB (llama-seq: either variant) as a state record of\n"
	       "                 the model of --like's record (at --at, else its first):\n"
	       "                 its fingerprint, dims, id and logdecay, which llama.cpp's\n"
	       "                 blob lacks; n_tokens = pos + 1. Decays belong to the\n"
	       "                 document: import what llama.cpp computed from --like's\n"
	       "                 document, or encode the document here\n"
	       "  --like STATES  the template record of --import\n"
	       "  --id ID        the imported record's id (default: --like's)\n"
	       "  --state-dtype T  its storage dtype: f32 (default), f16, bf16, q8, q4\n"
	       "\n", usage);
	cli_common_help(17, CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	printf("\n-o applies to --export and --import (default stdout).\n"
	       "Environment: SS_MAX_RECORD limits one record's decompressed size.\n");
	exit(0);
}

/* --stats: records and bytes of one (format, dtype) group. */
typedef struct {
	char format[16], dtype[8];
	uint64_t records, stored, compressed;
} group_t;

static void print_group(const group_t *g)
{
	if (g->format[0])
		printf("{\"format\":\"%s\",\"dtype\":\"%s\",", g->format, g->dtype);
	else
		printf("{\"total\":true,");
	printf("\"records\":%llu,\"stored_bytes\":%llu,\"compressed_bytes\":%llu,"
	       "\"stored_per_record\":%.1f,\"compressed_per_record\":%.1f}\n",
	       (unsigned long long)g->records, (unsigned long long)g->stored, (unsigned long long)g->compressed,
	       g->records ? (double)g->stored / (double)g->records : 0.0,
	       g->records ? (double)g->compressed / (double)g->records : 0.0);
}

/* Adds rec (record n of file) to its group in g[0..*n_g) (at most max). */
static void add_stats(group_t *g, int *n_g, int max, const ss_record *rec, const char *file, long long n)
{
	const char *fmt = ss_record_format(rec), *dt = "i32";
	ss_state m;
	char err[SS_ERRMSG_MAX];
	int states = !strcmp(fmt, SS_FORMAT_STATES);
	if (states) {
		if (ss_record_state_meta(rec, &m, err))
			cli_die("%s: record %lld (byte offset %llu): %s", file, n,
				(unsigned long long)ss_record_offset(rec), err);
		dt = ss_dtype_name(m.dtype);
		ss_state_free(&m);
	}
	int i = 0;
	while (i < *n_g && (strcmp(g[i].format, fmt) || strcmp(g[i].dtype, dt)))
		i++;
	if (i == *n_g) {
		if (i == max) /* formats x dtypes are fewer: a new one is a bug */
			cli_die("%s: too many kinds of record", file);
		snprintf(g[i].format, sizeof g[i].format, "%s", fmt);
		snprintf(g[i].dtype, sizeof g[i].dtype, "%s", dt);
		(*n_g)++;
	}
	g[i].records++;
	g[i].stored += ss_record_content_size(rec);
	g[i].compressed += ss_record_length(rec);
}

/* Opens file and reads its record at `at` (its first when at < 0) whole. */
static const ss_record *read_one(ss_reader **r, const char *file, long long at)
{
	char err[SS_ERRMSG_MAX];
	const ss_record *rec;
	int rc;
	if (ss_reader_open(r, file, cli_max_record(), err))
		cli_die("%s: %s", file, err);
	if (at >= 0 && ss_reader_seek(*r, (uint64_t)at) != 0)
		cli_die("%s: %s", file, ss_reader_error(*r));
	if ((rc = ss_reader_next(*r, &rec)) < 0)
		cli_die("%s: %s", file, ss_reader_error(*r));
	if (rc == 0)
		cli_die(at >= 0 ? "%s: no record at byte offset %lld" : "%s: no record", file, at);
	return rec;
}

/* Decodes rec of file as a state, or dies naming the record. */
static void state_of(const ss_record *rec, const char *file, ss_state *s)
{
	char err[SS_ERRMSG_MAX];
	if (strcmp(ss_record_format(rec), SS_FORMAT_STATES))
		cli_die("%s: record at byte offset %llu is a %s record, not a state", file,
			(unsigned long long)ss_record_offset(rec), ss_record_format(rec));
	if (ss_record_state(rec, s, err))
		cli_die("%s: record at byte offset %llu: %s", file, (unsigned long long)ss_record_offset(rec), err);
}

/* --export: the one state record of file (at `at`) as llama.cpp's blob. */
static void export_seq(const char *file, long long at, int as_file, long seq_id, const char *out_path)
{
	ss_reader *r;
	ss_state s;
	char err[SS_ERRMSG_MAX];
	cli_out_not_input(out_path, file);
	const ss_record *rec = read_one(&r, file, at);
	state_of(rec, file, &s);
	if (at < 0) { /* one record, or say how to pick one */
		const ss_record *next;
		int rc = ss_reader_next_meta(r, &next);
		if (rc != 0)
			cli_die(rc < 0 ? "%s: %s" : "%s: several records; --export writes one: pick it with --at OFFSET",
				file, rc < 0 ? ss_reader_error(r) : "");
	}
	size_t n = ss_llama_seq_size(&s.dims, as_file, 0);
	void *buf = malloc(n);
	if (!buf)
		cli_die("out of memory");
	if (ss_llama_seq_write(&s, (int32_t)seq_id, as_file, NULL, 0, buf, n, err))
		cli_die("%s: record \"%s\": %s", file, s.id, err);
	FILE *f = cli_out_open(out_path);
	fwrite(buf, 1, n, f);
	cli_out_close(f);
	free(buf);
	ss_state_free(&s);
	ss_reader_close(r);
}

/* --import: BLOB as a state record of --like's model. */
static void import_seq(const char *blob, const char *like, long long at, const char *id, ss_dtype dtype,
		       const char *out_path)
{
	ss_reader *r;
	ss_state s;
	char err[SS_ERRMSG_MAX];
	cli_out_not_input(out_path, like);
	cli_out_not_input(out_path, blob);
	state_of(read_one(&r, like, at), like, &s);
	ss_reader_close(r);
	/* bounded before reading: the rows the dims make, plus a file's tokens */
	struct stat st;
	FILE *in = cli_open_regular(blob);
	if (fstat(fileno(in), &st) != 0)
		cli_die("%s: %s", blob, strerror(errno));
	size_t n = (size_t)st.st_size;
	if (!S_ISREG(st.st_mode) || n > ss_llama_seq_size(&s.dims, 1, 0) + cli_max_record())
		cli_die("%s: not a regular file of at most %llu bytes", blob,
			(unsigned long long)(ss_llama_seq_size(&s.dims, 1, 0) + cli_max_record()));
	unsigned char *buf = malloc(n ? n : 1);
	if (!buf)
		cli_die("out of memory");
	if (fread(buf, 1, n, in) != n)
		cli_die("%s: read error", blob);
	fclose(in);
	int32_t pos;
	if (ss_llama_seq_read(buf, n, &s.dims, &s, &pos, err))
		cli_die("%s: %s", blob, err);
	free(buf);
	s.n_tokens = (int64_t)pos + 1;
	s.dtype = dtype;
	if (id) {
		free(s.id);
		if (!(s.id = strdup(id)))
			cli_die("out of memory");
	}
	ss_writer *w;
	if (ss_writer_open(&w, out_path, SS_ZSTD_LEVEL_DEFAULT, err))
		cli_die("%s: %s", out_path ? out_path : "-", err);
	int rc = ss_writer_put_state(w, &s, NULL);
	if (rc)
		cli_writer_die(w, out_path ? out_path : "-", rc);
	if (ss_writer_close(w, err))
		cli_die("%s: %s", out_path ? out_path : "-", err);
	ss_state_free(&s);
}

/* The options of one run. */
typedef struct {
	int full, meta, stats, xport, import; /* xport: -1 none, 0 llama-seq, 1 llama-seq-file */
	long long at, limit;
	long seq_id;
	const char *out_path, *like, *id;
	ss_dtype dtype;
} opts_t;

static void parse_args(int argc, char **argv, opts_t *o)
{
	static const struct option longs[] = {
		{ "full", no_argument, 0, 'F' }, { "meta", no_argument, 0, 'M' }, { "stats", no_argument, 0, 'S' },
		{ "at", required_argument, 0, 'a' }, { "export", required_argument, 0, 'E' },
		{ "import", required_argument, 0, 'I' }, { "seq-id", required_argument, 0, 'i' },
		{ "like", required_argument, 0, 'L' }, { "id", required_argument, 0, 'd' },
		{ "state-dtype", required_argument, 0, 'D' }, { 0, 0, 0, 0 },
	};
	static const char *const formats[] = { "llama-seq", "llama-seq-file" };
	*o = (opts_t){ .xport = -1, .at = -1, .limit = -1, .dtype = SS_DTYPE_F32 };
	const cli_options co = { "n:", longs, usage, help, &o->out_path, NULL };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case 'F': o->full = 1; break;
		case 'M': o->meta = 1; break;
		case 'S': o->stats = 1; break;
		case 'a': o->at = cli_long("--at", optarg, 0, LONG_MAX, usage); break;
		case 'n': o->limit = cli_long("-n", optarg, 0, LONG_MAX, usage); break;
		case 'E': o->xport = cli_choice("--export", optarg, formats, 2, usage); break;
		case 'I': o->import = cli_choice("--import", optarg, formats, 1, usage) + 1; break;
		case 'i': o->seq_id = cli_long("--seq-id", optarg, 0, INT32_MAX, usage); break;
		case 'L': o->like = optarg; break;
		case 'd': o->id = optarg; break;
		case 'D': o->dtype = (ss_dtype)cli_dtype("--state-dtype", optarg, SS_DTYPE_STATES, usage); break;
		}
	}
	int convert = o->xport >= 0 || o->import;
	if ((o->xport >= 0 && o->import) || (convert && (o->full || o->meta || o->stats || o->limit >= 0)))
		cli_usage(usage, "--export, --import and the printing options go alone");
	if (o->import && (!o->like || optind != argc - 1))
		cli_usage(usage, "--import needs --like STATES and one BLOB");
	if (o->xport >= 0 && optind < argc - 1)
		cli_usage(usage, "--export reads one FILE");
	if (!convert && (o->out_path || o->like || o->id))
		cli_usage(usage, "-o, --like and --id go with --export or --import");
}

/* Prints the records of files[0..n) (or their --stats) as JSON lines. */
static void print_files(char **files, int nfiles, const opts_t *o)
{
	uint64_t max = cli_max_record();
	enum { MAX_GROUPS = 8 };
	group_t g[MAX_GROUPS + 1];
	memset(g, 0, sizeof g);
	int n_g = 0;
	for (int i = 0; i < nfiles; i++) {
		ss_reader *r;
		const ss_record *rec;
		char err[SS_ERRMSG_MAX];
		int rc = ss_reader_open(&r, files[i], max, err);
		if (rc)
			cli_die("%s: %s", files[i], err);
		if (o->at >= 0 && (rc = ss_reader_seek(r, (uint64_t)o->at)) != 0)
			cli_die("%s: %s", files[i], ss_reader_error(r));
		long long n = 0;
		while ((o->limit < 0 || n < o->limit) && (o->at < 0 || n < 1) &&
		       (rc = o->meta || o->stats ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec)) == 1) {
			/* shown only as the tools would read it: one validator */
			if (ss_record_check(rec, err))
				cli_die("%s: record %lld (byte offset %llu): %s", files[i], n,
					(unsigned long long)ss_record_offset(rec), err);
			if (o->stats) {
				add_stats(g, &n_g, MAX_GROUPS, rec, files[i], n);
			} else {
				ss_record_to_json(rec, stdout, o->full);
				putchar('\n');
			}
			n++;
		}
		if (rc < 0)
			cli_die("%s: %s", files[i], ss_reader_error(r));
		if (o->at >= 0 && n == 0)
			cli_die("%s: no record at byte offset %lld", files[i], o->at);
		ss_reader_close(r);
	}
	if (o->stats) {
		group_t *t = &g[MAX_GROUPS];
		for (int k = 0; k < n_g; k++) {
			print_group(&g[k]);
			t->records += g[k].records;
			t->stored += g[k].stored;
			t->compressed += g[k].compressed;
		}
		print_group(t);
	}
}

int main(int argc, char **argv)
{
	cli_init("ss-cat");
	opts_t o;
	parse_args(argc, argv, &o);
	if (o.import) {
		import_seq(argv[optind], o.like, o.at, o.id, o.dtype, o.out_path);
		return 0;
	}
	if (o.xport >= 0) {
		export_seq(optind < argc ? argv[optind] : "-", o.at, o.xport, o.seq_id, o.out_path);
		return 0;
	}
	char *stdin_only[] = { "-" };
	if (optind < argc)
		print_files(argv + optind, argc - optind, &o);
	else
		print_files(stdin_only, 1, &o);
	if (fflush(stdout) != 0 || ferror(stdout))
		cli_die("standard output: write error");
	return 0;
}
