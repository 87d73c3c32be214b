/* cli.c — shared helpers of the ss-* tools; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ss.h"

const char *cli_prog = "ss";
int cli_verbosity = 1;
static int progress_open;
static double progress_last;
static double progress_t0; /* when the progress began (0: not yet) */

static int dying; /* cli_die has said why: the exit says no more */

static void check_stdout(void)
{
	/* A failed write (disk full, closed pipe) must not look like success. */
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0) {
		if (errno == EPIPE || dying)
			_exit(CLI_EXIT_FAIL);
		fprintf(stderr, "%s: write error on standard output: %s\n", cli_prog, strerror(errno));
		_exit(CLI_EXIT_FAIL);
	}
}

/* An interrupted, failing or cut-off (SIGPIPE) tool leaves no temporary
 * output files. */
static void on_signal(int sig)
{
	ss_output_abort_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void at_exit(void)
{
	ss_output_abort_all();
	check_stdout();
}

void cli_init(const char *prog)
{
	cli_prog = prog;
	atexit(at_exit);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, on_signal);
	/* Past a file-size limit (ulimit -f) a write fails with EFBIG instead
	 * of killing the tool: the write error is reported, naming the file,
	 * and the temporary output removed, as for a full disk. */
	signal(SIGXFSZ, SIG_IGN);
	/* OpenBLAS's pool, started when the library loads, would spin on the
	 * cores for 0.1 s whether or not a tool multiplies a matrix (ss-cat,
	 * ss-compose, ss-retrieve never do): stopped here, started again by
	 * the first threaded BLAS call of a tool that runs the model. */
	ss_blas_release();
}

/* The one text output of a tool (cli_out_open/close). */
static ss_output *text_out;
static char *text_out_path;

FILE *cli_out_open(const char *path)
{
	char err[SS_ERRMSG_MAX] = "";
	if (text_out)
		cli_die("internal error: two text outputs open");
	if (ss_output_open(&text_out, path, err))
		cli_die("%s: %s", path, err);
	text_out_path = strdup(path ? path : "-");
	return ss_output_file(text_out);
}

void cli_out_close(FILE *f)
{
	char err[SS_ERRMSG_MAX] = "";
	if (!text_out || ss_output_file(text_out) != f)
		cli_die("internal error: closing an output that is not open");
	ss_output *o = text_out;
	text_out = NULL;
	if (ss_output_commit(o, err))
		cli_die("%s: %s", strcmp(text_out_path, "-") ? text_out_path : "standard output", err);
	free(text_out_path);
	text_out_path = NULL;
}

FILE *cli_open_regular(const char *path)
{
	if (!strcmp(path, "-"))
		return stdin;
	int fd = ss_open_regular(path);
	if (fd == -2)
		cli_die("%s: not a regular file (a FIFO, a directory or a device; '-' reads standard input)", path);
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
	if (!f)
		cli_die("%s: %s", path, strerror(errno));
	return f;
}

static void index_push(const char *path, char ***paths, int *n)
{
	char *p = strdup(path);
	char **a = p ? realloc(*paths, (size_t)(*n + 1) * sizeof *a) : NULL;
	if (!a)
		cli_die("out of memory");
	a[(*n)++] = p;
	*paths = a;
}

void cli_index_add(const char *arg, char ***paths, int *n)
{
	if (arg[0] != '@') {
		index_push(arg, paths, n);
		return;
	}
	const char *file = arg + 1, *slash = strrchr(file, '/');
	FILE *f = fopen(file, "r");
	if (!f)
		cli_die("%s: %s", file, strerror(errno));
	char *line = NULL, *path = NULL;
	size_t cap = 0;
	ssize_t len;
	int before = *n;
	while ((len = getline(&line, &cap, f)) >= 0) {
		while (len > 0 && strchr("\n\r \t", line[len - 1]))
			line[--len] = 0;
		if (!len || line[0] == '#')
			continue;
		if (line[0] != '/' && slash) {
			if (asprintf(&path, "%.*s/%s", (int)(slash - file), file, line) < 0)
				cli_die("out of memory");
			index_push(path, paths, n);
			free(path);
		} else {
			index_push(line, paths, n);
		}
	}
	if (ferror(f))
		cli_die("%s: read error: %s", file, strerror(errno));
	fclose(f);
	free(line);
	if (*n == before)
		cli_die("%s: lists no index", file);
}

void cli_out_not_input(const char *out, const char *in)
{
	struct stat so, si;
	if (!out || !in || !strcmp(out, "-") || !strcmp(in, "-"))
		return;
	/* Not there yet, or not a regular file (/dev/null): nothing to lose. */
	if (stat(out, &so) != 0 || !S_ISREG(so.st_mode) || stat(in, &si) != 0)
		return;
	if (so.st_dev == si.st_dev && so.st_ino == si.st_ino)
		cli_die("%s: the output is the input %s (the same file): write it elsewhere; nothing written", out, in);
}

void cli_out_dir_not_input(const char *dir, const char *in)
{
	struct stat sd, si, sp;
	if (!dir || !in || !strcmp(in, "-"))
		return;
	cli_out_not_input(dir, in); /* -o naming the input file itself */
	if (stat(dir, &sd) != 0 || !S_ISDIR(sd.st_mode) || stat(in, &si) != 0)
		return;
	if (sd.st_dev == si.st_dev && sd.st_ino == si.st_ino)
		cli_die("%s: the output directory is the input %s (it is replaced whole): write it elsewhere; "
			"nothing written", dir, in);
	char *parent = strdup(in), *slash = parent ? strrchr(parent, '/') : NULL;
	if (!parent)
		cli_die("out of memory");
	if (slash)
		*(slash == parent ? slash + 1 : slash) = 0;
	int held = stat(slash ? parent : ".", &sp) == 0 && sd.st_dev == sp.st_dev && sd.st_ino == sp.st_ino;
	free(parent);
	if (held)
		cli_die("%s: the output directory holds the input %s (it is replaced whole): write it elsewhere; "
			"nothing written", dir, in);
}

/* What to do when a text file was given where a stream is read: libss
 * ends its message "not an ss stream (...; it looks like text)". */
static const char *text_hint(void)
{
	if (!strcmp(cli_prog, "ss-encode"))
		return "use --text, or make a token stream with ss-tokenize";
	if (!strcmp(cli_prog, "ss-tokenize"))
		return "--decode reads token streams; without it ss-tokenize reads text";
	return "ss-tokenize makes a token stream of text, ss-encode a state stream of that";
}

static void vmsg(const char *fmt, va_list ap)
{
	char *msg = NULL;
	if (progress_open)
		cli_progress_end();
	if (vasprintf(&msg, fmt, ap) < 0) {
		fprintf(stderr, "%s: %s (out of memory)\n", cli_prog, fmt);
		return;
	}
	if (strstr(msg, "not an ss stream (") && strstr(msg, "; it looks like text)"))
		fprintf(stderr, "%s: %s: %s\n", cli_prog, msg, text_hint());
	else
		fprintf(stderr, "%s: %s\n", cli_prog, msg);
	free(msg);
}

void cli_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	dying = 1;
	exit(CLI_EXIT_FAIL);
}

void cli_usage(const char *usage, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fprintf(stderr, "usage: %s\nTry '%s --help' for more information.\n", usage, cli_prog);
	exit(CLI_EXIT_USAGE);
}

void cli_warn(const char *fmt, ...)
{
	if (cli_verbosity < 1)
		return;
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds between plain progress lines when stderr is not a terminal:
 * $SS_PROGRESS_SECONDS (0: every update), default 10. */
static double progress_period(void)
{
	const char *s = getenv("SS_PROGRESS_SECONDS");
	char *end;
	double v = s && *s ? strtod(s, &end) : 10.0;
	return s && *s && (*end || !(v >= 0)) ? 10.0 : v;
}

double cli_inputs_size(char *const *files, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++) {
		struct stat st;
		if (!strcmp(files[i], "-") || stat(files[i], &st) || !S_ISREG(st.st_mode))
			return 0;
		sum += (double)st.st_size;
	}
	return sum;
}

void cli_warn_line_docs(const char *path, uint64_t n_docs, int n_named, const char *fix)
{
	static int warned;
	if (warned || n_named < 2 || n_docs < 2 || !strcmp(path, "-"))
		return;
	warned = 1;
	cli_warn("%s: plain text, one document per line: %llu documents from this file (and maybe "
		 "others); %s", path, (unsigned long long)n_docs, fix);
}

const char *cli_plural(uint64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

static void vprogress(double done, double total, const char *fmt, va_list ap)
{
	int tty = isatty(STDERR_FILENO);
	if (cli_verbosity < 1 || (cli_verbosity < 2 && !tty))
		return;
	double t = cli_now();
	if (!progress_t0)
		progress_t0 = progress_last = t;
	if (tty ? progress_open && t - progress_last < 0.25 : t - progress_last < progress_period())
		return;
	progress_last = t;
	fprintf(stderr, tty ? "\r%s: " : "%s: ", cli_prog);
	vfprintf(stderr, fmt, ap);
	double el = t - progress_t0;
	if (total > 0 && done > 0 && el > 0) {
		double left = (total - done) * el / done;
		left = left > 0 ? left : 0;
		fprintf(stderr, ", %.0f%%, ETA ", 100.0 * done / total);
		if (left >= 3600)
			fprintf(stderr, "%dh%02dm", (int)(left / 3600), (int)(left / 60) % 60);
		else
			fprintf(stderr, "%dm%02ds", (int)(left / 60), (int)left % 60);
	}
	fputs(tty ? "\033[K" : "\n", stderr);
	progress_open = tty;
}

void cli_progress(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprogress(0, 0, fmt, ap);
	va_end(ap);
}

void cli_progress_of(double done, double total, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprogress(done, total, fmt, ap);
	va_end(ap);
}

void cli_progress_begin(void)
{
	progress_t0 = progress_last = cli_now();
}

void cli_progress_end(void)
{
	if (progress_open)
		fputc('\n', stderr);
	progress_open = 0;
	progress_t0 = 0;
}

/* The option at optind - 1 as given ("--foo", "--foo=1"), or "-x" for a
 * short one. */
static const char *bad_option(char **argv, char *buf)
{
	const char *a = optind > 0 ? argv[optind - 1] : NULL;
	if (a && !strncmp(a, "--", 2))
		return a;
	snprintf(buf, 3, "-%c", optopt ? optopt : '?');
	return buf;
}

/* The common options: one row each, read by cli_getopt() (the getopt
 * tables) and by cli_common_help() (the help lines), so that every tool
 * spells and explains them alike; the man pages say the same (tested by
 * tests/cli/options.sh) and the bash completion reads them from --help. */
enum { O_MODEL = 0x1000, O_DEVICE, O_WEIGHTS_DTYPE };
static const struct {
	const char *name; /* the long name */
	int val;          /* its short letter, or O_* when it has none */
	const char *arg;  /* its argument's name; NULL: none */
	unsigned group;   /* CLI_HELP_* */
	const char *help[3];
} common_opts[] = {
	{ "model", O_MODEL, "DIR", CLI_HELP_MODEL,
	  { "model directory (config.json + weights) or a GGUF", "file (llama.cpp's mamba/mamba2 layout)",
	    "(default: see Defaults)" } },
	{ "tokenizer", 't', "FILE", CLI_HELP_MODEL | CLI_HELP_TOKENIZER, { "tokenizer.json (default: see Defaults)" } },
	{ "device", O_DEVICE, "D", CLI_HELP_MODEL,
	  { "cpu, cuda (cuda:N), or auto (default: a GPU when", "the CUDA plugin finds one, else the CPU)" } },
	{ "threads", 'j', "N", CLI_HELP_MODEL | CLI_HELP_THREADS, { "threads, 1..256 (default: the online cores)" } },
	{ "weights-dtype", O_WEIGHTS_DTYPE, "T", CLI_HELP_MODEL,
	  { "f32, bf16, f16, q8_0 or auto: the dtype the weight", "matrices are held and read in (default auto: the",
	    "checkpoint's; bf16 halves a decode step's reads)" } },
	{ "output", 'o', "FILE", CLI_HELP_OUT, { "write the output there, whole or not at all" } },
	{ "quiet", 'q', NULL, CLI_HELP_BASE, { "errors only" } },
	{ "verbose", 'v', NULL, CLI_HELP_BASE, { "more on stderr (progress, a summary at the end)" } },
	{ "help", 'h', NULL, CLI_HELP_BASE, { "this help" } },
	{ "version", 'V', NULL, CLI_HELP_BASE, { "the version" } },
};
enum { N_COMMON = sizeof common_opts / sizeof *common_opts };

/* Is common option i one that cli_getopt() handles for `o`? */
static int common_taken(const cli_options *o, size_t i)
{
	unsigned g = common_opts[i].group;
	return g == CLI_HELP_BASE || (g == CLI_HELP_OUT && o->out) || ((g & CLI_HELP_MODEL) && o->model);
}

int cli_getopt(int argc, char **argv, const cli_options *o)
{
	enum { MAX_LONGS = 64 };
	/* Built anew at every call (the same each time): getopt_long keeps only
	 * its place in argv between calls. */
	static struct option longs[MAX_LONGS + N_COMMON + 1];
	static char shorts[64];
	size_t n = 0, ns = 0;
	for (const struct option *l = o->longs; l && l->name; l++) {
		if (n == MAX_LONGS)
			cli_die("internal error: more than %d long options", MAX_LONGS);
		longs[n++] = *l;
	}
	shorts[ns++] = ':';
	for (size_t i = 0; i < N_COMMON; i++) {
		if (!common_taken(o, i))
			continue;
		longs[n++] = (struct option){ common_opts[i].name,
					      common_opts[i].arg ? required_argument : no_argument, 0,
					      common_opts[i].val };
		if (common_opts[i].val < 0x100) {
			shorts[ns++] = (char)common_opts[i].val;
			if (common_opts[i].arg)
				shorts[ns++] = ':';
		}
	}
	longs[n] = (struct option){ 0, 0, 0, 0 };
	if (o->model && !o->model->device)
		o->model->device = "auto";
	if (ns + (o->shorts ? strlen(o->shorts) : 0) >= sizeof shorts)
		cli_die("internal error: too many short options");
	strcpy(shorts + ns, o->shorts ? o->shorts : "");
	opterr = 0;
	for (;;) {
		int c = getopt_long(argc, argv, shorts, longs, NULL);
		char buf[3];
		switch (c) {
		case 'o':
			if (!o->out)
				return c;
			*o->out = optarg;
			break;
		case 'q': cli_verbosity = 0; break;
		case 'v': cli_verbosity++; break;
		case 'h': o->help(); cli_die("internal error: help returned");
		case 'V': cli_version();
		case ':': cli_usage(o->usage, "option '%s' needs an argument", bad_option(argv, buf));
		case O_MODEL: o->model->model = optarg; break;
		case 't':
			if (!o->model)
				return c;
			o->model->tokenizer = optarg;
			break;
		case O_DEVICE: o->model->device = optarg; break;
		case 'j':
			if (!o->model)
				return c;
			o->model->threads = (int)cli_long("--threads", optarg, 1, 256, o->usage);
			break;
		case O_WEIGHTS_DTYPE: o->model->weights_dtype = optarg; break;
		case -1:
			if (o->model && !o->model->threads)
				o->model->threads = cli_threads_default();
			return c;
		case '?':
			fprintf(stderr, "%s: unknown option '%s' (usage: %s --help)\n", cli_prog,
				bad_option(argv, buf), cli_prog);
			exit(CLI_EXIT_USAGE);
		default: return c;
		}
	}
}

void cli_common_help(int col, unsigned groups, const char *out_arg)
{
	for (size_t i = 0; i < N_COMMON; i++) {
		if (!(common_opts[i].group & groups))
			continue;
		char name[64];
		const char *arg = common_opts[i].val == 'o' && out_arg ? out_arg : common_opts[i].arg;
		if (common_opts[i].val < 0x100)
			snprintf(name, sizeof name, "-%c, --%s%s%s", common_opts[i].val, common_opts[i].name,
				 arg ? " " : "", arg ? arg : "");
		else
			snprintf(name, sizeof name, "--%s%s%s", common_opts[i].name, arg ? " " : "",
				 arg ? arg : "");
		for (size_t l = 0; l < 3 && common_opts[i].help[l]; l++) {
			int w = (int)strlen(name);
			if (l == 0 && w > col - 4)
				printf("  %s\n  %-*s%s\n", name, col - 2, "", common_opts[i].help[l]);
			else
				printf("  %-*s%s\n", col - 2, l ? "" : name, common_opts[i].help[l]);
		}
	}
}

int cli_threads_default(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

long cli_long(const char *opt, const char *s, long lo, long hi, const char *usage)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		cli_usage(usage, "%s: '%s' is not an integer in [%ld, %ld]", opt, s, lo, hi);
	return v;
}

double cli_double(const char *opt, const char *s, double lo, double hi, const char *usage)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		cli_usage(usage, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
	return v;
}

uint64_t cli_size(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = UINT64_C(1) << 10; end++; break;
	case 'm': case 'M': mul = UINT64_C(1) << 20; end++; break;
	case 'g': case 'G': mul = UINT64_C(1) << 30; end++; break;
	}
	if (errno || end == s || *end || v == 0 || *s == '-' || v > UINT64_MAX / mul)
		return 0;
	return (uint64_t)v * mul;
}

uint64_t cli_max_record(void)
{
	const char *s = getenv("SS_MAX_RECORD");
	if (!s || !*s)
		return SS_MAX_RECORD_DEFAULT;
	uint64_t v = cli_size(s);
	if (!v)
		cli_die("SS_MAX_RECORD: '%s' is not a size (bytes, with optional k/M/G)", s);
	return v;
}

void cli_writer_die(ss_writer *w, const char *path, int rc)
{
	char err[SS_ERRMSG_MAX] = "";
	const char *name = path && strcmp(path, "-") ? path : "standard output";
	if (rc == SS_ERR_IO && ss_writer_close(w, err))
		cli_die("%s: %s", name, err);
	if (rc != SS_ERR_IO)
		ss_writer_abort(w);
	cli_die("%s: %s", name, ss_strerror(rc));
}

void cli_version(void)
{
	printf("%s %s\n", cli_prog, SS_VERSION);
	exit(0);
}

int cli_choice(const char *opt, const char *arg, const char *const *names, int n, const char *usage)
{
	char list[256] = "";
	size_t len = 0;
	for (int i = 0; i < n; i++) {
		if (!strcmp(arg, names[i]))
			return i;
		if (len < sizeof list)
			len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
						i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
	}
	cli_usage(usage, "%s: '%s' is not %s", opt, arg, list);
}

int cli_dtype(const char *opt, const char *arg, unsigned uses, const char *usage)
{
	char err[SS_ERRMSG_MAX];
	ss_dtype t;
	if (ss_dtype_parse_for(arg, uses, &t, err))
		cli_usage(usage, "%s: %s", opt, err);
	return t;
}
