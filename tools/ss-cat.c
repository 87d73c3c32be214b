/*
 * ss-cat — print the records of ss streams (tokens or states) as JSON lines,
 * for people and scripts. Large arrays are summarised unless --full.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ss.h"

static const char *usage = "ss-cat [--full] [--meta] [--stats] [--at OFFSET] [-n N] [FILE...]";

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
	       "  -q, -v         quieter, more verbose\n"
	       "  -h, --help     this help;  -V, --version  the version\n\n"
	       "Environment: SS_MAX_RECORD limits one record's decompressed size.\n",
	       usage);
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

int main(int argc, char **argv)
{
	cli_init("ss-cat");
	int full = 0, meta = 0, stats = 0;
	long long at = -1, limit = -1;
	static const struct option opts[] = {
		{ "full", no_argument, 0, 'F' }, { "meta", no_argument, 0, 'M' }, { "stats", no_argument, 0, 'S' },
		{ "at", required_argument, 0, 'a' }, { 0, 0, 0, 0 },
	};
	const cli_options co = { "n:", opts, usage, help, NULL, NULL };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case 'F': full = 1; break;
		case 'M': meta = 1; break;
		case 'S': stats = 1; break;
		case 'a': at = cli_long("--at", optarg, 0, LONG_MAX, usage); break;
		case 'n': limit = cli_long("-n", optarg, 0, LONG_MAX, usage); break;
		}
	}
	char *stdin_only[] = { "-" };
	char **files = optind < argc ? argv + optind : stdin_only;
	int nfiles = optind < argc ? argc - optind : 1;
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
		if (at >= 0 && (rc = ss_reader_seek(r, (uint64_t)at)) != 0)
			cli_die("%s: %s", files[i], ss_reader_error(r));
		long long n = 0;
		while ((limit < 0 || n < limit) && (at < 0 || n < 1) &&
		       (rc = meta || stats ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec)) == 1) {
			/* shown only as the tools would read it: one validator */
			if (ss_record_check(rec, err))
				cli_die("%s: record %lld (byte offset %llu): %s", files[i], n,
					(unsigned long long)ss_record_offset(rec), err);
			if (stats) {
				add_stats(g, &n_g, MAX_GROUPS, rec, files[i], n);
			} else {
				ss_record_to_json(rec, stdout, full);
				putchar('\n');
			}
			n++;
		}
		if (rc < 0)
			cli_die("%s: %s", files[i], ss_reader_error(r));
		if (at >= 0 && n == 0)
			cli_die("%s: no record at byte offset %lld", files[i], at);
		ss_reader_close(r);
	}
	if (stats) {
		group_t *t = &g[MAX_GROUPS];
		for (int k = 0; k < n_g; k++) {
			print_group(&g[k]);
			t->records += g[k].records;
			t->stored += g[k].stored;
			t->compressed += g[k].compressed;
		}
		print_group(t);
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		cli_die("standard output: write error");
	return 0;
}
