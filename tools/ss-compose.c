/*
 * ss-compose — compose the states of several documents into one state
 * (CASO, PICASO-S, PICASO-R, soup, sum, max): no model, no GPU.
 *
 * Inputs are state records in concatenation order (files in order, records
 * in order; the last one is nearest the query). The math is in lib/compose.c;
 * this file reads, checks, and writes.
 *
 * Memory. Modes caso, soup, sum and max make one streaming pass (caso by
 * Horner), from files or pipes alike. picaso-s and picaso-r need every
 * decay before the first state: regular files are read twice (first only
 * the record prefixes, ss_reader_next_meta, then the states); a pipe's
 * states are spooled in f32 to an unlinked temporary file in $TMPDIR during
 * the first pass and read back in the second. Either way memory holds the
 * accumulator, the reader's one record, a record's metadata and the decays
 * (n_layer·nheads floats per input), whatever the number of inputs.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ss.h"

static const char *usage =
	"ss-compose [--mode MODE] [--norm none|before|after|both] [--conv mean|last]\n"
	"                  [--state-dtype f32|f16|bf16] [--weights FILE.json] [--id ID] [-l N] [-o OUT] [FILE...]";

/* zstd level of the output. The composed state goes straight to ss-decode or
 * ss-score and floats barely compress: level 3 spent as much CPU on one
 * 19.4 MB state as decompressing the ten inputs, -1 a third of it for 8% more
 * bytes (issue 12). */
#define OUT_LEVEL_DEFAULT (-1)

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
	       "  --state-dtype T  storage of the output: f32, f16 or bf16 (default: the inputs'\n"
	       "                   dtype when they all share one, else f32)\n"
	       "  --weights FILE   write the weights [n_layer][nheads][n] as JSON\n"
	       "  --id ID          id of the output record (default MODE(id0,id1,...))\n"
	       "  -l, --level N    zstd level of the output, -7..19 (default %d: fast, the\n"
	       "                   output is usually piped on; 3 is the other tools' level)\n"
	       "  -o FILE          output (default stdout, never a terminal)\n"
	       "  -q, -v           quieter, more verbose (-v prints throughput)\n"
	       "  -h, --help       this help;  -V, --version  the version\n\n"
	       "All inputs must come from the same model (fingerprint) and have equal dims.\n"
	       "picaso-s/picaso-r read regular files twice (decays first); a pipe's states\n"
	       "are spooled to a temporary file in $TMPDIR.\n"
	       "Environment: SS_MAX_RECORD limits one record's decompressed size.\n",
	       usage, OUT_LEVEL_DEFAULT);
	exit(0);
}

/* The output, removed by the exit handler unless closed successfully: a
 * failed run leaves no partial file. */
static ss_writer *out_w;

static void abort_output(void)
{
	if (out_w)
		ss_writer_abort(out_w);
	out_w = NULL;
}

/* The first state seen: every other one must match it. */
static struct {
	int set;
	char *path, *id;
	uint64_t rec;
	char fingerprint[SS_FINGERPRINT_MAX];
	ss_state_dims dims;
	ss_dtype dtype;
	int mixed_dtype;
} first;

static void check_compat(const ss_state *m, const char *path, uint64_t rec)
{
	if (!first.set) {
		first.set = 1;
		first.path = strdup(path);
		first.id = strdup(m->id ? m->id : "");
		first.rec = rec;
		memcpy(first.fingerprint, m->fingerprint, sizeof first.fingerprint);
		first.dims = m->dims;
		first.dtype = m->dtype;
		return;
	}
	char why[SS_ERRMSG_MAX];
	if (strcmp(first.fingerprint, m->fingerprint) != 0)
		cli_die("%s: record %llu (id \"%s\"): model fingerprint %s differs from %s: record %llu "
			"(id \"%s\"): %s",
			path, (unsigned long long)rec, m->id, m->fingerprint, first.path,
			(unsigned long long)first.rec, first.id, first.fingerprint);
	if (ss_state_dims_check(&first.dims, &m->dims, why) != 0)
		cli_die("%s: record %llu (id \"%s\"): dims differ from %s: record %llu (id \"%s\"): %s",
			path, (unsigned long long)rec, m->id, first.path, (unsigned long long)first.rec,
			first.id, why);
	if (m->dtype != first.dtype)
		first.mixed_dtype = 1;
}

/* Decodes a record's metadata (state records only) or dies naming it. */
static void record_meta(const ss_record *rec, ss_state *m, const char *path, uint64_t recno)
{
	char err[SS_ERRMSG_MAX];
	if (ss_record_state_meta(rec, m, err) != 0)
		cli_die("%s: record %llu (byte offset %llu): %s", path, (unsigned long long)recno,
			(unsigned long long)ss_record_offset(rec), err);
}

/* What the first pass of a two-pass mode keeps per input state. */
typedef struct {
	int spooled;      /* its ssm+conv (f32) are in the spool file */
	int64_t n_tokens;
	char *id;
} meta_t;

typedef struct {
	size_t n, cap, H;
	float *decay;     /* [n][H] */
	meta_t *m;        /* [n] */
} plan_t;

static void plan_push(plan_t *p, const ss_state *s, int spooled)
{
	if (!p->H)
		p->H = ss_state_logdecay_len(&s->dims);
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 64;
		p->decay = realloc(p->decay, p->cap * p->H * sizeof *p->decay);
		p->m = realloc(p->m, p->cap * sizeof *p->m);
		if (!p->decay || !p->m)
			cli_die("out of memory");
	}
	memcpy(p->decay + p->n * p->H, s->logdecay, p->H * sizeof *p->decay);
	p->m[p->n].spooled = spooled;
	p->m[p->n].n_tokens = s->n_tokens;
	p->m[p->n].id = strdup(s->id ? s->id : "");
	p->n++;
}

static void add_or_die(ss_composer *c, const ss_record *rec, const char *path, uint64_t recno, const char *id)
{
	char err[SS_ERRMSG_MAX];
	if (ss_composer_add_record(c, rec, err) != 0)
		cli_die("%s: record %llu (id \"%s\"): %s", path, (unsigned long long)recno, id, err);
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

static void write_weights(const char *path, const ss_state *s, ss_compose_mode mode, int norm,
			  ss_compose_conv conv)
{
	cJSON *j = cJSON_CreateObject(), *src = cJSON_CreateArray();
	size_t L = (size_t)s->dims.n_layer, H = (size_t)s->dims.nheads, n = (size_t)s->n_sources;
	cJSON_AddStringToObject(j, "id", s->id);
	cJSON_AddStringToObject(j, "mode", ss_compose_mode_name(mode));
	cJSON_AddStringToObject(j, "norm", ss_compose_norm_name(norm));
	cJSON_AddStringToObject(j, "conv", ss_compose_conv_name(conv));
	cJSON_AddNumberToObject(j, "n_layer", (double)L);
	cJSON_AddNumberToObject(j, "nheads", (double)H);
	cJSON_AddNumberToObject(j, "n_tokens", (double)s->n_tokens);
	for (size_t k = 0; k < n; k++)
		cJSON_AddItemToArray(src, cJSON_CreateString(s->sources[k]));
	cJSON_AddItemToObject(j, "sources", src);
	if (s->weights) {
		cJSON *wl = cJSON_CreateArray();
		for (size_t l = 0; l < L; l++) {
			cJSON *wh = cJSON_CreateArray();
			for (size_t h = 0; h < H; h++) {
				cJSON *wk = cJSON_CreateArray();
				for (size_t k = 0; k < n; k++)
					cJSON_AddItemToArray(wk, json_float(s->weights[(l * H + h) * n + k]));
				cJSON_AddItemToArray(wh, wk);
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
	int to_stdout = strcmp(path, "-") == 0;
	FILE *f = to_stdout ? stdout : fopen(path, "w");
	if (!f)
		cli_die("%s: %s", path, strerror(errno));
	fputs(txt, f);
	fputc('\n', f);
	free(txt);
	if (!to_stdout && (ferror(f) | fclose(f)))
		cli_die("%s: write error: %s", path, strerror(errno));
}

int main(int argc, char **argv)
{
	cli_init("ss-compose");
	atexit(abort_output);
	ss_compose_opts o = {SS_COMPOSE_PICASO_R, 0, SS_COMPOSE_CONV_MEAN};
	const char *out_path = "-", *weights_path = NULL, *id = NULL;
	int have_dtype = 0, level = OUT_LEVEL_DEFAULT;
	ss_dtype out_dtype = SS_DTYPE_F32;
	static const struct option opts[] = {
		{"mode", required_argument, 0, 'm'}, {"norm", required_argument, 0, 'N'},
		{"conv", required_argument, 0, 'C'}, {"state-dtype", required_argument, 0, 'D'},
		{"weights", required_argument, 0, 'W'}, {"id", required_argument, 0, 'I'},
		{"level", required_argument, 0, 'l'}, {0, 0, 0, 0},
	};
	const cli_options co = {"l:", opts, usage, help, &out_path};
	int ch;
	while ((ch = cli_getopt(argc, argv, &co)) != -1) {
		switch (ch) {
		case 'm':
			if (ss_compose_mode_parse(optarg, &o.mode))
				cli_usage(usage, "--mode: unknown mode '%s' (caso, picaso-s, picaso-r, soup, sum, max)",
					  optarg);
			break;
		case 'N':
			if (ss_compose_norm_parse(optarg, &o.norm))
				cli_usage(usage, "--norm: '%s' is not none, before, after or both", optarg);
			break;
		case 'C':
			if (ss_compose_conv_parse(optarg, &o.conv))
				cli_usage(usage, "--conv: '%s' is not mean or last", optarg);
			break;
		case 'D':
			if (ss_dtype_parse(optarg, &out_dtype))
				cli_usage(usage, "--state-dtype: '%s' is not f32, f16 or bf16", optarg);
			have_dtype = 1;
			break;
		case 'W': weights_path = optarg; break;
		case 'I':
			if (!*optarg)
				cli_usage(usage, "--id: empty id");
			id = optarg;
			break;
		case 'l': level = (int)cli_long("--level", optarg, -7, 19, usage); break;
		}
	}
	if (weights_path && !strcmp(weights_path, "-") && !strcmp(out_path, "-"))
		cli_usage(usage, "--weights -: standard output already carries the state (use -o FILE)");
	char *stdin_only[] = {"-"};
	char **files = optind < argc ? argv + optind : stdin_only;
	int nfiles = optind < argc ? argc - optind : 1;
	int n_stdin = 0;
	for (int i = 0; i < nfiles; i++)
		n_stdin += !strcmp(files[i], "-");
	if (n_stdin > 1)
		cli_usage(usage, "standard input ('-') given more than once");

	char err[SS_ERRMSG_MAX];
	/* Open the output first: a terminal or an unwritable path fails before
	 * any work. */
	if (ss_writer_open(&out_w, out_path, level ? level : SS_ZSTD_LEVEL_DEFAULT, err) != 0)
		cli_die("%s: %s", out_path, err);

	ss_composer *c;
	if (ss_composer_new(&c, &o) != 0)
		cli_die("out of memory");
	uint64_t max = cli_max_record();
	double t0 = cli_now();
	uint64_t bytes_in = 0;
	const ss_record *rec;
	ss_state m;
	int rc;

	if (!ss_compose_needs_plan(o.mode)) {
		/* One streaming pass. */
		for (int i = 0; i < nfiles; i++) {
			ss_reader *r;
			if ((rc = ss_reader_open(&r, files[i], max, err)) != 0)
				cli_die("%s: %s", files[i], err);
			uint64_t recno = 0;
			while ((rc = ss_reader_next(r, &rec)) == 1) {
				record_meta(rec, &m, files[i], recno);
				check_compat(&m, files[i], recno);
				add_or_die(c, rec, files[i], recno, m.id);
				ss_state_free(&m);
				bytes_in += ss_record_size(rec);
				recno++;
				cli_progress("%zu states", ss_composer_count(c));
			}
			if (rc < 0)
				cli_die("%s: %s", files[i], ss_reader_error(r));
			ss_reader_close(r);
		}
	} else {
		/* Pass 1: decays (and a pipe's states, spooled). */
		plan_t plan = {0};
		FILE *spool = NULL;
		ss_reader *stdin_r = NULL;
		uint64_t stdin_off = 0;
		int *seekable = calloc((size_t)nfiles, sizeof *seekable);
		size_t *count = calloc((size_t)nfiles, sizeof *count);
		if (!seekable || !count)
			cli_die("out of memory");
		for (int i = 0; i < nfiles; i++) {
			ss_reader *r;
			if ((rc = ss_reader_open(&r, files[i], max, err)) != 0)
				cli_die("%s: %s", files[i], err);
			seekable[i] = ss_reader_seekable(r);
			uint64_t recno = 0;
			while ((rc = seekable[i] ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec)) == 1) {
				if (recno == 0)
					stdin_off = !strcmp(files[i], "-") ? ss_record_offset(rec) : stdin_off;
				if (seekable[i]) {
					record_meta(rec, &m, files[i], recno);
					check_compat(&m, files[i], recno);
				} else {
					if (ss_record_state(rec, &m, err) != 0)
						cli_die("%s: record %llu (byte offset %llu): %s", files[i],
							(unsigned long long)recno,
							(unsigned long long)ss_record_offset(rec), err);
					check_compat(&m, files[i], recno);
					if (!spool && !(spool = tmpfile()))
						cli_die("cannot create a spool file in $TMPDIR: %s", strerror(errno));
					size_t ns = ss_state_ssm_len(&m.dims), nc = ss_state_conv_len(&m.dims);
					if (fwrite(m.ssm, 4, ns, spool) != ns || fwrite(m.conv, 4, nc, spool) != nc)
						cli_die("spool file: write error: %s", strerror(errno));
				}
				plan_push(&plan, &m, !seekable[i]);
				ss_state_free(&m);
				recno++;
				cli_progress("%zu decays", plan.n);
			}
			if (rc < 0)
				cli_die("%s: %s", files[i], ss_reader_error(r));
			count[i] = recno;
			if (seekable[i] && !strcmp(files[i], "-"))
				stdin_r = r; /* cannot reopen stdin: seek back instead */
			else
				ss_reader_close(r);
		}
		if (plan.n == 0)
			cli_die("no input states");
		if (ss_composer_plan(c, plan.n, plan.H, plan.decay, err) != 0)
			cli_die("%s", err);
		if (spool && (fflush(spool) != 0 || fseek(spool, 0, SEEK_SET) != 0))
			cli_die("spool file: %s", strerror(errno));

		/* Pass 2: accumulate. */
		size_t k = 0, ns = ss_state_ssm_len(&first.dims), nc = ss_state_conv_len(&first.dims);
		float *sp_ssm = NULL, *sp_conv = NULL;
		for (int i = 0; i < nfiles; i++) {
			if (!seekable[i]) {
				if (!sp_ssm) {
					sp_ssm = malloc(ns * sizeof *sp_ssm);
					sp_conv = malloc(nc * sizeof *sp_conv);
					if (!sp_ssm || !sp_conv)
						cli_die("out of memory");
				}
				for (size_t j = 0; j < count[i]; j++, k++) {
					if (fread(sp_ssm, 4, ns, spool) != ns || fread(sp_conv, 4, nc, spool) != nc)
						cli_die("spool file: read error");
					ss_state v = {0};
					v.id = plan.m[k].id;
					memcpy(v.fingerprint, first.fingerprint, sizeof v.fingerprint);
					v.dims = first.dims;
					v.n_tokens = plan.m[k].n_tokens;
					v.logdecay = plan.decay + k * plan.H;
					if (ss_composer_add_arrays(c, &v, sp_ssm, sp_conv, SS_DTYPE_F32, err) != 0)
						cli_die("%s: record %zu (id \"%s\"): %s", files[i], j, v.id, err);
					bytes_in += (ns + nc) * 4;
					cli_progress("%zu/%zu states", k + 1, plan.n);
				}
				continue;
			}
			ss_reader *r = stdin_r;
			if (r && !strcmp(files[i], "-")) {
				if (ss_reader_seek(r, stdin_off) != 0)
					cli_die("-: %s", ss_reader_error(r));
			} else if ((rc = ss_reader_open(&r, files[i], max, err)) != 0) {
				cli_die("%s: %s", files[i], err);
			}
			uint64_t recno = 0;
			while (recno < count[i] && (rc = ss_reader_next(r, &rec)) == 1) {
				add_or_die(c, rec, files[i], recno, plan.m[k].id);
				bytes_in += ss_record_size(rec);
				recno++, k++;
				cli_progress("%zu/%zu states", k, plan.n);
			}
			if (rc < 0)
				cli_die("%s: %s", files[i], ss_reader_error(r));
			if (recno < count[i])
				cli_die("%s: has %llu records now, %zu in the first pass (file changed?)", files[i],
					(unsigned long long)recno, count[i]);
			ss_reader_close(r);
		}
		if (spool)
			fclose(spool);
		free(sp_ssm);
		free(sp_conv);
		for (size_t j = 0; j < plan.n; j++)
			free(plan.m[j].id);
		free(plan.m);
		free(plan.decay);
		free(seekable);
		free(count);
	}
	cli_progress_end();

	ss_state out;
	if (ss_composer_count(c) == 0)
		cli_die("no input states");
	if (ss_composer_finish(c, &out, err) != 0)
		cli_die("%s", err);
	ss_composer_free(c);
	out.dtype = have_dtype ? out_dtype : first.mixed_dtype ? SS_DTYPE_F32 : first.dtype;
	if (id) {
		free(out.id);
		if (!(out.id = strdup(id)))
			cli_die("out of memory");
	}
	if (weights_path)
		write_weights(weights_path, &out, o.mode, o.norm, o.conv);
	if ((rc = ss_writer_put_state(out_w, &out, NULL)) != 0) {
		ss_writer *w = out_w;
		out_w = NULL;
		cli_writer_die(w, out_path, rc);
	}
	ss_writer *w = out_w;
	out_w = NULL;
	if (ss_writer_close(w, err) != 0)
		cli_die("%s: %s", out_path, err);
	if (cli_verbosity >= 2) {
		double elapsed_s = cli_now() - t0;
		fprintf(stderr, "ss-compose: %d states, %.1f MB in %.3g s (%.3g GB/s), mode %s\n",
			(int)out.n_sources, bytes_in / 1e6, elapsed_s,
			elapsed_s > 0 ? bytes_in / elapsed_s / 1e9 : 0.0,
			ss_compose_mode_name(o.mode));
	}
	ss_state_free(&out);
	free(first.path);
	free(first.id);
	return 0;
}
