/*
 * ss-train — fine-tunes a Mamba-2 model on the CPU and writes checkpoints
 * that every ss tool loads. The run (data sources, batches, schedule,
 * objectives lm, bp2c and bptc, clip, AdamW) is the library's
 * (lib/ss_train.h, ss_train_run_*: lib/train/run.c, lib/train/data.c);
 * this tool parses the options, prints a JSON line a step and writes the
 * checkpoints.
 *
 * The run's state (step, data position, RNG, hyperparameters) goes to
 * DIR/trainer_state.json, Adam's moments to DIR/optimizer.safetensors: a
 * run resumed from DIR continues bit for bit as if never stopped (same
 * --threads).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "train_state.h"
#include "model_cli.h"
#include "ss.h"

static const char *usage =
	"ss-train --objective lm|bp2c|bptc|birdie -o DIR [--model DIR | --resume DIR] --data FILE\n"
	"                [--states FILE | --chunk-tokens FILE] [--mode MODE] [--steps N] [--until S] [--lr X]\n"
	"                [--min-lr X] [--warmup N] [--weight-decay X] [--clip X]\n"
	"                [--seq-len N] [--batch-tokens N] [--batch-seqs N] [--seed N]\n"
	"                [--max-k N] [--loss-after TEXT] [--save-every N] [--save-dtype T]\n"
	"                [--birdie-mix reward|fixed] [--birdie-every N] [--birdie-only LIST]\n"
	"                [--tokenizer FILE] [--threads N] [-q|-v]";

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Fine-tune a Mamba-2 model on the CPU and write it as a model directory\n"
	       "(config.json + model.safetensors) that every ss tool loads, plus the\n"
	       "optimiser state (trainer_state.json, optimizer.safetensors) --resume reads.\n"
	       "One JSON line per step on stdout: {\"step\", \"loss\", \"lr\", \"grad_norm\",\n"
	       "\"tokens\", \"seqs\"} (the loss of the weights before the step's update;\n"
	       "bp2c and bptc add \"k\": each example's number of composed chunks).\n\n"
	       "  --objective OBJ        lm: next-token loss on the documents of the token\n"
	       "                         stream --data, windows of --seq-len tokens, each\n"
	       "                         from the zero state; bp2c: continuation loss from\n"
	       "                         the composed stored states of an example's chunks;\n"
	       "                         bptc: the same loss, the chunks re-encoded in the\n"
	       "                         step and differentiated through the composition;\n"
	       "                         birdie: Birdie's objectives (next token, prefix LM,\n"
	       "                         copying, selective copying, deshuffling, infilling,\n"
	       "                         autoencoding) made from windows of --data's\n"
	       "                         documents, mixed by a reward-driven scheduler\n"
	       "                         (the tokenizer needs its sentinel tokens: ss-train(1))\n"
	       "  --data FILE            lm, birdie: a token stream (ss-tokens(5)); bp2c, bptc: JSON lines\n"
	       "                         {\"query\", \"continuation\", \"chunks\": [ids]} (or\n"
	       "                         \"query_tokens\"/\"continuation_tokens\" arrays),\n"
	       "                         chunks most relevant first; read again from the\n"
	       "                         start at its end\n"
	       "  --states FILE          bp2c: state stream holding every chunk id (ss-encode)\n"
	       "  --chunk-tokens FILE    bptc: token stream holding every chunk id (each chunk\n"
	       "                         is encoded whole: the step holds activations for\n"
	       "                         the longest chunk or --batch-tokens, the larger)\n"
	       "  --mode MODE            bp2c, bptc composition: picaso-r (default), picaso-s,\n"
	       "                         caso, soup\n"
	       "  --max-k N              bp2c, bptc: k drawn uniformly from 0..min(N, chunks) per\n"
	       "                         example (default 10); the first k chunks, the most\n"
	       "                         relevant composed last (nearest the query)\n"
	       "  --resume DIR           continue the run saved in DIR (its weights, optimiser,\n"
	       "                         data position, RNG and options; --steps and --until\n"
	       "                         may be given again)\n"
	       "  --steps N              length of the schedule in steps (default 100)\n"
	       "  --until S              stop after step S (default: --steps)\n"
	       "  --save-every N         also write the checkpoint every N steps\n"
	       "  --lr X                 peak learning rate (default 3e-4)\n"
	       "  --min-lr X             learning rate at the end of the cosine (default 0)\n"
	       "  --warmup N             linear warmup steps (default 0)\n"
	       "  --weight-decay X       AdamW decoupled weight decay (default 0.1)\n"
	       "  --clip X               clip the gradient's global L2 norm to X; 0 = none\n"
	       "                         (default 1)\n"
	       "  --seq-len N            lm: tokens per window; birdie: inputs per sequence\n"
	       "                         (default 256)\n"
	       "  --loss-after TEXT      lm: count the loss only on the tokens after the first\n"
	       "                         occurrence of TEXT's tokens in each document (none\n"
	       "                         in a document without it): a context, then questions\n"
	       "  --birdie-mix MIX       birdie: reward (default: the scheduler of birdie.txt\n"
	       "                         A.1) or fixed (every objective class alike)\n"
	       "  --birdie-every N       birdie: evaluate every configuration and update the\n"
	       "                         mixture every N steps (default 25)\n"
	       "  --birdie-only LIST     birdie: draw only these configurations (names, or\n"
	       "                         classes: ntp, prefix, copy, selcopy, deshuffle,\n"
	       "                         infill, autoenc; comma-separated)\n"
	       "  --batch-tokens N       tokens per step at most (default 1024; >= --seq-len)\n"
	       "  --batch-seqs N         sequences (windows, examples) per step at most\n"
	       "                         (default 16; each holds its states in memory)\n"
	       "  --seed N               seed of the RNG that draws k (default 1)\n"
	       "  --save-dtype T         dtype of the saved weights: f32, bf16, f16 (default:\n"
	       "                         the input model's; f32 for a q8_0 one)\n",
	       usage);
	cli_common_help(25, CLI_HELP_MODEL | CLI_HELP_OUT | CLI_HELP_BASE, "DIR");
	printf("\n-o names the checkpoint directory (required).\n"
	       "AdamW (beta1 0.9, beta2 0.95, eps 1e-8); learning rate: linear warmup to\n"
	       "--lr, then a cosine to --min-lr at --steps. Same --threads for bit-identical\n"
	       "resumption. Training runs on the CPU (--device cpu or auto); the master\n"
	       "weights are f32 (--weights-dtype is refused; see --save-dtype).\n\n");
	cli_defaults_help();
	exit(0);
}

/* ------------------------------------------------------ checkpoints */

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4200];
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(dir);
}

static void copy_file(const char *from, const char *to)
{
	size_t len;
	struct stat st;
	if (stat(from, &st) != 0)
		return; /* no tokenizer beside the model: the defaults find one */
	char *buf = mcli_read_file(from, &len);
	FILE *f = cli_out_open(to);
	if (fwrite(buf, 1, len, f) != len)
		cli_die("%s: write error", to);
	cli_out_close(f);
	free(buf);
}

/* The checkpoint directory being written, removed if the program exits
 * before it is renamed into place. */
static char save_tmp[4096];

static void save_cleanup(void)
{
	if (save_tmp[0])
		rm_tree(save_tmp);
}

/* Writes the checkpoint into a fresh directory beside `dir`, then puts it in
 * dir's place: dir holds a whole checkpoint, the old or the new one. */
static void save(const char *dir, const run_state *r, ss_train *t, const ss_model_config *cfg,
		 const float *am, const float *av, const char *model_dir)
{
	char err[SS_ERRMSG_MAX] = "", tmp[4096], old[4096], p[4200], q[4200];
	ss_train_params *P = ss_train_params_of(t);
	/* a non-finite checkpoint would replace the last good one in dir */
	const struct { const char *what; const float *x; int nonneg; } chk[] = {
		{ "", P->data, 0 }, { "Adam's m: ", am, 0 }, { "Adam's v: ", av, 1 } };
	for (int i = 0; i < 3; i++)
		if (ss_train_params_check(cfg, P, chk[i].x, chk[i].nonneg, err))
			cli_die("%s: step %lld: %s%s; the checkpoint is not written", dir,
				(long long)r->step, chk[i].what, err);
	snprintf(tmp, sizeof tmp, "%s.tmp-%ld", dir, (long)getpid());
	snprintf(old, sizeof old, "%s.old-%ld", dir, (long)getpid());
	rm_tree(tmp);
	snprintf(save_tmp, sizeof save_tmp, "%s", tmp);
	if (mkdir(tmp, 0777))
		cli_die("%s: %s", tmp, strerror(errno));
	if (ss_train_save_model(tmp, cfg, P, r->save_dtype, err))
		goto fail;
	ss_tensor_f32 opt[3] = {
		{ "m", 1, { (int64_t)P->n }, am },
		{ "v", 1, { (int64_t)P->n }, av },
		{ "master", 1, { (int64_t)P->n }, P->data },
	};
	snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
	/* the f32 master weights too when the model is saved rounded */
	if (ss_safetensors_save(p, opt, r->save_dtype == SS_DTYPE_F32 ? 2 : 3, SS_DTYPE_F32, err))
		goto fail;
	cJSON *js = train_state_json(r);
	char *text = cJSON_Print(js);
	cJSON_Delete(js);
	if (!text)
		cli_die("out of memory");
	snprintf(p, sizeof p, "%s/trainer_state.json", tmp);
	FILE *f = cli_out_open(p);
	fprintf(f, "%s\n", text);
	cli_out_close(f);
	free(text);
	snprintf(p, sizeof p, "%s/tokenizer.json", model_dir);
	snprintf(q, sizeof q, "%s/tokenizer.json", tmp);
	copy_file(p, q);
	struct stat st;
	int had = stat(dir, &st) == 0;
	if (had && rename(dir, old))
		cli_die("%s: %s", dir, strerror(errno));
	if (rename(tmp, dir))
		cli_die("%s: %s", dir, strerror(errno));
	save_tmp[0] = 0;
	if (had)
		rm_tree(old);
	return;
fail:
	cli_die("%s", err);
}

/* Reads DIR/trainer_state.json into r (train_state_parse: every field
 * checked against the bounds of its option); dies naming the file and the
 * field. */
static void load_state(const char *dir, run_state *r)
{
	char p[4200], err[SS_ERRMSG_MAX] = "";
	size_t len;
	snprintf(p, sizeof p, "%s/trainer_state.json", dir);
	char *text = mcli_read_file(p, &len);
	int rc = train_state_parse(text, len, p, r, err);
	free(text);
	if (rc)
		cli_die("%s", err);
}
/* ---------------------------------------------------------- options */

/* The command line: the run's state (new, or read back with --resume) and
 * what only this invocation says. */
typedef struct {
	run_state r;
	const char *out_dir, *resume, *objective, *mode, *sdtype;
	int64_t until, save_every; /* until -1: --steps */
	int given_steps, given_hyper, given_birdie;
	cli_model_opts mo;
} train_opts;

enum { O_OBJ = 256, O_DATA, O_STATES, O_CHUNK_TOKENS, O_MODE, O_MAXK, O_RESUME, O_STEPS, O_UNTIL, O_LR,
       O_MINLR, O_WARMUP, O_WD, O_CLIP, O_SEQ, O_BATCH, O_BSEQS, O_SEED, O_SDTYPE, O_SAVE_EVERY,
       O_LOSS_AFTER, O_BIRDIE_MIX, O_BIRDIE_EVERY, O_BIRDIE_ONLY };

static const struct option opts[] = {
	{ "objective", required_argument, 0, O_OBJ },
	{ "data", required_argument, 0, O_DATA },
	{ "states", required_argument, 0, O_STATES },
	{ "chunk-tokens", required_argument, 0, O_CHUNK_TOKENS },
	{ "mode", required_argument, 0, O_MODE },
	{ "max-k", required_argument, 0, O_MAXK },
	{ "resume", required_argument, 0, O_RESUME },
	{ "steps", required_argument, 0, O_STEPS },
	{ "until", required_argument, 0, O_UNTIL },
	{ "lr", required_argument, 0, O_LR },
	{ "min-lr", required_argument, 0, O_MINLR },
	{ "warmup", required_argument, 0, O_WARMUP },
	{ "weight-decay", required_argument, 0, O_WD },
	{ "clip", required_argument, 0, O_CLIP },
	{ "seq-len", required_argument, 0, O_SEQ },
	{ "batch-tokens", required_argument, 0, O_BATCH },
	{ "batch-seqs", required_argument, 0, O_BSEQS },
	{ "seed", required_argument, 0, O_SEED },
	{ "save-dtype", required_argument, 0, O_SDTYPE },
	{ "save-every", required_argument, 0, O_SAVE_EVERY },
	{ "loss-after", required_argument, 0, O_LOSS_AFTER },
	{ "birdie-mix", required_argument, 0, O_BIRDIE_MIX },
	{ "birdie-every", required_argument, 0, O_BIRDIE_EVERY },
	{ "birdie-only", required_argument, 0, O_BIRDIE_ONLY },
	{ 0, 0, 0, 0 },
};

/* Option c's argument into o. */
static void set_opt(train_opts *o, int c)
{
	run_state *r = &o->r;
	switch (c) {
	case O_OBJ: o->objective = optarg; break;
	case O_DATA: r->data = strdup(optarg); break;
	case O_STATES: r->states = strdup(optarg); break;
	case O_CHUNK_TOKENS: r->chunk_tokens = strdup(optarg); break;
	case O_MODE: o->mode = optarg; break;
	case O_MAXK: r->max_k = cli_long("--max-k", optarg, 0, 1 << 20, usage); break;
	case O_RESUME: o->resume = optarg; break;
	case O_STEPS:
		r->steps = cli_long("--steps", optarg, 1, 1L << 40, usage);
		o->given_steps = 1;
		break;
	case O_UNTIL: o->until = cli_long("--until", optarg, 1, 1L << 40, usage); break;
	case O_LR: r->lr = cli_double("--lr", optarg, 0, 10, usage); break;
	case O_MINLR: r->min_lr = cli_double("--min-lr", optarg, 0, 10, usage); break;
	case O_WARMUP: r->warmup = cli_long("--warmup", optarg, 0, 1L << 40, usage); break;
	case O_WD: r->weight_decay = cli_double("--weight-decay", optarg, 0, 10, usage); break;
	case O_CLIP: r->clip = cli_double("--clip", optarg, 0, 1e30, usage); break;
	case O_SEQ: r->seq_len = cli_long("--seq-len", optarg, 1, 1L << 24, usage); break;
	case O_BATCH:
		r->batch_tokens = cli_long("--batch-tokens", optarg, 1, 1L << 24, usage);
		break;
	case O_BSEQS: r->batch_seqs = cli_long("--batch-seqs", optarg, 1, 1 << 16, usage); break;
	case O_SEED: r->seed = (uint64_t)cli_long("--seed", optarg, 0, LONG_MAX, usage); break;
	case O_SDTYPE: o->sdtype = optarg; break;
	case O_LOSS_AFTER: r->loss_after = strdup(optarg); break;
	case O_BIRDIE_MIX:
		if (strcmp(optarg, "reward") && strcmp(optarg, "fixed"))
			cli_usage(usage, "--birdie-mix: '%s': reward or fixed", optarg);
		r->birdie_fixed = !strcmp(optarg, "fixed");
		o->given_birdie = 1;
		break;
	case O_BIRDIE_EVERY:
		r->birdie_every = cli_long("--birdie-every", optarg, 1, 1L << 40, usage);
		o->given_birdie = 1;
		break;
	case O_BIRDIE_ONLY:
		if (ss_train_birdie_only(optarg, &r->birdie_only))
			cli_usage(usage, "--birdie-only: '%s': configuration or class names (ss-train(1))",
				  optarg);
		o->given_birdie = 1;
		break;
	case O_SAVE_EVERY:
		o->save_every = cli_long("--save-every", optarg, 1, 1L << 40, usage);
		break;
	}
}

/* Reads the command line into o (defaults first); exits 2 on a usage error
 * that needs no file. */
static void parse_args(int argc, char **argv, train_opts *o)
{
	*o = (train_opts){ .r = { .steps = 100, .lr = 3e-4, .weight_decay = 0.1, .clip = 1,
				  .seq_len = 256, .batch_tokens = 1024, .batch_seqs = 16,
				  .max_k = 10, .seed = 1, .mode = SS_COMPOSE_PICASO_R,
				  .offset = -1, .birdie_every = 25 },
			   .until = -1 };
	const cli_options co = { NULL, opts, usage, help, &o->out_dir, &o->mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		o->given_hyper += c != O_DATA && c != O_STATES && c != O_CHUNK_TOKENS &&
				  c != O_RESUME && c != O_STEPS && c != O_UNTIL && c != O_SAVE_EVERY;
		set_opt(o, c);
	}
	if (optind < argc)
		cli_usage(usage, "unexpected argument '%s'", argv[optind]);
	if (!o->out_dir)
		cli_usage(usage, "-o DIR is required (the checkpoint directory)");
	if (o->resume && o->mo.model)
		cli_usage(usage, "--resume DIR is the model: no --model");
	if (o->mo.weights_dtype)
		cli_usage(usage, "--weights-dtype: ss-train keeps f32 master weights (the saved "
				 "dtype is --save-dtype)");
	if (strcmp(o->mo.device, "cpu") && strcmp(o->mo.device, "auto"))
		cli_usage(usage, "--device %s: ss-train runs on the CPU", o->mo.device);
	if (o->resume && o->given_hyper > 0)
		cli_usage(usage, "with --resume the run's options come from %s/trainer_state.json "
				 "(only --steps, --until, --save-every, --data, --states and --chunk-tokens "
				 "may be given)", o->resume);
}

/* A new run: the objective and what it needs. */
static void check_new_run(train_opts *o)
{
	run_state *r = &o->r;
	if (!o->objective)
		cli_usage(usage, "--objective lm|bp2c|bptc|birdie is required");
	r->objective = -1;
	for (int i = 0; i < OBJ_COUNT; i++)
		if (!strcmp(o->objective, train_objective_names[i]))
			r->objective = i;
	if (r->objective < 0)
		cli_usage(usage, "--objective: '%s': lm, bp2c, bptc or birdie", o->objective);
	if (o->given_birdie && r->objective != OBJ_BIRDIE)
		cli_usage(usage, "--birdie-mix, --birdie-every and --birdie-only belong to --objective "
				 "birdie");
	if (o->mode && (ss_compose_mode_parse(o->mode, &r->mode) || r->mode == SS_COMPOSE_SUM ||
			r->mode == SS_COMPOSE_MAX))
		cli_usage(usage, "--mode: '%s': picaso-r, picaso-s, caso or soup", o->mode);
	if (!r->data)
		cli_usage(usage, "--data FILE is required");
	if (r->objective == OBJ_BP2C && !r->states)
		cli_usage(usage, "--objective bp2c needs --states FILE");
	if (r->objective == OBJ_BPTC && !r->chunk_tokens)
		cli_usage(usage, "--objective bptc needs --chunk-tokens FILE");
	if (r->loss_after && r->objective != OBJ_LM)
		cli_usage(usage, "--loss-after belongs to lm (bp2c and bptc count the "
				 "continuation only; birdie's objectives place their own loss)");
	if ((r->objective == OBJ_LM || r->objective == OBJ_BIRDIE) && r->batch_tokens < r->seq_len)
		cli_usage(usage, "--batch-tokens %lld is less than --seq-len %lld",
			  (long long)r->batch_tokens, (long long)r->seq_len);
	r->rng = r->seed;
}

/* The run's state: --resume's trainer_state.json (with --steps, --until
 * given again), or a new run's options checked; then --until. */
static void resolve_run(train_opts *o)
{
	run_state *r = &o->r;
	int64_t steps_given = r->steps;
	if (o->resume) {
		load_state(o->resume, r);
		if (o->given_steps)
			r->steps = steps_given;
		if (r->step > r->steps)
			cli_usage(usage, "--steps %lld: the run in %s is at step %lld",
				  (long long)r->steps, o->resume, (long long)r->step);
		if (o->until >= 0 && o->until < r->step)
			cli_usage(usage, "--until %lld: the run in %s is at step %lld",
				  (long long)o->until, o->resume, (long long)r->step);
	} else {
		check_new_run(o);
	}
	if ((r->states && r->objective != OBJ_BP2C) || (r->chunk_tokens && r->objective != OBJ_BPTC))
		cli_usage(usage, "--states belongs to bp2c, --chunk-tokens to bptc (the objective is %s)",
			  train_objective_names[r->objective]);
	if (o->until < 0)
		o->until = r->steps;
	if (o->until > r->steps)
		cli_usage(usage, "--until %lld is past --steps %lld", (long long)o->until,
			  (long long)r->steps);
}

/* The model trained (f32), a Mamba-2; a new run takes its fingerprint and
 * its dtype as the saved one unless --save-dtype. */
static ss_model *load_model(train_opts *o, const char *model_dir)
{
	ss_model *m = mcli_load_model(model_dir, 0, "f32", usage);
	if (ss_model_is_mamba1(&m->cfg))
		cli_die("%s: a Mamba-1 model: ss-train fine-tunes Mamba-2 models only", model_dir);
	if (!o->resume) {
		snprintf(o->r.base_fingerprint, sizeof o->r.base_fingerprint, "%s", m->fingerprint);
		/* a checkpoint's own dtype, unless safetensors has none for it (a
		 * q8_0 GGUF: its values are f32's exactly) */
		const ss_dtype_info *d = ss_dtype_info_of(m->ckpt_dtype);
		o->r.save_dtype = d && (d->uses & SS_DTYPE_SAFETENSORS) ? m->ckpt_dtype : SS_DTYPE_F32;
		if (o->sdtype) /* weights: q8 is a state dtype */
			o->r.save_dtype = (ss_dtype)cli_dtype("--save-dtype", o->sdtype, SS_DTYPE_SAFETENSORS, usage);
	}
	return m;
}

/* ------------------------------------------------------------- output */

/* What the step callback needs. */
typedef struct {
	train_opts *o;
	ss_train_run *run;
	ss_model_config cfg;
	const char *model_dir;
	ss_tokenizer *tok; /* asked for by the run, or NULL */
	double t0;         /* when the step began (the previous one ended) */
} train_out;

static ss_tokenizer *get_tokenizer(void *ctx)
{
	train_out *c = ctx;
	if (!c->tok)
		c->tok = cli_tokenizer(c->o->mo.tokenizer, c->model_dir);
	return c->tok;
}

/* The checkpoint of the run as it stands, in -o DIR. */
static void checkpoint(train_out *c)
{
	char err[SS_ERRMSG_MAX] = "";
	const float *am, *av;
	if (ss_train_run_tell(c->run, err))
		cli_die("%s", err);
	ss_train_run_moments(c->run, &am, &av);
	save(c->o->out_dir, &c->o->r, ss_train_run_trainer(c->run), &c->cfg, am, av, c->model_dir);
}

/* birdie's keys of the step line: "inputs" (the step's input tokens),
 * "objectives" (each sequence's
 * configuration index) and, at an evaluation, "birdie": {NAME: {"loss",
 * "p"}} for every configuration. */
static void print_birdie(const ss_train_step_info *s)
{
	printf(",\"inputs\":%lld", (long long)s->inputs);
	for (int i = 0; i < s->nseq; i++)
		printf(i ? ",%d" : ",\"objectives\":[%d", s->config[i]);
	printf(s->nseq ? "]" : ",\"objectives\":[]");
	for (int i = 0; s->birdie_loss && i < SS_TRAIN_BIRDIE_CONFIGS; i++)
		printf("%s\"%s\":{\"loss\":%.9g,\"p\":%.9g}", i ? "," : ",\"birdie\":{",
		       ss_train_birdie_config(i), s->birdie_loss[i], s->birdie_action[i]);
	if (s->birdie_loss)
		putchar('}');
}

/* One JSON line a step on stdout, flushed; the progress line; the
 * checkpoint every --save-every steps. */
static int on_step(void *ctx, const ss_train_step_info *s)
{
	train_out *c = ctx;
	printf("{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%lld,"
	       "\"seqs\":%d",
	       (long long)s->step, s->loss, s->lr, s->grad_norm, (long long)s->tokens, s->nseq);
	for (int i = 0; s->k && i < s->nseq; i++)
		printf(i ? ",%d" : ",\"k\":[%d", s->k[i]);
	if (s->k)
		putchar(']');
	if (s->config)
		print_birdie(s);
	printf("}\n");
	/* each step's line as it ends: a log file or `tail -f` sees every
	 * finished step, and a killed run's log ends at its last one */
	if (fflush(stdout) != 0 || ferror(stdout))
		cli_die("write error: %s", strerror(errno));
	double dt = cli_now() - c->t0;
	cli_progress_of((double)s->step, (double)c->o->until, "step %lld, loss %.4f, %.0f tokens/s",
			(long long)s->step, s->loss, dt > 0 ? (double)s->tokens / dt : 0);
	if (c->o->save_every && s->step % c->o->save_every == 0 && s->step < c->o->until)
		checkpoint(c);
	c->t0 = cli_now();
	return 0;
}

/* ------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	char err[SS_ERRMSG_MAX] = "";
	train_opts o;
	cli_init("ss-train");
	atexit(save_cleanup);
	parse_args(argc, argv, &o);
	resolve_run(&o);
	/* -o DIR is replaced whole: no input in it (--resume DIR -o DIR goes on in place) */
	const char *ins[] = { o.r.data, o.r.states, o.r.chunk_tokens, o.mo.tokenizer, o.resume ? NULL : o.mo.model };
	for (size_t i = 0; i < sizeof ins / sizeof *ins; i++)
		cli_out_dir_not_input(o.out_dir, ins[i]);
	train_out c = { .o = &o, .model_dir = o.resume ? o.resume : cli_model_dir(o.mo.model, usage) };
	ss_blas_threads(o.mo.threads);
	ss_model *m = load_model(&o, c.model_dir);
	c.cfg = m->cfg;
	const ss_train_env env = { .model_dir = c.model_dir, .resume_dir = o.resume,
				   .max_record = cli_max_record(), .threads = o.mo.threads,
				   .tokenizer = get_tokenizer, .ctx = &c };
	if (ss_train_run_open(&c.run, &o.r, m, &env, err))
		cli_die("%s", err);
	ss_model_free(m);
	c.t0 = cli_now();
	if (ss_train_run_steps(c.run, o.until, on_step, &c, err))
		cli_die("%s", err);
	cli_progress_end();
	checkpoint(&c);
	ss_train_run_free(c.run);
	ss_tokenizer_free(c.tok);
	train_state_free(&o.r);
	return 0;
}
