/*
 * ss-decode — generate text from a state: feed a prompt, then sample tokens
 * (greedy by default) and stream them to stdout as they are produced.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "ss.h"
#include "ss_sample.h"

static const char *usage =
	"ss-decode [--model DIR] [--state FILE | --no-state]\n"
	"                 [--prompt TEXT | --prompt-file FILE | --prompt-tokens IDS]\n"
	"                 [--greedy | --temperature T [--top-k K] [--top-p P] [--seed S]]\n"
	"                 [--max-tokens N] [--ignore-eos] [--ids] [--jsonl] [--tokenizer FILE]\n"
	"                 [--device D] [--threads N] [--weights-dtype T] [-o FILE] [-q|-v]";

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
	       "  --prompt TEXT        the prompt (must not be empty: the first token is\n"
	       "                       sampled from the logits of the prompt's last token)\n"
	       "  --prompt-file FILE   the prompt, read from FILE\n"
	       "  --prompt-tokens IDS  the prompt as token ids (\"1,2,3\")\n"
	       "  --greedy             pick the most likely token (default)\n"
	       "  --temperature T      sample from softmax(logits / T), T > 0\n"
	       "  --top-k K            sample among the K most likely tokens only\n"
	       "  --top-p P            sample from the smallest set of tokens with\n"
	       "                       probability >= P (nucleus), 0 < P <= 1\n"
	       "  --seed S             seed of the sampler (default: from the clock)\n"
	       "  --max-tokens N       generate at most N tokens (default 64)\n"
	       "  --ignore-eos         do not stop at the end-of-text token (config's\n"
	       "                       eos_token_id, 0 for GPT-NeoX)\n"
	       "  --ids                print token ids (space-separated) instead of text\n"
	       "  --jsonl              one JSON line per state: {\"id\", \"text\", \"tokens\"}\n"
	       "                       (no \"text\" with --ids)\n",
	       usage);
	cli_model_help(23);
	printf("  -o FILE              output file (replaced only on success)\n"
	       "  -q, -v               quieter; more verbose (-v: tokens/s at the end)\n"
	       "  -h, --help           this help;  -V, --version  the version\n\n");
	cli_defaults_help();
	exit(0);
}

int main(int argc, char **argv)
{
	cli_init("ss-decode");
	const char *state_path = NULL, *prompt = NULL, *prompt_file = NULL, *prompt_ids = NULL,
		   *out_path = NULL;
	cli_model_opts mo = { 0 };
	int no_state = 0, ignore_eos = 0, ids_out = 0, jsonl = 0, greedy = 0;
	int have_seed = 0;
	long max_tokens = 64;
	uint64_t seed = 0;
	ss_sample_params sp = { .temperature = 0, .top_k = 0, .top_p = 1 };
	enum { O_STATE = 256, O_NOSTATE, O_PROMPT, O_PFILE, O_PTOK, O_GREEDY, O_TEMP,
	       O_TOPK, O_TOPP, O_SEED, O_MAX, O_IGNEOS, O_IDS, O_JSONL };
	static const struct option opts[] = {
		{ "state", required_argument, 0, O_STATE },
		{ "no-state", no_argument, 0, O_NOSTATE },
		{ "prompt", required_argument, 0, O_PROMPT },
		{ "prompt-file", required_argument, 0, O_PFILE },
		{ "prompt-tokens", required_argument, 0, O_PTOK },
		{ "greedy", no_argument, 0, O_GREEDY },
		{ "temperature", required_argument, 0, O_TEMP },
		{ "top-k", required_argument, 0, O_TOPK },
		{ "top-p", required_argument, 0, O_TOPP },
		{ "seed", required_argument, 0, O_SEED },
		{ "max-tokens", required_argument, 0, O_MAX },
		{ "ignore-eos", no_argument, 0, O_IGNEOS },
		{ "ids", no_argument, 0, O_IDS },
		{ "jsonl", no_argument, 0, O_JSONL },
		{ 0, 0, 0, 0 },
	};
	const cli_options co = { NULL, opts, usage, help, &out_path, &mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case O_STATE: state_path = optarg; break;
		case O_NOSTATE: no_state = 1; break;
		case O_PROMPT: prompt = optarg; break;
		case O_PFILE: prompt_file = optarg; break;
		case O_PTOK: prompt_ids = optarg; break;
		case O_GREEDY: greedy = 1; break;
		case O_TEMP: sp.temperature = (float)cli_double("--temperature", optarg, 0, 1e6, usage); break;
		case O_TOPK: sp.top_k = (int32_t)cli_long("--top-k", optarg, 0, INT32_MAX, usage); break;
		case O_TOPP: sp.top_p = (float)cli_double("--top-p", optarg, 1e-30, 1, usage); break;
		case O_SEED:
			seed = (uint64_t)cli_long("--seed", optarg, 0, INT64_MAX, usage);
			have_seed = 1;
			break;
		case O_MAX: max_tokens = cli_long("--max-tokens", optarg, 0, 1L << 30, usage); break;
		case O_IGNEOS: ignore_eos = 1; break;
		case O_IDS: ids_out = 1; break;
		case O_JSONL: jsonl = 1; break;
		}
	}
	if (optind < argc)
		cli_usage(usage, "unexpected argument '%s'", argv[optind]);
	if (state_path && no_state)
		cli_usage(usage, "--state and --no-state exclude each other");
	if ((prompt != NULL) + (prompt_file != NULL) + (prompt_ids != NULL) != 1)
		cli_usage(usage, "give one prompt: --prompt, --prompt-file or --prompt-tokens");
	if (greedy && sp.temperature > 0)
		cli_usage(usage, "--greedy excludes --temperature");
	if (!(sp.temperature > 0) && (sp.top_k || sp.top_p < 1 || have_seed))
		cli_usage(usage, "--top-k, --top-p and --seed need --temperature");
	if (!have_seed)
		seed = (uint64_t)(cli_now() * 1e9) ^ ((uint64_t)getpid() << 32);
	int implicit = 0;
	if (!state_path && !no_state && !isatty(STDIN_FILENO) &&
	    !(prompt_file && !strcmp(prompt_file, "-"))) {
		state_path = "-";
		implicit = 1;
	}
	if (state_path && prompt_file && !strcmp(state_path, "-") && !strcmp(prompt_file, "-"))
		cli_usage(usage, "the states and the prompt cannot both come from stdin");
	const char *model_dir = cli_model_dir(mo.model, usage);
	ss_device *dev = mcli_device(mo.device, usage);

	size_t np = 0;
	int32_t *pids = prompt_ids ? mcli_parse_ids("--prompt-tokens", prompt_ids, &np, usage) : NULL;
	if (prompt_ids && np == 0)
		cli_usage(usage, "--prompt-tokens: empty prompt");

	ss_model *m = mcli_load_model(model_dir, 0, mo.wtype, usage);
	ss_tokenizer *tok = NULL;
	if (!prompt_ids || !ids_out)
		tok = cli_tokenizer(mo.tokenizer, model_dir);
	if (!prompt_ids) {
		size_t len;
		char *text = prompt ? strdup(prompt) : mcli_read_file(prompt_file, &len);
		if (!text)
			cli_die("out of memory");
		char err[SS_ERRMSG_MAX] = "";
		int rc = ss_tokenizer_encode(tok, text, strlen(text), &pids, &np, err);
		if (rc)
			cli_die("%s: %s", prompt ? "--prompt" : prompt_file, err[0] ? err : ss_strerror(rc));
		free(text);
		if (np == 0)
			cli_die("%s: empty prompt: the first token needs the logits of a prompt token",
				prompt ? "--prompt" : prompt_file);
	}
	int32_t vocab = mcli_vocab(m);
	for (size_t i = 0; i < np; i++)
		if (pids[i] < 0 || pids[i] >= vocab)
			cli_die("prompt token %zu is %d, outside the model's vocabulary [0, %d)", i,
				(int)pids[i], (int)vocab);
	/* Generate only ids the tokenizer can print. */
	int32_t n_gen = vocab;
	if (tok && ss_tokenizer_n_vocab(tok) < n_gen)
		n_gen = ss_tokenizer_n_vocab(tok);

	char err[SS_ERRMSG_MAX] = "";
	ss_forward_ctx *ctx = mcli_forward_ctx(m, model_dir, dev, mo.threads);
	ss_sampler *smp;
	if (ss_sampler_init(&smp, n_gen, &sp, seed))
		cli_die("cannot create the sampler (out of memory?)");
	const size_t V = (size_t)m->cfg.vocab_padded;
	float *logits = malloc(V * sizeof *logits);
	int32_t *gen = malloc(((size_t)max_tokens + 1) * sizeof *gen);
	if (!logits || !gen)
		cli_die("out of memory");
	const int32_t eos = ignore_eos ? -1 : m->cfg.eos_token_id;

	FILE *out = cli_out_open(out_path);
	mcli_states src;
	mcli_states_open(&src, state_path, implicit);
	ss_state st;
	double t0 = cli_now();
	long long total = 0;
	while (mcli_states_next(&src, m, model_dir, &st)) {
		ss_forward_seq seq = { .tokens = pids, .n_tokens = (int64_t)np, .state = &st,
				       .logits = logits };
		if (ss_forward_prefill(ctx, &seq, 1, SS_LOGITS_LAST, err))
			cli_die("%s: %s", state_path ? state_path : model_dir, err);
		if (jsonl) {
			fputs("{\"id\":", out);
			mcli_json_str(out, st.id, (size_t)-1);
		}
		/* the state stays on the device (GPU) for the whole generation */
		ss_state *sp1 = &st;
		if (ss_forward_decode_begin(ctx, &sp1, 1, err))
			cli_die("%s: %s", st.id, err);
		long n = 0;
		while (n < max_tokens) {
			int32_t t = ss_sampler_sample(smp, logits);
			if (t < 0)
				cli_die("%s: the logits are all NaN or -inf", st.id);
			if (t == eos)
				break;
			gen[n++] = t;
			if (!jsonl) {
				if (ids_out) {
					fprintf(out, n > 1 ? " %d" : "%d", (int)t);
				} else {
					size_t bl;
					const char *b = ss_tokenizer_id_bytes(tok, t, &bl);
					if (b)
						fwrite(b, 1, bl, out);
				}
				fflush(out);
			}
			if (n < max_tokens && ss_forward_decode_next(ctx, &t, logits, NULL, 0, err))
				cli_die("%s: %s", st.id, err);
		}
		if (ss_forward_decode_end(ctx, err))
			cli_die("%s: %s", st.id, err);
		total += n;
		if (jsonl) {
			if (!ids_out) {
				char *text;
				size_t tl;
				int rc = ss_tokenizer_decode(tok, gen, (size_t)n, &text, &tl, err);
				if (rc)
					cli_die("%s: %s", st.id, err[0] ? err : ss_strerror(rc));
				fputs(",\"text\":", out);
				mcli_json_str(out, text, tl);
				free(text);
			}
			fputs(",\"tokens\":[", out);
			for (long i = 0; i < n; i++)
				fprintf(out, i ? ",%d" : "%d", (int)gen[i]);
			fputs("]}", out);
		}
		putc('\n', out);
		fflush(out);
		if (ferror(out))
			cli_die("%s: write error: %s", out_path ? out_path : "standard output", strerror(errno));
		ss_state_free(&st);
	}
	mcli_states_close(&src);
	cli_out_close(out);
	if (cli_verbosity >= 2) {
		double elapsed_s = cli_now() - t0;
		fprintf(stderr, "ss-decode: %lld tokens in %.2f s (%.1f tokens/s), seed %llu\n", total,
			elapsed_s, elapsed_s > 0 ? total / elapsed_s : 0.0, (unsigned long long)seed);
	}

	free(gen);
	free(logits);
	free(pids);
	ss_sampler_free(smp);
	ss_forward_ctx_free(ctx);
	ss_device_close(dev);
	ss_tokenizer_free(tok);
	ss_model_free(m);
	return 0;
}
