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
# OUT/fig4.tsv        target fig4 (picaso.txt Fig. 4 at small scale): model (base, lm-ft,
#                     bp2c, bptc), improvement_pct and concat_fraction of picaso-r and of
#                     concat from each model's WikiText-2 summary (eval.mk eval-wikitext,
#                     METHODS=naive,concat,picaso-r): how much of Concat's gain over Naive
#                     PICASO-R reaches, before and after each fine-tuning
# Targets: all (default: examples and lm.tokens), examples, lm, bp2c, bptc, lm-ft, fig4, clean.
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

export PATH := $(PATH):$(abspath $(TRAIN_MK_DIR)/../build/bin)
export K
threads := $(if $(THREADS),--threads $(THREADS))

.PHONY: all examples lm bp2c bptc lm-ft fig4 clean
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
	ss-retrieve query -q --index $< --ids --json --order best-first --empty-ok -o $@ <$(OUT)/queries.jsonl

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

clean:
	rm -rf $(OUT)
