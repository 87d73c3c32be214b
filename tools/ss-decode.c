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
	"                 [--batch B]\n"
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
	       "  --prompts FILE       JSON lines {\"id\", \"prompt\"[, \"state\", \"max_tokens\",\n"
	       "                       \"stop\", \"seed\", \"temperature\", \"top_k\", \"top_p\",\n"
	       "                       \"min_p\", \"repeat_penalty\", \"repeat_last_n\"]} ('-' =\n"
	       "                       stdin): every state continues every prompt, in order;\n"
	       "                       with \"state\" (a state file) each line its own state\n"
	       "  --batch B            generate up to B outputs together, one decode step for\n"
	       "                       all (default: as many as 1 GiB of states holds); the\n"
	       "                       outputs are the same bytes whatever B\n"
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
	cli_common_help(23, CLI_HELP_MODEL | CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	printf("\n-v ends with the tokens/s.\n\n");
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
/* --batch: the most outputs generated together; its default holds their
 * states, logits rows and samplers to BATCH_BYTES (default_batch). */
#define BATCH_MAX (1L << 16)
#define BATCH_BYTES (1024.0 * 1024 * 1024)

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

static char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		cli_die("out of memory");
	return p;
}

/* One prompt: from the command line (id NULL: outputs take the state's id)
 * or a line of --prompts, with the settings it generates with. */
typedef struct {
	char *id;
	int32_t *ids;
	size_t n;
	long max_tokens;
	uint64_t seed;
	ss_sample_params sp;
	const char **stops; /* NULL: the command line's */
	size_t n_stops;
	char *stop_buf;     /* owns the strings of stops when from the line */
	char *state_path;   /* the line's "state" file; NULL: the input's states */
	char *where;        /* "FILE: line N"; NULL: the command line */
} prompt;

static void prompt_free(prompt *p)
{
	free(p->id);
	free(p->ids);
	free(p->stops);
	free(p->stop_buf);
	free(p->state_path);
	free(p->where);
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

/* An integer field of a line, in [lo, hi], read exactly (ss_json_int). */
static int64_t line_int(const cJSON *v, const char *key, int64_t lo, int64_t hi, const char *where)
{
	int64_t x;
	if (ss_json_int(v, lo, hi, &x))
		cli_die("%s: \"%s\" must be an integer in [%lld, %lld]", where, key, (long long)lo, (long long)hi);
	return x;
}

/* A number field of a line, in [lo, hi] (the command-line option's range). */
static float line_num(const cJSON *v, const char *key, double lo, double hi, const char *where)
{
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
		cli_die("%s: \"%s\" must be a number in [%g, %g]", where, key, lo, hi);
	return (float)v->valuedouble;
}

/* Takes key k of a line into p if it is a sampling setting (the command
 * line's option of the same name, with '_' for '-'); returns 0 if it is
 * not one. *have_temp: "temperature" was given. */
static int line_sampling(prompt *p, const char *k, const cJSON *v, const char *where,
			 int *have_temp)
{
	ss_sample_params *sp = &p->sp;
	if (!strcmp(k, "temperature") || !strcmp(k, "temp")) {
		sp->temperature = line_num(v, k, 0, 1e6, where);
		*have_temp = 1;
	} else if (!strcmp(k, "top_k")) {
		sp->top_k = (int32_t)line_int(v, k, 0, INT32_MAX, where);
	} else if (!strcmp(k, "top_p")) {
		sp->top_p = line_num(v, k, 1e-30, 1, where);
	} else if (!strcmp(k, "min_p")) {
		sp->min_p = line_num(v, k, 0, 1, where);
	} else if (!strcmp(k, "repeat_penalty")) {
		sp->repeat_penalty = line_num(v, k, 1e-30, 1e6, where);
	} else if (!strcmp(k, "repeat_last_n")) {
		sp->repeat_last_n = (int32_t)line_int(v, k, -1, 1L << 20, where);
	} else if (!strcmp(k, "seed")) {
		p->seed = (uint64_t)line_int(v, k, 0, INT64_MAX, where); /* --seed's range */
	} else {
		return 0;
	}
	return 1;
}

/* Reads --prompts: one JSON object a line, blank lines skipped. Keys: "id"
 * (string or number; default FILE:LINE), "prompt" (text, required),
 * "state" (a state file), "max_tokens" or "n_predict", "stop", and the
 * sampling settings (line_sampling); any other key is an error (a misspelt
 * option must not be ignored). "state" is on every line or on none. */
static prompt *read_prompts(const char *path, ss_tokenizer *tok, const gen_opts *g, size_t *np)
{
	mcli_jsonl r;
	mcli_jsonl_open(&r, path);
	mcli_jsonl_limit(&r, MCLI_MAX_TEXT, "a --prompts file");
	prompt *ps = NULL;
	size_t n = 0, cap = 0;
	cJSON *o;
	static const char *const keys[] = { "id", "prompt", "state", "max_tokens", "n_predict", "stop", "seed",
					    "temperature", "temp", "top_k", "top_p", "min_p", "repeat_penalty",
					    "repeat_last_n", NULL };
	while ((o = mcli_jsonl_next(&r, "{\"id\": ..., \"prompt\": \"...\"}", keys))) {
		const char *where = r.where;
		ps = mcli_grow(ps, n, &cap, sizeof *ps);
		prompt *p = &ps[n];
		*p = (prompt){ .max_tokens = g->max_tokens, .seed = g->seed, .sp = g->sp };
		int have_prompt = 0, have_temp = 0;
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
			} else if (!strcmp(k, "state")) {
				if (!cJSON_IsString(v) || !v->valuestring[0] || !strcmp(v->valuestring, "-"))
					cli_die("%s: \"state\" must name a state file (not \"-\")", where);
				if (access(v->valuestring, R_OK))
					cli_die("%s: \"state\": %s: %s", where, v->valuestring, strerror(errno));
				free(p->state_path);
				p->state_path = xstrdup(v->valuestring);
			} else if (!strcmp(k, "max_tokens") || !strcmp(k, "n_predict")) {
				p->max_tokens = line_int(v, k, 0, MAX_TOKENS_LIMIT, where);
			} else if (!strcmp(k, "stop")) {
				line_stops(p, v, where);
			} else {
				line_sampling(p, k, v, where, &have_temp); /* the keys left (mcli_jsonl_next) */
			}
		}
		if (!have_prompt)
			cli_die("%s: missing \"prompt\" (a string)", where);
		/* a line's cut without any temperature samples at T = 1, as on the command line */
		if (!have_temp && !g->have_temp && !g->greedy &&
		    (p->sp.top_k > 0 || p->sp.top_p < 1 || p->sp.min_p > 0))
			p->sp.temperature = 1;
		if (n > 0 && (p->state_path != NULL) != (ps[0].state_path != NULL))
			cli_die("%s: \"state\" must be on every line or on none (%s has %s)", where,
				ps[0].where, ps[0].state_path ? "one" : "none");
		p->id = mcli_jsonl_id(&r, o);
		p->where = xstrdup(where);
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

/* One output being generated: a prompt continued from its own state. */
typedef struct {
	const prompt *pr;
	ss_state st;        /* owned: the starting state, advanced by the steps */
	char *state_id;     /* the starting state's id */
	char where[1200];   /* the state record (and the line), for messages */
	ss_sampler *smp;    /* NULL once finished */
	gen_buf gb;
	size_t safe;        /* text bytes that can be written now (no stop string can begin in the rest) */
	size_t written;     /* text bytes (ids with --ids) written so far */
	int32_t next;       /* the token the next step feeds */
	const char *finish; /* NULL while generating */
} seq;

/* Where the outputs come from: every state of the input with every prompt
 * (states outer), or each prompt with the state its line names. */
typedef struct {
	const ss_model *m;
	const char *model_dir, *state_path;
	const prompt *ps;
	size_t n_prompts, next;   /* next prompt of the current state, or next line */
	int per_line;             /* the prompts name their states */
	mcli_states src;
	ss_state cur;             /* the current input state (have_cur) */
	int have_cur;
	char cur_where[600];
} seq_source;

/* The one state record of the file pr's line names, checked against m,
 * into *st (freed by the caller). The file must be a regular file (a FIFO
 * would block, a directory fail late); every error names the line: "PROMPTS:
 * line N: \"state\": FILE: ...", exit 1. */
static void line_state(const prompt *pr, const ss_model *m, const char *model_dir, ss_state *st)
{
	char label[1300], err[SS_ERRMSG_MAX] = "";
	snprintf(label, sizeof label, "%s: \"state\": %s", pr->where, pr->state_path);
	mcli_states src = { .path = label };
	if (ss_reader_open_regular(&src.r, pr->state_path, cli_max_record(), err))
		cli_die("%s: %s", label, err);
	mcli_states_next(&src, m, model_dir, st); /* dies on an empty file */
	ss_state extra;
	if (mcli_states_next(&src, m, model_dir, &extra))
		cli_die("%s holds more than one state record (compose them first: ss-compose)", label);
	mcli_states_close(&src);
}

static const prompt *sort_ps;
static int by_state_path(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int c = strcmp(sort_ps[i].state_path, sort_ps[j].state_path);
	return c ? c : (i > j) - (i < j);
}

/* All or nothing: every line's state file read whole and checked (each
 * file once, its first line named on error) before the first output, so
 * that a bad line stops the run with nothing written (ss-decode.1). */
static void check_line_states(const prompt *ps, size_t n, const ss_model *m, const char *model_dir)
{
	size_t *order = malloc((n ? n : 1) * sizeof *order);
	if (!order)
		cli_die("out of memory");
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	sort_ps = ps;
	qsort(order, n, sizeof *order, by_state_path);
	for (size_t k = 0; k < n; k++) {
		if (k && !strcmp(ps[order[k]].state_path, ps[order[k - 1]].state_path))
			continue;
		ss_state st;
		line_state(&ps[order[k]], m, model_dir, &st);
		ss_state_free(&st);
	}
	free(order);
}

/* The next output's prompt and starting state into s (a copy of the input
 * state, or the line's file read now); 0 at the end. Dies on a bad state. */
static int source_next(seq_source *j, seq *s)
{
	if (j->per_line) {
		if (j->next == j->n_prompts)
			return 0;
		s->pr = &j->ps[j->next++];
		line_state(s->pr, j->m, j->model_dir, &s->st);
		snprintf(s->where, sizeof s->where, "%s: %s: record 0 (id \"%.400s\")",
			 s->pr->where, s->pr->state_path, s->st.id);
		s->state_id = xstrdup(s->st.id);
		return 1;
	}
	if (!j->have_cur) {
		if (!mcli_states_next(&j->src, j->m, j->model_dir, &j->cur))
			return 0;
		j->have_cur = 1;
		j->next = 0;
		if (j->state_path)
			snprintf(j->cur_where, sizeof j->cur_where, "%s: record %llu (id \"%.400s\")",
				 j->state_path, (unsigned long long)j->src.count - 1, j->cur.id);
		else
			snprintf(j->cur_where, sizeof j->cur_where, "%s: the zero state", j->model_dir);
	}
	s->pr = &j->ps[j->next++];
	s->state_id = xstrdup(j->cur.id);
	if (s->pr->where)
		snprintf(s->where, sizeof s->where, "%s (%s)", j->cur_where, s->pr->where);
	else
		snprintf(s->where, sizeof s->where, "%s", j->cur_where);
	if (j->next == j->n_prompts) { /* the last prompt takes the state itself */
		s->st = j->cur;
		j->have_cur = 0;
	} else if (ss_state_copy(&s->st, &j->cur)) {
		cli_die("out of memory");
	}
	return 1;
}

/* What the generations share, fixed for the run, and the batch. */
typedef struct {
	ss_forward_ctx *ctx;
	const ss_tokenizer *tok;  /* NULL: ids only, no stop strings */
	int32_t gen_vocab;        /* ids the samplers draw from */
	int32_t eos;              /* -1: none */
	const char *const *stops; /* the command line's */
	size_t n_stops;
	int jsonl, ids_out;
	const char *out_path;     /* for messages */
	size_t V;                 /* vocab_padded: logits [0, V) are checked finite */
	FILE *out;
	int batch;                /* most sequences in a step */
	/* outputs in input order, not yet written: seqs[head, n) */
	seq **seqs;
	size_t n, cap, head;
	/* the batch: active[k] owns row k of logits; a step's arguments */
	seq **active;
	ss_state **sts;
	int32_t *toks;
	float *logits;            /* [cap_active][V] */
	int n_active, cap_active, bound;
	int together;             /* joiners prefilled in one call (seq_join) */
	long long total;
} decoder;

/* Dies naming the state record when a logits row holds a NaN or +inf: what
 * a state or model whose values overflow gives, and no distribution to
 * sample (greedy would pick among the rest as if nothing were wrong). */
static void check_logits(const decoder *d, const seq *s, const float *logits)
{
	for (size_t i = 0; i < d->V; i++)
		if (isnan(logits[i]) || logits[i] == INFINITY)
			cli_die("%s: logit %zu is %g after %zu generated tokens, not finite (the state's or the "
				"model's values overflow)", s->where, i, isnan(logits[i]) ? NAN : (double)logits[i],
				s->gb.n);
}

/* Room for one more sequence in the batch. */
static void batch_grow(decoder *d)
{
	if (d->n_active < d->cap_active)
		return;
	int c = d->cap_active ? 2 * d->cap_active : 4;
	if (c > d->batch)
		c = d->batch;
	if (!(d->active = realloc(d->active, (size_t)c * sizeof *d->active)) ||
	    !(d->sts = realloc(d->sts, (size_t)c * sizeof *d->sts)) ||
	    !(d->toks = realloc(d->toks, (size_t)c * sizeof *d->toks)) ||
	    !(d->logits = realloc(d->logits, (size_t)c * d->V * sizeof *d->logits)))
		cli_die("out of memory for a batch of %d", c);
	d->cap_active = c;
}

/* Writes the bound states back (the set is about to change). */
static void unbind(decoder *d)
{
	char err[SS_ERRMSG_MAX] = "";
	if (d->bound && ss_forward_decode_end(d->ctx, err))
		cli_die("decode: %s", err);
	d->bound = 0;
}

/* js[0..nj) join the batch: their samplers, their prompts prefilled, the
 * first logits into their rows. Prefilled in one call when d->together (a
 * deterministic CPU context gives each sequence of a call the bits it gets
 * alone, ss_forward_ctx_set_deterministic, and one call's GEMMs take every
 * prompt's rows at once), else each alone. A call refused before any
 * state changed (bad arguments: SS_ERR_INVALID, SS_ERR_MISMATCH) is run
 * again a prompt at a time, to name the prompt. */
static void seq_join(decoder *d, seq **js, int nj)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_forward_seq *q = calloc((size_t)nj, sizeof *q);
	if (!q)
		cli_die("out of memory");
	int first = d->n_active;
	for (int j = 0; j < nj; j++) {
		seq *s = js[j];
		const prompt *pr = s->pr;
		batch_grow(d);
		if (ss_sampler_init(&s->smp, d->gen_vocab, &pr->sp, pr->seed))
			cli_die("%s: cannot create the sampler (out of memory?)", s->where);
		for (size_t i = 0; i < pr->n; i++)
			ss_sampler_accept(s->smp, pr->ids[i]);
		d->active[d->n_active++] = s;
	}
	for (int j = 0; j < nj; j++) /* the rows once d->logits has grown */
		q[j] = (ss_forward_seq){ .tokens = js[j]->pr->ids, .n_tokens = (int64_t)js[j]->pr->n,
					 .state = &js[j]->st, .logits = d->logits + (size_t)(first + j) * d->V };
	int rc = d->together && nj > 1 ? ss_forward_prefill(d->ctx, q, nj, SS_LOGITS_LAST, err) : SS_ERR_INVALID;
	if (rc && rc != SS_ERR_INVALID && rc != SS_ERR_MISMATCH)
		cli_die("%s (and the %d prompts after it): %s", js[0]->where, nj - 1, err);
	for (int j = 0; rc && j < nj; j++)
		if (ss_forward_prefill(d->ctx, &q[j], 1, SS_LOGITS_LAST, err))
			cli_die("%s: %s", js[j]->where, err);
	for (int j = 0; j < nj; j++)
		check_logits(d, js[j], q[j].logits);
	free(q);
}

/* One token of s from its logits row: 1 when s goes on (s->next is to be
 * fed), 0 when it has finished (s->finish set). */
static int seq_take(decoder *d, seq *s, const float *logits)
{
	const prompt *pr = s->pr;
	const char *const *stops = pr->stops ? pr->stops : d->stops;
	size_t n_stops = pr->stops ? pr->n_stops : d->n_stops;
	if ((long)s->gb.n >= pr->max_tokens) {
		s->finish = "length";
		return 0;
	}
	int32_t t = ss_sampler_sample(s->smp, logits);
	if (t < 0)
		cli_die("%s: the logits are all -inf", s->where);
	if (t == d->eos) {
		s->finish = "eos";
		return 0;
	}
	ss_sampler_accept(s->smp, t);
	size_t bl = 0, from = s->gb.len;
	const char *b = d->tok ? ss_tokenizer_id_bytes(d->tok, t, &bl) : NULL;
	gen_push(&s->gb, t, b ? b : "", b ? bl : 0);
	int64_t cut = -1;
	if (n_stops)
		cut = ss_stop_find(s->gb.text, s->gb.len, from, stops, n_stops, &s->safe);
	else
		s->safe = s->gb.len;
	if (cut >= 0) {
		s->gb.len = s->safe = (size_t)cut;
		s->finish = "stop";
		return 0;
	}
	if ((long)s->gb.n >= pr->max_tokens) {
		s->finish = "length";
		return 0;
	}
	s->next = t;
	return 1;
}

static void write_jsonl(const decoder *d, const seq *s)
{
	FILE *out = d->out;
	fputs("{\"id\":", out);
	ss_json_str(out, s->pr->id ? s->pr->id : s->state_id, (size_t)-1);
	if (s->pr->id) {
		fputs(",\"state\":", out);
		ss_json_str(out, s->state_id, (size_t)-1);
	}
	if (!d->ids_out) {
		fputs(",\"text\":", out);
		ss_json_str(out, s->gb.text ? s->gb.text : "", s->gb.len);
	}
	fputs(",\"tokens\":[", out);
	for (size_t i = 0; i < s->gb.n; i++)
		fprintf(out, i ? ",%d" : "%d", (int)s->gb.ids[i]);
	fprintf(out, "],\"finish_reason\":\"%s\"}", s->finish);
}

/* Writes what input order allows: the first unwritten output streams its
 * text (or ids) as it grows, as one sequence alone would; once it has
 * finished it is completed and the next one's turn comes. */
static void flush_out(decoder *d)
{
	FILE *out = d->out;
	while (d->head < d->n) {
		seq *s = d->seqs[d->head];
		if (!d->jsonl && d->ids_out) {
			for (; s->written < s->gb.n; s->written++)
				fprintf(out, s->written ? " %d" : "%d", (int)s->gb.ids[s->written]);
		} else if (!d->jsonl) {
			size_t upto = s->finish ? s->gb.len : s->safe;
			if (upto > s->written) {
				fwrite(s->gb.text + s->written, 1, upto - s->written, out);
				s->written = upto;
			}
		}
		if (!s->finish)
			break;
		if (d->jsonl)
			write_jsonl(d, s);
		putc('\n', out);
		d->total += (long long)s->gb.n;
		free(s->gb.ids);
		free(s->gb.text);
		free(s->state_id);
		free(s);
		d->seqs[d->head++] = NULL;
	}
	fflush(out);
	if (ferror(out))
		cli_die("%s: write error: %s", d->out_path, strerror(errno));
}

/* Continuous batching: up to d->batch outputs are generated together, one
 * decode step feeding one token to each (the weights read once a step for
 * all of them); an output that finishes leaves the batch and the next one
 * joins, its prompt prefilled alone. In a deterministic context each
 * output's tokens are those it gets alone (ss_forward_ctx_set_deterministic). */
static void decode_run(decoder *d, seq_source *src)
{
	char err[SS_ERRMSG_MAX] = "";
	int more = 1;
	for (;;) {
		int nj = 0;
		while (more && d->n_active + nj < d->batch) {
			seq *s = calloc(1, sizeof *s);
			if (!s)
				cli_die("out of memory");
			if (!source_next(src, s)) {
				free(s);
				more = 0;
				break;
			}
			d->seqs = mcli_grow(d->seqs, d->n, &d->cap, sizeof *d->seqs);
			d->seqs[d->n++] = s;
			nj++;
		}
		if (nj) {
			unbind(d); /* a prefill must not run beside bound states (GPU slots) */
			seq_join(d, d->seqs + d->n - nj, nj);
		}
		if (d->n_active == 0)
			break;
		int k, kept = 0, left = 0;
		for (k = 0; k < d->n_active; k++)
			left |= !seq_take(d, d->active[k], d->logits + (size_t)k * d->V);
		if (left)
			unbind(d);
		for (k = 0; k < d->n_active; k++) {
			seq *s = d->active[k];
			if (s->finish) {
				ss_sampler_free(s->smp);
				s->smp = NULL;
				ss_state_free(&s->st);
			} else {
				d->active[kept++] = s;
			}
		}
		d->n_active = kept;
		flush_out(d);
		if (d->n_active == 0)
			continue;
		for (k = 0; k < d->n_active; k++) {
			d->sts[k] = &d->active[k]->st;
			d->toks[k] = d->active[k]->next;
		}
		/* the states stay bound (on a GPU: on the device) while the batch is unchanged */
		if (!d->bound && ss_forward_decode_begin(d->ctx, d->sts, d->n_active, err))
			cli_die("%s: %s", d->active[0]->where, err);
		d->bound = 1;
		if (ss_forward_decode_next(d->ctx, d->toks, d->logits, NULL, 0, err))
			cli_die("%s: %s", d->active[0]->where, err);
		for (k = 0; k < d->n_active; k++)
			check_logits(d, d->active[k], d->logits + (size_t)k * d->V);
	}
	unbind(d);
	flush_out(d);
}

/* The command line. */
typedef struct {
	const char *state_path, *prompt_text, *prompt_file, *prompt_ids, *out_path, *model_dir;
	cli_model_opts mo;
	int no_state, ignore_eos, ids_out, jsonl;
	int implicit; /* the states come from a non-terminal stdin, not named */
	long batch;   /* --batch; 0: the memory bound */
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
	enum { O_STATE = 256, O_NOSTATE, O_PROMPT, O_PFILE, O_PTOK, O_IGNEOS, O_IDS, O_JSONL,
	       O_BATCH };
	static const struct option opts[] = {
		{ "state", required_argument, 0, O_STATE },
		{ "no-state", no_argument, 0, O_NOSTATE },
		{ "prompt", required_argument, 0, O_PROMPT },
		{ "prompt-file", required_argument, 0, O_PFILE },
		{ "prompt-tokens", required_argument, 0, O_PTOK },
		{ "ignore-eos", no_argument, 0, O_IGNEOS },
		{ "ids", no_argument, 0, O_IDS },
		{ "jsonl", no_argument, 0, O_JSONL },
		{ "batch", required_argument, 0, O_BATCH },
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
		case O_BATCH: o->batch = cli_long("--batch", optarg, 1, BATCH_MAX, usage); break;
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

/* The default --batch: as many outputs as BATCH_BYTES of their state,
 * logits row and sampler hold (about 50 at the mamba2-130m shape). */
static int default_batch(const ss_model *m, int32_t gen_vocab)
{
	return ss_forward_batch_size(m, (double)m->cfg.vocab_padded * sizeof(float) +
					     24.0 * gen_vocab, BATCH_BYTES, BATCH_MAX);
}

int main(int argc, char **argv)
{
	cli_init("ss-decode");
	decode_opts o;
	parse_args(argc, argv, &o);
	ss_device *dev = mcli_device(o.mo.device, usage);
	prompt one = { .max_tokens = o.g.max_tokens, .seed = o.g.seed, .sp = o.g.sp };
	if (o.prompt_ids) {
		one.ids = mcli_parse_ids("--prompt-tokens", o.prompt_ids, &one.n, usage);
		if (one.n == 0)
			cli_usage(usage, "--prompt-tokens: empty prompt");
	}

	ss_model *m = mcli_load_model(o.model_dir, 0, o.mo.weights_dtype, usage);
	ss_tokenizer *tok = NULL;
	if (!o.prompt_ids || !o.ids_out || o.g.n_stops || o.g.prompts_path)
		tok = cli_tokenizer(o.mo.tokenizer, o.model_dir);
	size_t n_prompts;
	prompt *ps = load_prompts(&o, m, tok, &one, &n_prompts);
	seq_source src = { .m = m, .model_dir = o.model_dir, .ps = ps, .n_prompts = n_prompts,
			   .per_line = ps[0].state_path != NULL };
	if (src.per_line && o.state_path && !o.implicit)
		cli_usage(usage, "--state and the \"state\" of --prompts lines exclude each other");
	if (src.per_line && o.no_state)
		cli_usage(usage, "--no-state and the \"state\" of --prompts lines exclude each other");
	if (!src.per_line) {
		src.state_path = o.state_path;
		mcli_states_open(&src.src, o.state_path, o.implicit);
	} else {
		check_line_states(ps, n_prompts, m, o.model_dir);
	}
	ss_forward_ctx *ctx = mcli_forward_ctx(m, o.model_dir, dev, o.mo.threads);
	/* outputs the same whatever the batch (on a GPU: to its rounding) */
	const int cpu = ss_forward_ctx_device(ctx) == SS_DEVICE_CPU;
	if (cpu && ss_forward_ctx_set_deterministic(ctx, 1))
		cli_die("cannot make the forward context deterministic");
	const int32_t gen_vocab = mcli_gen_vocab(m, tok);
	decoder d = { .ctx = ctx, .tok = tok, .gen_vocab = gen_vocab,
		      .eos = o.ignore_eos ? -1 : m->cfg.eos_token_id,
		      .stops = o.g.stops, .n_stops = o.g.n_stops, .jsonl = o.jsonl,
		      .ids_out = o.ids_out, .V = (size_t)m->cfg.vocab_padded,
		      .batch = o.batch ? (int)o.batch : default_batch(m, gen_vocab),
		      .out_path = o.out_path ? o.out_path : "standard output", .together = cpu };
	d.out = cli_out_open(o.out_path);
	double t0 = cli_now();
	decode_run(&d, &src);
	if (!src.per_line)
		mcli_states_close(&src.src);
	cli_out_close(d.out);
	if (cli_verbosity >= 2) {
		double elapsed_s = cli_now() - t0;
		fprintf(stderr, "ss-decode: %lld %s in %.2f s (%.1f tokens/s), batch of at most %d",
			d.total, cli_plural((uint64_t)d.total, "token", "tokens"), elapsed_s,
			elapsed_s > 0 ? d.total / elapsed_s : 0.0, d.batch);
		if (o.g.sp.temperature > 0)
			fprintf(stderr, ", seed %llu", (unsigned long long)o.g.seed);
		putc('\n', stderr);
	}

	for (size_t j = 0; j < n_prompts; j++)
		prompt_free(&ps[j]);
	if (ps != &one)
		free(ps);
	free(o.g.stops);
	free(d.seqs);
	free(d.active);
	free(d.sts);
	free(d.toks);
	free(d.logits);
	ss_forward_ctx_free(ctx);
	ss_device_close(dev);
	ss_tokenizer_free(tok);
	ss_model_free(m);
	return 0;
}
