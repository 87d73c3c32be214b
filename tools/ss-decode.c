/*
 * ss-decode — generate text from a state: feed a prompt, then sample tokens
 * (greedy by default) and stream them to stdout as they are produced. With
 * --prompts, every state is continued with every prompt of a JSONL file, in
 * one model load.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "ss.h"

static const char *usage =
	"ss-decode [--model DIR] [--state FILE | --no-state]\n"
	"                 [--prompt TEXT | --prompt-file FILE | --prompt-tokens IDS |\n"
	"                  --prompts FILE] [--greedy | --temperature T] [--top-k K] [--top-p P]\n"
	"                 [--min-p P] [--repeat-penalty F] [--repeat-last-n N] [--seed S]\n"
	"                 [-n|--max-tokens N] [--stop STRING]... [--ignore-eos] [--ids] [--jsonl]\n"
	"                 [--tokenizer FILE] [--device D] [--threads N] [--weights-dtype T]\n"
	"                 [-o FILE] [-q|-v]";

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Start from a state, feed a prompt, and generate tokens, writing each one's\n"
	       "text to stdout as soon as it is produced (then a newline).\n\n"
	       "  --state FILE         state stream to start from ('-' = stdin); one output\n"
	       "                       per state. Default: stdin when it is not a terminal\n"
	       "                       (the zero state if it is empty), else the zero state\n"
	       "  --no-state           start from the zero state\n"
	       "  -p, --prompt TEXT    the prompt (must not be empty: the first token is\n"
	       "                       sampled from the logits of the prompt's last token)\n"
	       "  -f, --prompt-file FILE  the prompt, read from FILE\n"
	       "  --prompt-tokens IDS  the prompt as token ids (\"1,2,3\")\n"
	       "  --prompts FILE       JSON lines {\"id\", \"prompt\"[, \"max_tokens\", \"seed\",\n"
	       "                       \"stop\"]} ('-' = stdin): every state continues\n"
	       "                       every prompt, in order\n"
	       "  --greedy             pick the most likely token (default); = --temperature 0\n"
	       "  --temperature T      sample from softmax(logits / T) (alias --temp); 0 =\n"
	       "                       greedy (default 0, or 1 when --top-k, --top-p or\n"
	       "                       --min-p is given)\n"
	       "  --top-k K            sample among the K most likely tokens only\n"
	       "  --top-p P            sample from the smallest set of tokens with\n"
	       "                       probability >= P (nucleus), 0 < P <= 1\n"
	       "  --min-p P            drop tokens less likely than P times the most likely\n"
	       "  --repeat-penalty F   divide (positive) or multiply (negative) the logits of\n"
	       "                       the last --repeat-last-n tokens by F (default 1: off)\n"
	       "  --repeat-last-n N    tokens of prompt + output the penalty looks back on\n"
	       "                       (default 64; -1 = all, 0 = off)\n"
	       "  -s, --seed S         seed of the sampler, the same for every output\n"
	       "                       (default: from the clock; greedy uses none)\n"
	       "  -n, --max-tokens N   generate at most N tokens (default 64; alias\n"
	       "                       --n-predict)\n"
	       "  --stop STRING        stop when the output contains STRING, which is not\n"
	       "                       printed (repeatable)\n"
	       "  --ignore-eos         do not stop at the end-of-text token (config's\n"
	       "                       eos_token_id, 0 for GPT-NeoX)\n"
	       "  --ids                print token ids (space-separated) instead of text\n"
	       "  --jsonl              one JSON line per output: {\"id\", \"text\", \"tokens\",\n"
	       "                       \"finish_reason\"} (no \"text\" with --ids; with\n"
	       "                       --prompts \"id\" is the prompt's, \"state\" the state's)\n",
	       usage);
	cli_model_help(23);
	printf("  -o FILE              output file (replaced only on success)\n"
	       "  -q, -v               quieter; more verbose (-v: tokens/s at the end)\n"
	       "  -h, --help           this help;  -V, --version  the version\n\n");
	cli_defaults_help();
	exit(0);
}

/* ------------------------------------------------------------------------
 * Generation options (llama.cpp's names where it has one), parsed apart from
 * the model options.
 */
enum { O_GREEDY = 512, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_REPPEN, O_REPLAST, O_SEED, O_MAX,
       O_STOP, O_PROMPTS };
#define GEN_LONG_OPTIONS                                                                   \
	{ "greedy", no_argument, 0, O_GREEDY }, { "temperature", required_argument, 0, O_TEMP }, \
	{ "temp", required_argument, 0, O_TEMP },                                              \
	{ "top-k", required_argument, 0, O_TOPK }, { "top-p", required_argument, 0, O_TOPP },   \
	{ "min-p", required_argument, 0, O_MINP },                                             \
	{ "repeat-penalty", required_argument, 0, O_REPPEN },                                  \
	{ "repeat-last-n", required_argument, 0, O_REPLAST },                                  \
	{ "seed", required_argument, 0, O_SEED }, { "max-tokens", required_argument, 0, O_MAX }, \
	{ "n-predict", required_argument, 0, O_MAX }, { "stop", required_argument, 0, O_STOP },  \
	{ "prompts", required_argument, 0, O_PROMPTS }
#define MAX_TOKENS_LIMIT (1L << 30)

typedef struct {
	ss_sample_params sp;
	int greedy, have_temp, have_seed;
	uint64_t seed;
	long max_tokens;
	const char **stops; /* [n_stops], borrowed from argv */
	size_t n_stops;
	const char *prompts_path;
} gen_opts;

/* Takes option c if it is a generation option; returns 0 if it is not. */
static int gen_opt(gen_opts *g, int c, const char *arg)
{
	switch (c) {
	case O_GREEDY: g->greedy = 1; break;
	case O_TEMP:
		g->sp.temperature = (float)cli_double("--temperature", arg, 0, 1e6, usage);
		g->have_temp = 1;
		break;
	case O_TOPK: g->sp.top_k = (int32_t)cli_long("--top-k", arg, 0, INT32_MAX, usage); break;
	case O_TOPP: g->sp.top_p = (float)cli_double("--top-p", arg, 1e-30, 1, usage); break;
	case O_MINP: g->sp.min_p = (float)cli_double("--min-p", arg, 0, 1, usage); break;
	case O_REPPEN:
		g->sp.repeat_penalty = (float)cli_double("--repeat-penalty", arg, 1e-30, 1e6, usage);
		break;
	case O_REPLAST:
		g->sp.repeat_last_n = (int32_t)cli_long("--repeat-last-n", arg, -1, 1L << 20, usage);
		break;
	case 's':
	case O_SEED:
		g->seed = (uint64_t)cli_long("--seed", arg, 0, INT64_MAX, usage);
		g->have_seed = 1;
		break;
	case O_MAX: g->max_tokens = cli_long("--max-tokens", arg, 0, MAX_TOKENS_LIMIT, usage); break;
	case 'n': g->max_tokens = cli_long("-n", arg, 0, MAX_TOKENS_LIMIT, usage); break;
	case O_STOP:
		if (!arg[0])
			cli_usage(usage, "--stop: empty string");
		g->stops[g->n_stops++] = arg;
		break;
	case O_PROMPTS: g->prompts_path = arg; break;
	default: return 0;
	}
	return 1;
}

/* After the options: --greedy is --temperature 0; a sampling filter without
 * a temperature implies T = 1 (HF generate()); the seed defaults to the
 * clock (greedy draws nothing, so a seed never matters there). */
static void gen_finish(gen_opts *g)
{
	if (g->greedy && g->sp.temperature > 0)
		cli_usage(usage, "--greedy excludes --temperature above 0");
	if (!g->have_temp && !g->greedy &&
	    (g->sp.top_k > 0 || g->sp.top_p < 1 || g->sp.min_p > 0))
		g->sp.temperature = 1;
	if (!g->have_seed)
		g->seed = (uint64_t)(cli_now() * 1e9) ^ ((uint64_t)getpid() << 32);
}

/* One prompt: from the command line (id NULL: outputs take the state's id)
 * or a line of --prompts. */
typedef struct {
	char *id;
	int32_t *ids;
	size_t n;
	long max_tokens;
	uint64_t seed;
	const char **stops; /* NULL: the command line's */
	size_t n_stops;
	char *stop_buf;     /* owns the strings of stops when from the line */
} prompt;

static void prompt_free(prompt *p)
{
	free(p->id);
	free(p->ids);
	free(p->stops);
	free(p->stop_buf);
}

/* Tokenizes text as a prompt, dying with `where` on failure or emptiness. */
static int32_t *prompt_tokens(ss_tokenizer *tok, const char *text, size_t len, size_t *n,
			      const char *where)
{
	int32_t *ids = NULL;
	char err[SS_ERRMSG_MAX] = "";
	int rc = ss_tokenizer_encode(tok, text, len, &ids, n, err);
	if (rc)
		cli_die("%s: %s", where, err[0] ? err : ss_strerror(rc));
	if (*n == 0)
		cli_die("%s: empty prompt: the first token needs the logits of a prompt token", where);
	return ids;
}

/* A line's "stop": a string or an array of non-empty strings, copied. */
static void line_stops(prompt *p, const cJSON *v, const char *where)
{
	free(p->stops);
	free(p->stop_buf);
	size_t n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : 0;
	size_t bytes = 0;
	const cJSON *e = cJSON_IsString(v) ? v : v->child;
	if (!cJSON_IsString(v) && !cJSON_IsArray(v))
		cli_die("%s: \"stop\" must be a string or an array of strings", where);
	for (size_t i = 0; i < n; i++, e = e->next) {
		if (!cJSON_IsString(e) || !e->valuestring[0])
			cli_die("%s: \"stop\" must hold non-empty strings", where);
		bytes += strlen(e->valuestring) + 1;
	}
	p->stops = malloc((n ? n : 1) * sizeof *p->stops);
	p->stop_buf = malloc(bytes ? bytes : 1);
	if (!p->stops || !p->stop_buf)
		cli_die("out of memory");
	char *b = p->stop_buf;
	e = cJSON_IsString(v) ? v : v->child;
	for (size_t i = 0; i < n; i++, e = e->next) {
		size_t l = strlen(e->valuestring) + 1;
		memcpy(b, e->valuestring, l);
		p->stops[i] = b;
		b += l;
	}
	p->n_stops = n;
}

/* A non-negative integer field of a line, at most hi. */
static long line_int(const cJSON *v, const char *key, long hi, const char *where)
{
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)hi ||
	    v->valuedouble != (double)(long)v->valuedouble)
		cli_die("%s: \"%s\" must be an integer in [0, %ld]", where, key, hi);
	return (long)v->valuedouble;
}

/* Reads --prompts: one JSON object a line, blank lines skipped. Keys: "id"
 * (string or number; default FILE:LINE), "prompt" (text, required),
 * "max_tokens" or "n_predict", "seed", "stop"; any other key is an error
 * (a misspelt option must not be ignored). */
static prompt *read_prompts(const char *path, ss_tokenizer *tok, const gen_opts *g, size_t *np)
{
	mcli_jsonl r;
	mcli_jsonl_open(&r, path);
	mcli_jsonl_limit(&r, MCLI_MAX_TEXT, "a --prompts file");
	prompt *ps = NULL;
	size_t n = 0, cap = 0;
	cJSON *o;
	while ((o = mcli_jsonl_next(&r, "{\"id\": ..., \"prompt\": \"...\"}"))) {
		const char *where = r.where;
		ps = mcli_grow(ps, n, &cap, sizeof *ps);
		prompt *p = &ps[n];
		*p = (prompt){ .max_tokens = g->max_tokens, .seed = g->seed };
		int have_prompt = 0;
		const cJSON *v;
		cJSON_ArrayForEach(v, o) {
			const char *k = v->string;
			/* cJSON keeps a repeated key: the last one wins (for "id" the first) */
			if (!strcmp(k, "id")) {
				continue; /* below */
			} else if (!strcmp(k, "prompt")) {
				if (!cJSON_IsString(v))
					cli_die("%s: \"prompt\" must be a string", where);
				free(p->ids);
				p->ids = prompt_tokens(tok, v->valuestring, strlen(v->valuestring), &p->n,
						       where);
				have_prompt = 1;
			} else if (!strcmp(k, "max_tokens") || !strcmp(k, "n_predict")) {
				p->max_tokens = line_int(v, k, MAX_TOKENS_LIMIT, where);
			} else if (!strcmp(k, "seed")) {
				p->seed = (uint64_t)line_int(v, k, INT64_MAX / 2, where);
			} else if (!strcmp(k, "stop")) {
				line_stops(p, v, where);
			} else {
				cli_die("%s: unknown key \"%s\" (known: id, prompt, max_tokens, n_predict, "
					"seed, stop)", where, k);
			}
		}
		if (!have_prompt)
			cli_die("%s: missing \"prompt\" (a string)", where);
		p->id = mcli_jsonl_id(&r, o);
		cJSON_Delete(o);
		n++;
	}
	mcli_jsonl_close(&r);
	if (n == 0)
		cli_die("%s: no prompt", path);
	*np = n;
	return ps;
}

/* Growable output of one generation: the ids and the bytes of their text. */
typedef struct {
	int32_t *ids;
	size_t n, cap;
	char *text;
	size_t len, text_cap;
} gen_buf;

static void gen_push(gen_buf *b, int32_t t, const char *bytes, size_t bl)
{
	if (b->n == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 256;
		if (!(b->ids = realloc(b->ids, b->cap * sizeof *b->ids)))
			cli_die("out of memory");
	}
	b->ids[b->n++] = t;
	if (b->len + bl + 1 > b->text_cap) {
		b->text_cap = 2 * (b->len + bl + 1) + 1024;
		if (!(b->text = realloc(b->text, b->text_cap)))
			cli_die("out of memory");
	}
	memcpy(b->text + b->len, bytes, bl);
	b->len += bl;
	b->text[b->len] = 0;
}

/* What one generation needs, fixed for the run. */
typedef struct {
	ss_forward_ctx *ctx;
	ss_sampler *smp;
	const ss_tokenizer *tok; /* NULL: ids only, no stop strings */
	float *logits;           /* [vocab_padded] */
	int32_t eos;             /* -1: none */
	const char *const *stops; /* the command line's */
	size_t n_stops;
	int jsonl, ids_out;
	const char *state_path, *out_path; /* for messages */
	char where[600];          /* the state record being continued, for messages */
	size_t n_vocab;           /* logits [0, n_vocab) are checked finite */
	FILE *out;
	gen_buf gb;
} decoder;

/* Dies naming the state record when the logits hold a NaN or +inf: what
 * a state or model whose values overflow gives, and no distribution to
 * sample (greedy would pick among the rest as if nothing were wrong). */
static void check_logits(const decoder *d, size_t n_done)
{
	for (size_t i = 0; i < d->n_vocab; i++)
		if (isnan(d->logits[i]) || d->logits[i] == INFINITY)
			cli_die("%s: logit %zu is %g after %zu generated tokens, not finite (the state's or the "
				"model's values overflow)", d->where, i, isnan(d->logits[i]) ? NAN : (double)d->logits[i], n_done);
}

/* Continues state `from` (left as it is when `keep`, else advanced) with
 * prompt pr, writing one output. Returns the number of tokens generated. */
static long generate(decoder *d, ss_state *from, const prompt *pr, int keep)
{
	FILE *out = d->out;
	gen_buf *gb = &d->gb;
	char err[SS_ERRMSG_MAX] = "";
	ss_state copy, *st = from;
	if (keep) {
		if (ss_state_copy(&copy, from))
			cli_die("out of memory");
		st = &copy;
	}
	const char *const *stops = pr->stops ? pr->stops : d->stops;
	size_t n_stops = pr->stops ? pr->n_stops : d->n_stops;
	ss_sampler_reset(d->smp, pr->seed);
	for (size_t i = 0; i < pr->n; i++)
		ss_sampler_accept(d->smp, pr->ids[i]);
	ss_forward_seq seq = { .tokens = pr->ids, .n_tokens = (int64_t)pr->n, .state = st,
			       .logits = d->logits };
	if (ss_forward_prefill(d->ctx, &seq, 1, SS_LOGITS_LAST, err))
		cli_die("%s: %s", d->state_path, err);
	check_logits(d, 0);
	if (d->jsonl) {
		fputs("{\"id\":", out);
		mcli_json_str(out, pr->id ? pr->id : from->id, (size_t)-1);
		if (pr->id) {
			fputs(",\"state\":", out);
			mcli_json_str(out, from->id, (size_t)-1);
		}
	}
	/* the state stays on the device (GPU) for the whole generation */
	if (ss_forward_decode_begin(d->ctx, &st, 1, err))
		cli_die("%s: %s", from->id, err);
	const char *finish = "length";
	size_t emitted = 0; /* bytes of gb->text written (text output) */
	gb->n = gb->len = 0;
	while ((long)gb->n < pr->max_tokens) {
		int32_t t = ss_sampler_sample(d->smp, d->logits);
		if (t < 0)
			cli_die("%s: the logits are all -inf", d->where);
		if (t == d->eos) {
			finish = "eos";
			break;
		}
		ss_sampler_accept(d->smp, t);
		size_t bl = 0, from_len = gb->len, safe = 0;
		const char *b = d->tok ? ss_tokenizer_id_bytes(d->tok, t, &bl) : NULL;
		gen_push(gb, t, b ? b : "", b ? bl : 0);
		int64_t cut = -1;
		if (n_stops)
			cut = ss_stop_find(gb->text, gb->len, from_len, stops, n_stops, &safe);
		else
			safe = gb->len;
		if (!d->jsonl) {
			if (d->ids_out) {
				fprintf(out, gb->n > 1 ? " %d" : "%d", (int)t);
			} else if (safe > emitted) {
				fwrite(gb->text + emitted, 1, safe - emitted, out);
				emitted = safe;
			}
			fflush(out);
		}
		if (cut >= 0) {
			gb->len = (size_t)cut;
			finish = "stop";
			break;
		}
		if ((long)gb->n < pr->max_tokens &&
		    ss_forward_decode_next(d->ctx, &t, d->logits, NULL, 0, err))
			cli_die("%s: %s", from->id, err);
		if ((long)gb->n < pr->max_tokens)
			check_logits(d, gb->n);
	}
	if (ss_forward_decode_end(d->ctx, err))
		cli_die("%s: %s", from->id, err);
	if (!d->jsonl && !d->ids_out && gb->len > emitted)
		fwrite(gb->text + emitted, 1, gb->len - emitted, out);
	if (d->jsonl) {
		if (!d->ids_out) {
			fputs(",\"text\":", out);
			mcli_json_str(out, gb->text ? gb->text : "", gb->len);
		}
		fputs(",\"tokens\":[", out);
		for (size_t i = 0; i < gb->n; i++)
			fprintf(out, i ? ",%d" : "%d", (int)gb->ids[i]);
		fprintf(out, "],\"finish_reason\":\"%s\"}", finish);
	}
	putc('\n', out);
	fflush(out);
	if (ferror(out))
		cli_die("%s: write error: %s", d->out_path, strerror(errno));
	if (keep)
		ss_state_free(&copy);
	return (long)gb->n;
}

/* The command line. */
typedef struct {
	const char *state_path, *prompt_text, *prompt_file, *prompt_ids, *out_path, *model_dir;
	cli_model_opts mo;
	int no_state, ignore_eos, ids_out, jsonl;
	int implicit; /* the states come from a non-terminal stdin, not named */
	gen_opts g;
} decode_opts;

/* The options' argument checks: one prompt, the states and the prompt not
 * both from stdin, no input as the output. */
static void check_args(decode_opts *o)
{
	gen_opts *g = &o->g;
	if (o->state_path && o->no_state)
		cli_usage(usage, "--state and --no-state exclude each other");
	if ((o->prompt_text != NULL) + (o->prompt_file != NULL) + (o->prompt_ids != NULL) +
		    (g->prompts_path != NULL) != 1)
		cli_usage(usage, "give one prompt: --prompt, --prompt-file, --prompt-tokens or --prompts");
	gen_finish(g);
	const char *stdin_prompt = o->prompt_file ? o->prompt_file : g->prompts_path;
	int prompt_stdin = stdin_prompt && !strcmp(stdin_prompt, "-");
	if (!o->state_path && !o->no_state && !isatty(STDIN_FILENO) && !prompt_stdin) {
		o->state_path = "-";
		o->implicit = 1;
	}
	if (o->state_path && !strcmp(o->state_path, "-") && prompt_stdin)
		cli_usage(usage, "the states and the prompt cannot both come from stdin");
	const char *inputs[] = { o->state_path, o->prompt_file, g->prompts_path, o->mo.tokenizer };
	for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++)
		cli_out_not_input(o->out_path, inputs[i]);
	o->model_dir = cli_model_dir(o->mo.model, usage);
}

/* Reads the options into o; exits 2 on a usage error. */
static void parse_args(int argc, char **argv, decode_opts *o)
{
	enum { O_STATE = 256, O_NOSTATE, O_PROMPT, O_PFILE, O_PTOK, O_IGNEOS, O_IDS, O_JSONL };
	static const struct option opts[] = {
		{ "state", required_argument, 0, O_STATE },
		{ "no-state", no_argument, 0, O_NOSTATE },
		{ "prompt", required_argument, 0, O_PROMPT },
		{ "prompt-file", required_argument, 0, O_PFILE },
		{ "prompt-tokens", required_argument, 0, O_PTOK },
		{ "ignore-eos", no_argument, 0, O_IGNEOS },
		{ "ids", no_argument, 0, O_IDS },
		{ "jsonl", no_argument, 0, O_JSONL },
		GEN_LONG_OPTIONS,
		{ 0, 0, 0, 0 },
	};
	*o = (decode_opts){ .g = { .sp = { .temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0,
					   .repeat_penalty = 1, .repeat_last_n = 64 },
				   .max_tokens = 64 } };
	if (!(o->g.stops = malloc((size_t)argc * sizeof *o->g.stops)))
		cli_die("out of memory");
	const cli_options co = { "n:p:f:s:", opts, usage, help, &o->out_path, &o->mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case O_STATE: o->state_path = optarg; break;
		case O_NOSTATE: o->no_state = 1; break;
		case 'p':
		case O_PROMPT: o->prompt_text = optarg; break;
		case 'f':
		case O_PFILE: o->prompt_file = optarg; break;
		case O_PTOK: o->prompt_ids = optarg; break;
		case O_IGNEOS: o->ignore_eos = 1; break;
		case O_IDS: o->ids_out = 1; break;
		case O_JSONL: o->jsonl = 1; break;
		default: gen_opt(&o->g, c, optarg); break;
		}
	}
	if (optind < argc)
		cli_usage(usage, "unexpected argument '%s'", argv[optind]);
	check_args(o);
}

/* The prompts: --prompts' lines, or one (already in *one with
 * --prompt-tokens; else --prompt's or --prompt-file's text tokenized), each
 * token checked against the model's vocabulary. Returns them (one, or
 * malloc'd) and their number in *n. */
static prompt *load_prompts(const decode_opts *o, const ss_model *m, ss_tokenizer *tok,
			    prompt *one, size_t *n)
{
	prompt *ps = one;
	*n = 1;
	if (o->g.prompts_path) {
		ps = read_prompts(o->g.prompts_path, tok, &o->g, n);
	} else if (!o->prompt_ids) {
		size_t len;
		char *text = o->prompt_text ? strdup(o->prompt_text)
					    : mcli_read_file_max(o->prompt_file, MCLI_MAX_TEXT,
								 "a prompt file", &len);
		if (!text)
			cli_die("out of memory");
		one->ids = prompt_tokens(tok, text, strlen(text), &one->n,
					 o->prompt_text ? "--prompt" : o->prompt_file);
		free(text);
	}
	int32_t vocab = mcli_vocab(m);
	for (size_t j = 0; j < *n; j++)
		for (size_t i = 0; i < ps[j].n; i++)
			if (ps[j].ids[i] < 0 || ps[j].ids[i] >= vocab)
				cli_die("%s%sprompt token %zu is %d, outside the model's vocabulary [0, %d)",
					ps[j].id ? ps[j].id : "", ps[j].id ? ": " : "", i,
					(int)ps[j].ids[i], (int)vocab);
	return ps;
}

/* Generates every prompt from every state of the input (or the zero state)
 * into d->out; -v prints the summary. */
static void decode_all(decoder *d, const decode_opts *o, ss_model *m, const prompt *ps,
		       size_t n_prompts)
{
	mcli_states src;
	mcli_states_open(&src, o->state_path, o->implicit);
	ss_state st;
	double t0 = cli_now();
	long long total = 0;
	while (mcli_states_next(&src, m, o->model_dir, &st)) {
		if (o->state_path)
			snprintf(d->where, sizeof d->where, "%s: record %llu (id \"%.400s\")",
				 o->state_path, (unsigned long long)src.count - 1, st.id);
		else
			snprintf(d->where, sizeof d->where, "%s: the zero state", o->model_dir);
		for (size_t j = 0; j < n_prompts; j++)
			total += generate(d, &st, &ps[j], n_prompts > 1);
		ss_state_free(&st);
	}
	mcli_states_close(&src);
	cli_out_close(d->out);
	if (cli_verbosity >= 2) {
		double elapsed_s = cli_now() - t0;
		fprintf(stderr, "ss-decode: %lld %s in %.2f s (%.1f tokens/s)", total,
			cli_plural((uint64_t)total, "token", "tokens"), elapsed_s,
			elapsed_s > 0 ? total / elapsed_s : 0.0);
		if (o->g.sp.temperature > 0)
			fprintf(stderr, ", seed %llu", (unsigned long long)o->g.seed);
		putc('\n', stderr);
	}
}

int main(int argc, char **argv)
{
	cli_init("ss-decode");
	decode_opts o;
	parse_args(argc, argv, &o);
	ss_device *dev = mcli_device(o.mo.device, usage);
	prompt one = { .max_tokens = o.g.max_tokens, .seed = o.g.seed };
	if (o.prompt_ids) {
		one.ids = mcli_parse_ids("--prompt-tokens", o.prompt_ids, &one.n, usage);
		if (one.n == 0)
			cli_usage(usage, "--prompt-tokens: empty prompt");
	}

	ss_model *m = mcli_load_model(o.model_dir, 0, o.mo.wtype, usage);
	ss_tokenizer *tok = NULL;
	if (!o.prompt_ids || !o.ids_out || o.g.n_stops || o.g.prompts_path)
		tok = cli_tokenizer(o.mo.tokenizer, o.model_dir);
	size_t n_prompts;
	prompt *ps = load_prompts(&o, m, tok, &one, &n_prompts);
	ss_forward_ctx *ctx = mcli_forward_ctx(m, o.model_dir, dev, o.mo.threads);
	ss_sampler *smp;
	if (ss_sampler_init(&smp, mcli_gen_vocab(m, tok), &o.g.sp, o.g.seed))
		cli_die("cannot create the sampler (out of memory?)");
	const size_t V = (size_t)m->cfg.vocab_padded;
	float *logits = malloc(V * sizeof *logits);
	if (!logits)
		cli_die("out of memory");
	decoder d = { .ctx = ctx, .smp = smp, .tok = tok, .logits = logits, .n_vocab = V,
		      .eos = o.ignore_eos ? -1 : m->cfg.eos_token_id,
		      .stops = o.g.stops, .n_stops = o.g.n_stops, .jsonl = o.jsonl,
		      .ids_out = o.ids_out, .state_path = o.state_path ? o.state_path : o.model_dir,
		      .out_path = o.out_path ? o.out_path : "standard output" };
	d.out = cli_out_open(o.out_path);
	decode_all(&d, &o, m, ps, n_prompts);

	for (size_t j = 0; j < n_prompts; j++)
		prompt_free(&ps[j]);
	if (ps != &one)
		free(ps);
	free(o.g.stops);
	free(d.gb.ids);
	free(d.gb.text);
	free(logits);
	ss_sampler_free(smp);
	ss_forward_ctx_free(ctx);
	ss_device_close(dev);
	ss_tokenizer_free(tok);
	ss_model_free(m);
	return 0;
}
