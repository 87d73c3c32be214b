/*
 * ss-compose — compose the states of several documents into one state
 * (CASO, PICASO-S, PICASO-R, soup, sum, max): no model, no GPU.
 *
 * Inputs are state records in concatenation order (files in order, records
 * in order; the last one is nearest the query). Reading, composing and
 * writing the result is ss_compose_run() (lib/compose/compose_files.c, its threads
 * lib/compose/compose_threads.c, the math lib/compose/compose.c and
 * lib/compose/compose_weights.c); this file parses options, opens the output and
 * commits it.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ss.h"

static const char *usage =
	"ss-compose [--mode MODE] [--norm none|before|after|both] [--conv mean|last]\n"
	"                  [--state-dtype f32|f16|bf16|q8|q4] [--weights FILE.json] [--id ID] [-l N] [-j N] [-o OUT] [FILE...]";

/* zstd level of the output. The composed state goes straight to ss-decode or
 * ss-score and floats barely compress: level 3 spent as much CPU on one
 * 19.4 MB state as decompressing the ten inputs, -1 a third of it for 8% more
 * bytes (issue 12). */
#define OUT_LEVEL_DEFAULT (-1)

/* Threads by default: two decompress two inputs at once, which about
 * halves the time of the decompression that dominates; more help less
 * (the folds are serial) and hold a record each (issue 12). */

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Compose the state records of FILEs (stdin when none or '-'), taken in\n"
	       "concatenation order (the last one nearest the query), into one state record.\n\n"
	       "  --mode MODE      picaso-r (default): average of CASO over the n cyclic orders\n"
	       "                   picaso-s: average of CASO over all n! orders\n"
	       "                   caso:     the state of the concatenation, one linear layer\n"
	       "                   soup:     mean; sum: sum; max: elementwise maximum\n"
	       "  --norm WHEN      L2-normalise each layer's ssm state before pooling, after it,\n"
	       "                   or both (default none)\n"
	       "  --conv RULE      conv state: mean of the inputs' (default) or the last input's\n"
	       "  --state-dtype T  storage of the output: f32, f16, bf16, q8 or q4 (default: the inputs'\n"
	       "                   dtype when they all share one, else f32)\n"
	       "  --weights FILE   write the weights [n_layer][nheads][n] as JSON\n"
	       "                   (Mamba-1: [n_layer][d_inner][d_state][n])\n"
	       "  --id ID          id of the output record (default MODE(id0,id1,...), or\n"
	       "                   MODE(N states: id0 ... idN-1) past 160 bytes)\n"
	       "  -l, --level N    zstd level of the output, -7..19 (default %d: fast, the\n"
	       "                   output is usually piped on; 3 is the other tools' level)\n"
	       "\n", usage, OUT_LEVEL_DEFAULT);
	cli_common_help(19, CLI_HELP_THREADS | CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	printf("\n--threads N: decompress up to N inputs at once (regular files), write the\n"
	       "output as they are read, and compress it with N threads at levels >= 1; the\n"
	       "result is the same whatever N. The output goes to stdout (never a terminal)\n"
	       "without -o; -v prints throughput.\n"
	       "All inputs must come from the same model (fingerprint) and have equal dims.\n"
	       "picaso-s/picaso-r, and any mode with -j above 1, read regular files twice\n"
	       "(metadata first); picaso's states from a pipe are spooled to a temporary\n"
	       "file in $TMPDIR.\n"
	       "Environment: SS_MAX_RECORD limits one record's decompressed size.\n");
	exit(0);
}

/* The output: a failed run leaves no partial file, as cli_init's exit and
 * signal handlers remove every unfinished output (ss_output_abort_all). */
static ss_writer *out_w;

static void show_progress(void *arg, int pass, size_t done, size_t total)
{
	if (pass == 0)
		cli_progress("%zu states", done);
	else if (pass == 1)
		cli_progress("%zu decays", done);
	else
		cli_progress("%zu/%zu states", done, total);
}

/* The shortest decimal that reads back as the same f32 (the stored weights
 * are f32; printing their f64 widening would show spurious digits). */
static cJSON *json_float(float v)
{
	char b[32];
	for (int p = 6; p <= 9; p++) {
		snprintf(b, sizeof b, "%.*g", p, (double)v);
		if (strtof(b, NULL) == v)
			break;
	}
	cJSON *j = cJSON_CreateRaw(b);
	if (!j)
		cli_die("out of memory");
	return j;
}

/* The index of s in names[0..n), or -1. */
static void write_weights(const char *path, const ss_state *s, ss_compose_mode mode, int norm,
			  ss_compose_conv conv)
{
	cJSON *j = cJSON_CreateObject(), *src = cJSON_CreateArray();
	size_t L = (size_t)s->dims.n_layer, H = (size_t)s->dims.nheads, n = (size_t)s->n_sources;
	/* mamba1: a weight per state element, [n_layer][nheads][d_state][n] */
	const int m1 = ss_state_is_mamba1(&s->dims);
	size_t N = m1 ? (size_t)s->dims.d_state : 1;
	cJSON_AddStringToObject(j, "id", s->id);
	cJSON_AddStringToObject(j, "mode", ss_compose_mode_name(mode));
	cJSON_AddStringToObject(j, "norm", ss_compose_norm_names[norm]);
	cJSON_AddStringToObject(j, "conv", ss_compose_conv_names[conv]);
	cJSON_AddNumberToObject(j, "n_layer", (double)L);
	cJSON_AddNumberToObject(j, "nheads", (double)H);
	if (m1) {
		cJSON_AddStringToObject(j, "arch", "mamba1");
		cJSON_AddNumberToObject(j, "d_state", (double)N);
	}
	cJSON_AddNumberToObject(j, "n_tokens", (double)s->n_tokens);
	for (size_t k = 0; k < n; k++)
		cJSON_AddItemToArray(src, cJSON_CreateString(s->sources[k]));
	cJSON_AddItemToObject(j, "sources", src);
	if (s->weights) {
		cJSON *wl = cJSON_CreateArray();
		for (size_t l = 0; l < L; l++) {
			cJSON *wh = cJSON_CreateArray();
			for (size_t h = 0; h < H; h++) {
				cJSON *wn = m1 ? cJSON_CreateArray() : NULL;
				for (size_t e = 0; e < N; e++) {
					cJSON *wk = cJSON_CreateArray();
					for (size_t k = 0; k < n; k++)
						cJSON_AddItemToArray(
							wk, json_float(s->weights[((l * H + h) * N + e) * n + k]));
					cJSON_AddItemToArray(m1 ? wn : wh, wk);
				}
				if (m1)
					cJSON_AddItemToArray(wh, wn);
			}
			cJSON_AddItemToArray(wl, wh);
		}
		cJSON_AddItemToObject(j, "weights", wl);
	} else {
		cJSON_AddNullToObject(j, "weights");
	}
	char *txt = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!txt)
		cli_die("out of memory");
	FILE *f = cli_out_open(path); /* written whole or not at all */
	fputs(txt, f);
	fputc('\n', f);
	free(txt);
	cli_out_close(f);
}

/* The options of one run. */
typedef struct {
	ss_compose_opts o;
	const char *out_path, *weights_path, *id;
	int have_dtype, level, threads;
	ss_dtype out_dtype;
	char **files;
	int nfiles;
} opts_t;

static void parse_args(int argc, char **argv, opts_t *a)
{
	static const struct option longs[] = {
		{"mode", required_argument, 0, 'm'}, {"norm", required_argument, 0, 'N'},
		{"conv", required_argument, 0, 'C'}, {"state-dtype", required_argument, 0, 'D'},
		{"weights", required_argument, 0, 'W'}, {"id", required_argument, 0, 'I'},
		{"level", required_argument, 0, 'l'}, {"threads", required_argument, 0, 'j'}, {0, 0, 0, 0},
	};
	*a = (opts_t){ .o = {SS_COMPOSE_PICASO_R, 0, SS_COMPOSE_CONV_MEAN}, .out_path = "-",
		       .level = OUT_LEVEL_DEFAULT, .out_dtype = SS_DTYPE_F32,
		       .threads = cli_threads_default() };
	const cli_options co = { "l:j:", longs, usage, help, &a->out_path, NULL };
	int ch;
	while ((ch = cli_getopt(argc, argv, &co)) != -1) {
		switch (ch) {
		case 'm':
			if (ss_compose_mode_parse(optarg, &a->o.mode))
				cli_usage(usage, "--mode: unknown mode '%s' (caso, picaso-s, picaso-r, soup, sum, max)",
					  optarg);
			break;
		case 'N':
			a->o.norm = cli_choice("--norm", optarg, ss_compose_norm_names, SS_COMPOSE_N_NORMS, usage);
			break;
		case 'C':
			a->o.conv = (ss_compose_conv)cli_choice("--conv", optarg, ss_compose_conv_names,
								SS_COMPOSE_N_CONVS, usage);
			break;
		case 'D':
			a->out_dtype = (ss_dtype)cli_dtype("--state-dtype", optarg, SS_DTYPE_STATES, usage);
			a->have_dtype = 1;
			break;
		case 'W': a->weights_path = optarg; break;
		case 'I':
			if (!*optarg)
				cli_usage(usage, "--id: empty id");
			a->id = optarg;
			break;
		case 'l': a->level = (int)cli_long("--level", optarg, -7, 19, usage); break;
		case 'j': a->threads = (int)cli_long("--threads", optarg, 1, 256, usage); break;
		}
	}
	if (a->weights_path && !strcmp(a->weights_path, "-") && !strcmp(a->out_path, "-"))
		cli_usage(usage, "--weights -: standard output already carries the state (use -o FILE)");
	static char *stdin_only[] = {"-"};
	a->files = optind < argc ? argv + optind : stdin_only;
	a->nfiles = optind < argc ? argc - optind : 1;
	int n_stdin = 0;
	for (int i = 0; i < a->nfiles; i++)
		n_stdin += !strcmp(a->files[i], "-");
	if (n_stdin > 1)
		cli_usage(usage, "standard input ('-') given more than once");
	for (int i = 0; i < a->nfiles; i++) { /* both outputs, -o and --weights */
		cli_out_not_input(a->out_path, a->files[i]);
		cli_out_not_input(a->weights_path, a->files[i]);
	}
	cli_out_not_input(a->out_path, a->weights_path);
}

int main(int argc, char **argv)
{
	cli_init("ss-compose");
	opts_t a;
	parse_args(argc, argv, &a);
	char err[SS_ERRMSG_MAX];
	/* Open the output first: a terminal or an unwritable path fails before
	 * any work. */
	if (ss_writer_open(&out_w, a.out_path, a.level ? a.level : SS_ZSTD_LEVEL_DEFAULT, err) != 0)
		cli_die("%s: %s", a.out_path, err);
	/* At levels below 1 a composed state is stored, not compressed (floats
	 * with full mantissas): threads would only cost their start. A libzstd
	 * without threads compresses in one. */
	if (a.level >= 1)
		ss_writer_set_threads(out_w, a.threads);

	double t0 = cli_now();
	ss_compose_run_opts ro = {
		.paths = (const char *const *)a.files, .n_paths = (size_t)a.nfiles, .threads = a.threads,
		.max_record = cli_max_record(), .progress = show_progress, .w = out_w,
		.set_dtype = a.have_dtype, .dtype = a.out_dtype, .id = a.id,
	};
	ss_compose_result res;
	int rc = ss_compose_run(&a.o, &ro, &res, err);
	ss_state out = res.state;
	cli_progress_end();
	ss_writer *w = out_w;
	if (rc != 0 && res.write_failed) {
		out_w = NULL;
		cli_writer_die(w, a.out_path, rc);
	}
	if (rc != 0)
		cli_die("%s", err);
	if (a.weights_path)
		write_weights(a.weights_path, &out, a.o.mode, a.o.norm, a.o.conv);
	out_w = NULL;
	if (ss_writer_close(w, err) != 0)
		cli_die("%s: %s", a.out_path, err);
	if (cli_verbosity >= 2) {
		double s = cli_now() - t0;
		fprintf(stderr, "ss-compose: %d %s, %.1f MB in %.3g s (%.3g GB/s), mode %s\n", (int)out.n_sources,
			cli_plural((uint64_t)out.n_sources, "state", "states"), res.bytes_in / 1e6, s,
			s > 0 ? res.bytes_in / s / 1e9 : 0.0, ss_compose_mode_name(a.o.mode));
	}
	ss_state_free(&out);
	return 0;
}
