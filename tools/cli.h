/*
 * cli.h — what every ss-* tool shares: error and usage reporting, verbosity,
 * progress lines, number parsing. Tools print; libss never does.
 * Conventions (docs/STYLE.md): help to stdout exit 0; usage error one line + short
 * usage on stderr, exit 2; runtime failure "ss-<tool>: <file>: <what>", exit 1.
 */
#ifndef SS_CLI_H
#define SS_CLI_H

#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

extern const char *cli_prog; /* "ss-encode" */
extern int cli_verbosity;    /* 0 = -q, 1 = default, 2+ = -v */

/* A tool's options for cli_getopt(): its own, and the common ones every tool
 * takes with one spelling, one meaning and one help line (the table in cli.c;
 * cli_common_help() prints it):
 *   -o, --output FILE  the output (only where `out` is set)
 *   -q, --quiet        errors only (cli_verbosity 0)
 *   -v, --verbose      more on stderr (cli_verbosity + 1 per -v)
 *   -h, --help         help(): prints the help to stdout and exits 0
 *   -V, --version      "prog VERSION" to stdout, exit 0 */
/* The options of the tools that run the model (ss-encode, ss-decode,
 * ss-score, ss-eval, ss-train, ss-retrieve query), filled by cli_getopt()
 * when cli_options.model points here:
 *   --model DIR           model directory (NULL: the defaults, defaults.h)
 *   -t, --tokenizer FILE  tokenizer.json (NULL: the defaults)
 *   --device D            cpu, cuda, cuda:N, auto (default "auto")
 *   -j, --threads N       1..256 (after the last option: online cores if not given)
 *   --weights-dtype T     f32, bf16, f16, q8_0, auto (NULL: the checkpoint's)
 * A tool without the model options may take -t or -j itself (ss-tokenize,
 * ss-compose): with the same meaning, and the help line of CLI_HELP_TOKENIZER
 * or CLI_HELP_THREADS. */
typedef struct {
	const char *model, *tokenizer, *device, *weights_dtype;
	int threads;
} cli_model_opts;

typedef struct {
	const char *shorts;         /* the tool's own short options, getopt syntax ("k:"); NULL: none */
	const struct option *longs; /* the tool's own long options, {0}-terminated; NULL: none */
	const char *usage;          /* for usage errors (cli_usage) */
	void (*help)(void);         /* must not return */
	const char **out;           /* where -o/--output FILE goes; NULL: the tool takes no -o */
	cli_model_opts *model;      /* where the model options go; NULL: the tool takes none */
} cli_options;

/* getopt_long over the tool's own options and the common ones (opterr = 0:
 * getopt itself prints nothing). Acts on the common options, and returns the
 * next of the tool's own (optarg set), or -1 after the last option (optind:
 * the first operand, as getopt_long). An unknown option is one line on
 * stderr, "prog: unknown option '--foo' (usage: prog --help)", exit 2; a
 * missing argument a usage error naming the option (cli_usage), exit 2. */
int cli_getopt(int argc, char **argv, const cli_options *o);

/* Which common options cli_common_help() prints (a bit set). */
enum {
	CLI_HELP_OUT = 1,       /* -o, --output */
	CLI_HELP_BASE = 2,      /* -q, -v, -h, -V */
	CLI_HELP_MODEL = 4,     /* the model options, cli_model_opts */
	CLI_HELP_TOKENIZER = 8, /* -t, --tokenizer alone */
	CLI_HELP_THREADS = 16,  /* -j, --threads alone */
};

/* Prints the help lines of the common options in `groups` (CLI_HELP_*) to
 * stdout, in the table's order: each option's names ("-o, --output FILE") at
 * column 2 and its text at column `col` (on the next line when the names are
 * longer). out_arg names -o's argument where it is not a FILE ("DIR"); NULL:
 * FILE. */
void cli_common_help(int col, unsigned groups, const char *out_arg);

/* Online cores, in [1, 256]. */
int cli_threads_default(void);

/* Records the program name and registers the stdout-close check at exit. */
void cli_init(const char *prog);
/* "prog: msg" on stderr, exit 1. */
void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* "prog: msg" + "usage: <usage>" + "Try 'prog --help'." on stderr, exit 2. */
void cli_usage(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* "prog: msg" on stderr unless -q. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Progress on stderr, for long work. On a terminal: one line, updated in
 * place (\r ... \e[K) at most ~4 times a second, unless -q. Otherwise (a
 * log file, a pipe) only with -v: a plain line (no control characters)
 * every $SS_PROGRESS_SECONDS seconds (default 10; 0: every update), the
 * first one a period after the work began. cli_progress_of() appends the
 * share done and the time left, ", 45%, ETA 1m23s", from done/total and the
 * rate since cli_progress_begin() (or the first update); the caller gives
 * the rate in its message. cli_progress_end() ends the line and the work. */
void cli_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_progress_of(double done, double total, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cli_progress_begin(void);
void cli_progress_end(void);
/* Sum of the sizes of the input files when all are regular files (not
 * "-", not a pipe), else 0: the total of cli_progress_of() in bytes. */
double cli_inputs_size(char *const *files, int n);
/* Plain text is one document per line, also in files named on the command
 * line: with several named (n_named >= 2, as `dir/\*.txt` gives) a file of
 * more than one line-document is likely meant as one document. Warns once
 * a run (unless -q), naming path, n_docs and `fix` (the option that reads
 * a file whole). */
void cli_warn_line_docs(const char *path, uint64_t n_docs, int n_named, const char *fix);
/* one when n == 1, else many: "1 document", "2 documents". */
const char *cli_plural(uint64_t n, const char *one, const char *many);
/* Parses a whole-string integer in [lo, hi]; usage error naming `opt` if not. */
long cli_long(const char *opt, const char *s, long lo, long hi, const char *usage);
double cli_double(const char *opt, const char *s, double lo, double hi, const char *usage);
/* Record size limit: $SS_MAX_RECORD (bytes, k/M/G suffix) or the default. */
uint64_t cli_max_record(void);
/* A size: decimal bytes with an optional k, M or G suffix (binary units).
 * Returns it, or 0 when s is not a positive size. */
uint64_t cli_size(const char *s);
/* Monotonic seconds. */
double cli_now(void);
/* Opens an input file that is read whole or as lines, not a stream
 * operand: stdin for "-", else a regular file opened without blocking
 * (ss_open_regular), so that a FIFO, a directory or a device is refused
 * before any read: "prog: PATH: not a regular file (a FIFO, a directory or
 * a device; '-' reads standard input)", exit 1, as is a failed open. The
 * caller fcloses it unless it is stdin. */
FILE *cli_open_regular(const char *path);
/* Opens a text output: stdout for NULL or "-", else a file that appears
 * whole on cli_out_close() (ss_output). Dies on error. */
FILE *cli_out_open(const char *path);
/* Commits the output opened by cli_out_open(); dies on a write error. */
void cli_out_close(FILE *f);
/* Dies, before anything is written, when the output `out` is the same file
 * (st_dev, st_ino: a hard link too) as the input `in`, which replacing it
 * would destroy: "prog: OUT: the output is the input IN ...", exit 1. Called
 * by a tool for each file it reads, before it opens its output. Stdin or
 * stdout ("-", NULL), an output that does not exist yet or is not a regular
 * file (/dev/null), and an input that does not exist pass. */
void cli_out_not_input(const char *out, const char *in);
/* --index ARG of a tool that reads several indexes as one (shards,
 * ss_index_open_shards): appends to (*paths)[0..*n) (malloc'ed, strings
 * too) ARG, or for @FILE the lines of FILE, each an index path (a relative
 * one taken relative to FILE's directory, as an index's state paths are to
 * its own; blank lines and lines starting with '#' skipped). Dies naming
 * FILE when it cannot be read or lists no index (exit 1). */
void cli_index_add(const char *arg, char ***paths, int *n);
/* cli_out_not_input for an output directory `dir` that is replaced whole
 * (ss-train's checkpoint): dies, before anything is written, when the
 * input `in` is dir itself (a directory read, as --model DIR) or a file in
 * it: "prog: DIR: the output directory holds the input IN ...", exit 1. An
 * input that does not exist, "-" and NULL pass. */
void cli_out_dir_not_input(const char *dir, const char *in);
/* Dies after a failed ss_writer_put* (rc): "prog: path: write error: <the
 * reason>" for a failed write, the stream discarded (no partial output). */
struct ss_writer;
void cli_writer_die(struct ss_writer *w, const char *path, int rc) __attribute__((noreturn));
/* Prints "prog VERSION" to stdout and exits 0. */
void cli_version(void) __attribute__((noreturn));

/* The index of arg among names[0..n), or a usage error "OPT: 'ARG' is not
 * a, b or c" (exit 2). */
int cli_choice(const char *opt, const char *arg, const char *const *names, int n, const char *usage);
/* The dtype (an ss_dtype) arg names for `uses` (SS_DTYPE_STATES or SS_DTYPE_WEIGHTS), or
 * a usage error "OPT: 'ARG' is not f32, f16, bf16, q8 or q4" listing that
 * use's names (ss_dtype_parse_for), exit 2. */
int cli_dtype(const char *opt, const char *arg, unsigned uses, const char *usage);

#endif /* SS_CLI_H */
