# pipelines/train.mk — fine-tuning data for ss-train from the Wikipedia training text, joined
# from ss-* tools (picaso.txt §6.1): each passage split in two halves (query = first half,
# continuation = second), a database of every half (states + BM25 index), and for each
# passage its top K halves retrieved by the query half, both halves of the passage left out.
# The text (../shared/train, Wikipedia 2015/2018) does not overlap WikiText-2 test, on which
# the evaluation runs (pipelines/eval.mk): training examples and chunk database are disjoint
# from it.
#
#   make -f pipelines/train.mk [OUT=build/train] [MODEL=data/model] [PASSAGES=2000] [K=10]
#        [PARTS="wikipedia2015-part-00.txt.zst"] [TRAIN=../shared/train] [MIN_BYTES=400]
#        [MAX_BYTES=3000]
#        [THREADS=N]
#   make -f pipelines/train.mk bp2c STEPS=100 [TRAIN_OPTS="--lr 1e-4 ..."]  (also: bptc, lm-ft)
#   make -f pipelines/train.mk fig4 STEPS=200 [FIG4_PASSAGES=300]
#   make -f pipelines/train.mk pretrain [PRE_OUT=build/pretrain] [PRE_STEPS=1250] [PRE_OPTS=...]
#   make -f pipelines/train.mk fig4 MODEL=build/pretrain/model OUT=build/fig4 STEPS=250
#
# Pretraining (target pretrain; Fig. 4 when no trained Mamba-2 checkpoint is at hand): the
# trainer's "small" preset (../shared/trainer/README.md: d_model 128, 8 layers, d_state 64,
# headdim 32; 7.4 M parameters) initialised by gen/mkmodel, trained by ss-train --objective lm
# on the articles of PRE_PART (512-token chunks, the state reset at each) for PRE_STEPS steps of
# 4096 tokens (1.5-2.5 s a step on 2 cores: 30-50 minutes). Its held-out loss: the next-token NLL (ss-score
# from the zero state) of the first HELDOUT_CHUNKS chunks of the last 200 articles of HELDOUT_PART.
# PRE_OUT/model/       the pretrained model (checkpoint every 250 steps; --resume continues)
# PRE_OUT/pretrain.log ss-train's JSON line per step (in place when the run has ended)
# PRE_OUT/heldout.tsv  model, chunks, tokens, nll (nats/token), ppl: the initial and the
#                      pretrained model
#
# OUT/passages.txt    the first PASSAGES lines of MIN_BYTES..MAX_BYTES bytes of PARTS (zstd;
#                     the bound keeps an example within ss-train's --batch-tokens)
# OUT/halves.tokens   ss-tokenize --parts 2: P#0 (query half), P#1 (continuation half)
# OUT/halves.states   ss-encode of every half with MODEL (bp2c's --states)
# OUT/halves.db       ss-retrieve build over the halves
# OUT/queries.jsonl   ss-retrieve's batch queries: P#0's text, P#0 and P#1 excluded, K
# OUT/hits.jsonl      ss-retrieve query --ids --json --order best-first
# OUT/examples.jsonl  {"id", "query", "continuation", "chunks"}: ss-train --data for bp2c
#                     (and BPTC, which reads the chunks' tokens from halves.tokens)
# OUT/lm.tokens       the passages whole: ss-train --objective lm --data
# OUT/bp2c/           target bp2c: ss-train --objective bp2c for STEPS steps from MODEL
# OUT/bptc/           target bptc: ss-train --objective bptc (chunks: halves.tokens), the same
# OUT/lm-ft/          target lm-ft: ss-train --objective lm on lm.tokens, the same steps
# OUT/fig4-k.tsv      target fig4: model, method, k, mean_nll, improvement_pct over Naive at
#                     the same k (Concat and PICASO-R, every model); OUT/fig4.png its plot
# OUT/fig4.tsv        target fig4 (picaso.txt Fig. 4 at small scale): model (base, lm-ft,
#                     bp2c, bptc), improvement_pct and concat_fraction of picaso-r and of
#                     concat from each model's WikiText-2 summary (eval.mk eval-wikitext,
#                     METHODS=naive,concat,picaso-r): how much of Concat's gain over Naive
#                     PICASO-R reaches, before and after each fine-tuning
# Targets: all (default: examples and lm.tokens), examples, lm, bp2c, bptc, lm-ft, fig4,
# pretrain, heldout, clean.
# Every file is written under a temporary name and renamed; the halves' states depend on
# MODEL: a run with another MODEL needs another OUT.

TRAIN_MK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
TRAIN    ?= $(abspath $(TRAIN_MK_DIR)/../../shared/train)
PARTS    ?= wikipedia2015-part-00.txt.zst
OUT      ?= $(abspath $(TRAIN_MK_DIR)/../build/train)
MODEL    ?= $(abspath $(TRAIN_MK_DIR)/../data/model)
PASSAGES ?= 2000
MIN_BYTES ?= 400
MAX_BYTES ?= 3000
K        ?= 10
THREADS  ?=
STEPS    ?= 100
FIG4_PASSAGES ?= 300
TRAIN_OPTS ?=
PY       ?= python3
PRE_OUT  ?= $(abspath $(TRAIN_MK_DIR)/../build/pretrain)
PRE_PART ?= wikipedia2015-part-02
HELDOUT_PART ?= wikipedia2015-part-03
HELDOUT_CHUNKS ?= 120
PRE_STEPS ?= 1250
PRE_SHAPE ?= --d-model 128 --n-layer 8 --d-state 64 --headdim 32 --seed 1
PRE_OPTS ?= --seq-len 512 --batch-tokens 4096 --batch-seqs 8 --warmup 100 --lr 2e-3 --min-lr 2e-4
MKMODEL  ?= $(abspath $(TRAIN_MK_DIR)/../build/gen/mkmodel)

export PATH := $(PATH):$(abspath $(TRAIN_MK_DIR)/../build/bin)
# ss-tokenize reads MODEL's tokenizer (its tokenizer.json, else the bundled GPT-NeoX one).
export SS_MODEL := $(MODEL)
export K
threads := $(if $(THREADS),--threads $(THREADS))

.PHONY: all examples lm bp2c bptc lm-ft fig4 pretrain heldout clean
.PRECIOUS: $(OUT)/%
all: examples lm
examples: $(OUT)/examples.jsonl
lm: $(OUT)/lm.tokens

$(OUT)/passages.txt: $(addprefix $(TRAIN)/,$(PARTS))
	@mkdir -p $(@D)
	zstdcat $^ | awk 'length($$0) >= $(MIN_BYTES) && length($$0) <= $(MAX_BYTES)' | head -n $(PASSAGES) >$@.tmp.$$$$ && mv -f $@.tmp.$$$$ $@

$(OUT)/halves.tokens: $(OUT)/passages.txt
	ss-tokenize -q --parts 2 -o $@ $<

$(OUT)/lm.tokens: $(OUT)/passages.txt
	ss-tokenize -q -o $@ $<

$(OUT)/halves.states: $(OUT)/halves.tokens
	ss-encode -q --model $(MODEL) $(threads) -o $@ $<

$(OUT)/halves.db: $(OUT)/halves.tokens $(OUT)/halves.states
	t=$@.tmp.$$$$; rm -f $$t $$t-journal; \
	ss-retrieve build -q --index $$t $^ && mv -f $$t $@ || { rm -f $$t $$t-journal; exit 1; }

$(OUT)/halves.jsonl: $(OUT)/halves.tokens
	ss-cat --full $< >$@.tmp.$$$$ && mv -f $@.tmp.$$$$ $@

$(OUT)/queries.jsonl: $(OUT)/halves.jsonl
	$(PY) $(TRAIN_MK_DIR)/train_examples.py queries $< >$@.tmp.$$$$ && mv -f $@.tmp.$$$$ $@

$(OUT)/hits.jsonl: $(OUT)/halves.db $(OUT)/queries.jsonl
	ss-retrieve query -q --index $< --literal --ids --json --order best-first --empty-ok -o $@ <$(OUT)/queries.jsonl

$(OUT)/examples.jsonl: $(OUT)/halves.jsonl $(OUT)/hits.jsonl
	$(PY) $(TRAIN_MK_DIR)/train_examples.py examples $^ >$@.tmp.$$$$ && mv -f $@.tmp.$$$$ $@

bp2c: $(OUT)/examples.jsonl $(OUT)/halves.states
	ss-train --objective bp2c --model $(MODEL) $(threads) --data $(OUT)/examples.jsonl \
		--states $(OUT)/halves.states --max-k $(K) --steps $(STEPS) $(TRAIN_OPTS) \
		-o $(OUT)/bp2c >$(OUT)/bp2c.log

bptc: $(OUT)/examples.jsonl $(OUT)/halves.tokens
	ss-train --objective bptc --model $(MODEL) $(threads) --data $(OUT)/examples.jsonl \
		--chunk-tokens $(OUT)/halves.tokens --max-k $(K) --steps $(STEPS) $(TRAIN_OPTS) \
		-o $(OUT)/bptc >$(OUT)/bptc.log

lm-ft: $(OUT)/lm.tokens
	ss-train --objective lm --model $(MODEL) $(threads) --data $(OUT)/lm.tokens \
		--steps $(STEPS) $(TRAIN_OPTS) -o $(OUT)/lm-ft >$(OUT)/lm-ft.log

# Each model's WikiText-2 summary, then one table: the PICASO-R and Concat rows of each.
FIG4_EVAL = $(MAKE) -f $(TRAIN_MK_DIR)/eval.mk eval-wikitext METHODS=naive,concat,picaso-r \
	PASSAGES=$(FIG4_PASSAGES)
fig4: lm-ft bp2c bptc
	$(FIG4_EVAL) MODEL=$(MODEL) EVAL_DIR=$(OUT)/eval/base
	for m in lm-ft bp2c bptc; do $(FIG4_EVAL) MODEL=$(OUT)/$$m EVAL_DIR=$(OUT)/eval/$$m || exit 1; done
	{ printf 'model\tmethod\timprovement_pct\tconcat_fraction\n'; \
	  for m in base lm-ft bp2c bptc; do \
		awk -v m=$$m 'NR > 1 && ($$1 == "picaso-r" || $$1 == "concat") { print m "\t" $$0 }' \
			$(OUT)/eval/$$m/wikitext-summary.tsv || exit 1; \
	  done; } >$(OUT)/fig4.tsv.tmp && mv -f $(OUT)/fig4.tsv.tmp $(OUT)/fig4.tsv
	{ printf 'model\tmethod\tk\tmean_nll\timprovement_pct\n'; \
	  for m in base lm-ft bp2c bptc; do \
		awk -v m=$$m -F '\t' 'NR > 1 && $$1 == "naive" { nv[$$2] = $$3 } \
			NR > 1 && ($$1 == "concat" || $$1 == "picaso-r") && ($$2 in nv) { \
			printf "%s\t%s\t%s\t%s\t%.4f\n", m, $$1, $$2, $$3, 100 * (nv[$$2] - $$3) / nv[$$2] }' \
			$(OUT)/eval/$$m/wikitext.tsv || exit 1; \
	  done; } >$(OUT)/fig4-k.tsv.tmp && mv -f $(OUT)/fig4-k.tsv.tmp $(OUT)/fig4-k.tsv
	gnuplot -e "tsv='$(OUT)/fig4-k.tsv'; out='$(OUT)/fig4.png'" $(TRAIN_MK_DIR)/fig4.gp

# Pretraining: the articles of a part, 512-token chunks.
$(PRE_OUT)/%.tokens: $(TRAIN)/%.txt.zst
	@mkdir -p $(@D)
	zstd -dc $< | $(PY) $(TRAIN_MK_DIR)/train_examples.py articles $* >$@.jsonl.tmp
	ss-tokenize -q --jsonl --chunk 512 -o $@ $@.jsonl.tmp && rm -f $@.jsonl.tmp

$(PRE_OUT)/heldout.tokens: $(TRAIN)/$(HELDOUT_PART).txt.zst
	@mkdir -p $(@D)
	zstd -dc $< | $(PY) $(TRAIN_MK_DIR)/train_examples.py articles $(HELDOUT_PART) 200 >$@.jsonl.tmp
	ss-tokenize -q --jsonl --chunk 512 -o $@ $@.jsonl.tmp && rm -f $@.jsonl.tmp

$(PRE_OUT)/heldout.pairs: $(PRE_OUT)/heldout.tokens
	ss-cat --full $< | $(PY) $(TRAIN_MK_DIR)/train_examples.py nll-pairs /dev/stdin $(HELDOUT_CHUNKS) \
		>$@.tmp && mv -f $@.tmp $@

$(PRE_OUT)/init/config.json:
	@mkdir -p $(@D)
	$(MKMODEL) $(@D) $(PRE_SHAPE)

# The log is renamed into place at the end: until then model/ holds the last checkpoint.
$(PRE_OUT)/pretrain.log: $(PRE_OUT)/init/config.json $(PRE_OUT)/$(PRE_PART).tokens
	ss-train --objective lm --model $(PRE_OUT)/init $(threads) --data $(PRE_OUT)/$(PRE_PART).tokens \
		--steps $(PRE_STEPS) --save-every 250 $(PRE_OPTS) -o $(PRE_OUT)/model >$@.tmp && mv -f $@.tmp $@

pretrain: $(PRE_OUT)/pretrain.log heldout
heldout: $(PRE_OUT)/heldout.tsv
$(PRE_OUT)/heldout.tsv: $(PRE_OUT)/pretrain.log $(PRE_OUT)/heldout.pairs
	{ printf 'model\tchunks\ttokens\tnll\tppl\n'; for m in init model; do \
		ss-score -q --model $(PRE_OUT)/$$m $(threads) --no-state --pairs $(PRE_OUT)/heldout.pairs | \
		$(PY) -c 'import sys, json, math; r = [json.loads(l) for l in sys.stdin]; \
			t = sum(x["n_tokens"] for x in r); s = sum(x["sum_nll"] for x in r); \
			print("%s\t%d\t%d\t%.4f\t%.1f" % (sys.argv[1], len(r), t, s / t, math.exp(s / t)))' \
			$$m || exit 1; done; } >$@.tmp && mv -f $@.tmp $@
	cat $@

clean:
	rm -rf $(OUT)
