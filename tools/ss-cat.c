/*
 * ss-cat — print the records of ss streams (tokens or states) as JSON lines,
 * for people and scripts. Large arrays are summarised unless --full.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ss.h"

static const char *usage = "ss-cat [--full] [--meta] [--at OFFSET] [-n N] [FILE...]";

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
	       "  --at OFFSET    print only the record at byte OFFSET (regular files)\n"
	       "  -n N           stop after N records per file\n"
	       "  -q, -v         quieter, more verbose\n"
	       "  -h, --help     this help;  -V, --version  the version\n\n"
	       "Environment: SS_MAX_RECORD limits one record's decompressed size.\n",
	       usage);
	exit(0);
}

int main(int argc, char **argv)
{
	cli_init("ss-cat");
	int full = 0, meta = 0;
	long long at = -1, limit = -1;
	static const struct option opts[] = {
		{ "full", no_argument, 0, 'F' }, { "meta", no_argument, 0, 'M' },
		{ "at", required_argument, 0, 'a' }, { 0, 0, 0, 0 },
	};
	const cli_options co = { "n:", opts, usage, help, NULL, NULL };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case 'F': full = 1; break;
		case 'M': meta = 1; break;
		case 'a': at = cli_long("--at", optarg, 0, LONG_MAX, usage); break;
		case 'n': limit = cli_long("-n", optarg, 0, LONG_MAX, usage); break;
		}
	}
	char *stdin_only[] = { "-" };
	char **files = optind < argc ? argv + optind : stdin_only;
	int nfiles = optind < argc ? argc - optind : 1;
	uint64_t max = cli_max_record();
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
		       (rc = meta ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec)) == 1) {
			ss_record_to_json(rec, stdout, full);
			putchar('\n');
			n++;
		}
		if (rc < 0)
			cli_die("%s: %s", files[i], ss_reader_error(r));
		if (at >= 0 && n == 0)
			cli_die("%s: no record at byte offset %lld", files[i], at);
		ss_reader_close(r);
	}
	return 0;
}
