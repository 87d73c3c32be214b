# pipelines/realtext.mk — a Mamba-2 that uses its context on real text, trained here on the CPU
# from random weights with Birdie's objectives (ss-train --objective birdie, issue 46), beside
# the control: the same data, shape, schedule and steps with plain next-token prediction
# (ss-train --objective lm). Both run at once, one thread each (make -j2): 5,500 steps of 4,096
# tokens each with the defaults, in three parts, then 400 of BP2C (below); the times measured are in
# data/model/README.md, the card of the model this makes.
#
#   make -f pipelines/realtext.mk -j2 models   [R=build/realtext] [STEPS=4000] [ANNEAL=1500] [BP2C=400]
#   make -f pipelines/realtext.mk eval          (context use on held-out text, phonebook recall
#                                                and the PICASO paper's Fig. 3, both models)
#   make -f pipelines/realtext.mk bundle        (copies R/birdie into data/model)
#
# Tokenizer: byte level (the 256 bytes, no merges) plus Birdie's 10 sentinels as added tokens
# (pipelines/byte_tokenizer.py): Debian packages no BPE trainer for Python or C, and byte
# tokens keep names and numbers copyable symbol by symbol; vocabulary 266, padded to 272.
# Shape: the recall model's (d_model 128, 4 layers, d_state 64, headdim 32, expand 2), tied.
# Data: the articles of ../shared/train's 2015 part 00 (TRAIN_BYTES of them), one document
# each; never the WikiText-2 test split, and not the 2018 part (held out for the evaluation);
# after each article PB_PER phonebook sequences (gen/mkrecall train, the recall model's data,
# its seed: the evaluation's phonebooks have another), about 28% of the bytes: recalling what a
# context said, in plain text, as the issue's trials suggest. PB_PER=0: articles only.
#
# R/tokenizer.json         the byte-level tokenizer with the sentinels
# R/init/                  the random initial model
# R/train.tokens           the training articles
# R/copy/                  Birdie's curriculum: the model after CURRICULUM steps of short copies
# R/birdie-main/, R/birdie-anneal/   ... after the second and third parts; R/control-copy/,
#                          R/control-main/, R/control-anneal/ the same
# R/bp2c-birdie/, R/bp2c-control/     the fourth part's examples (pipelines/train.mk's OUT)
# R/birdie/, R/control/    the two models (checkpoints every 200-500 steps: --resume continues)
# R/*.log                  ss-train's JSON line a step, one per part (renamed into place at the
#                          end)
# R/context-use.tsv        held-out context use of both models (pipelines/context_use.py) on the
#                          2018 Wikipedia part and on WikiText-2 test
# R/recall-NAME.tsv        ss-eval recall of model NAME (birdie, control) on gen/mkrecall
#                          phonebooks of 8 lines a document, as plain text in the byte tokenizer
# R/wikitext-NAME/         ss-eval wikitext (pipelines/eval.mk eval-wikitext) of model NAME
# R/squad.tsv              SQuAD v2's "answer contains label" (pipelines/squad_contains.py)

SHELL    := /bin/bash
REALTEXT_MK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
TOP      := $(abspath $(REALTEXT_MK_DIR)/..)
SS_SHARED ?= $(abspath $(TOP)/../shared)
R        ?= $(TOP)/build/realtext
MKMODEL  ?= $(TOP)/build/gen/mkmodel
MKRECALL ?= $(TOP)/build/gen/mkrecall
SHAPE    ?= --d-model 128 --n-layer 4 --d-state 64 --headdim 32 --expand 2 --ngroups 1 \
	    --vocab 266 --pad-multiple 8 --seed 1
TRAIN_SRC ?= $(SS_SHARED)/train/wikipedia2015-part-00.txt.zst
TRAIN_BYTES ?= 40000000
PB_PER   ?= 16
PB_SEQS  ?= 40000
HELDOUT  ?= $(SS_SHARED)/train/wikipedia2018-part-00.txt.zst
# Context use grows with Birdie's second part (held-out 2018 text, own chunk vs none): 2.26 %
# after its 3,000 steps in the run that made data/model (the control after the same: 0.3 %).
STEPS    ?= 4000
OPTS     ?= --seq-len 512 --batch-tokens 4096 --batch-seqs 16 --lr 3e-3 --min-lr 3e-4 --warmup 50 \
	    --save-every 200 --threads 1
BIRDIE_OPTS ?= --birdie-every 25
CURRICULUM ?= 1000
# The third part: after 3,000 steps of the second, context use still grows (2.26 % -> 2.69 %
# with 1,500 more steps at 1e-3 -> 1e-4).
ANNEAL   ?= 1500
ANNEAL_OPTS ?= --seq-len 512 --batch-tokens 4096 --batch-seqs 16 --lr 1e-3 --min-lr 1e-4 --warmup 20 \
	    --save-every 500 --threads 1
BP2C     ?= 400
BP2C_K   ?= 4
BP2C_OPTS ?= --lr 3e-4 --min-lr 3e-5 --warmup 20 --batch-tokens 4096 --save-every 100 --threads 1
CURRICULUM_OPTS ?= --seq-len 512 --batch-tokens 4096 --batch-seqs 32 --lr 3e-3 --min-lr 1e-3 \
	    --warmup 20 --threads 1
# Context use: N held-out chunks of CHUNK bytes, each scored after an earlier chunk of its
# article, after another article's chunk, and alone.
CTX_N    ?= 300
CTX_CHUNK ?= 256
WIKITEXT ?= $(TOP)/data/wikitext-2-raw.test.hf-crlf.raw
# Phonebook recall: pipelines/recall.mk's evaluation phonebooks (300 documents of 8 lines, 200
# queries, seed 1001; the training data's seed is 7), k = RECALL_KS oracle documents.
RECALL_KS ?= 1,4
RECALL_METHODS ?= naive,concat,picaso-r,soup
# Fig. 3: passages of WikiText-2 test, k = 0..KMAX.
PASSAGES ?= 200
KMAX     ?= 10
SQUAD    ?= $(SS_SHARED)/data/qa/squad-v2.0-dev-first5articles.json
MODELS   := birdie control

export PATH := $(TOP)/build/bin:$(PATH)

.PHONY: models eval bundle clean
.SECONDARY:
.DELETE_ON_ERROR:
models: $(R)/birdie.log $(R)/control.log
eval: $(R)/context-use.tsv $(MODELS:%=$(R)/recall-%.tsv) $(MODELS:%=$(R)/wikitext-%/wikitext.tsv) \
	$(R)/squad.tsv

$(R)/tokenizer.json:
	@mkdir -p $(@D)
	python3 $(REALTEXT_MK_DIR)/byte_tokenizer.py $@

$(R)/init/config.json: $(R)/tokenizer.json
	$(MKMODEL) $(@D) $(SHAPE) && cp $< $(@D)/tokenizer.json

$(R)/train.tokens: $(R)/tokenizer.json
	$(MKRECALL) train --seed 7 --seqs $(PB_SEQS) --pairs 1 --max-docs 16 --repeats 16 -o $@.pb
	python3 $(REALTEXT_MK_DIR)/wiki_docs.py $(TRAIN_SRC) $(TRAIN_BYTES) $@.jsonl \
		$(if $(filter-out 0,$(PB_PER)),$@.pb $(PB_PER))
	ss-tokenize -q -t $< --jsonl --no-text -o $@ $@.jsonl && rm -f $@.jsonl $@.pb

# Birdie in three parts (then BP2C, below). A curriculum: CURRICULUM steps of short copies alone (copy/short, 8-32
# tokens; at most 32 of them a step), where the model learns to copy (on this shape the loss
# falls from ~2 to ~0.2 nats/token between steps ~350 and ~550 with copies alone, and stays on
# its plateau when copies are a few percent of a Birdie mixture, whose scheduler then never
# rewards them); then STEPS - CURRICULUM steps of every objective under the scheduler; then
# ANNEAL more at a lower rate (ANNEAL_OPTS), the scheduler started afresh. The control runs the
# same three parts with --objective lm (its first part with CURRICULUM_OPTS). The logs are renamed
# into place at the end: until then the directory holds the last checkpoint.
$(R)/copy.log: $(R)/init/config.json $(R)/train.tokens
	ss-train --objective birdie --birdie-only copy/short --model $(R)/init --data $(R)/train.tokens \
		--steps $(CURRICULUM) $(CURRICULUM_OPTS) -o $(R)/copy >$@.tmp && mv -f $@.tmp $@
$(R)/birdie-main.log: $(R)/copy.log
	ss-train --objective birdie $(BIRDIE_OPTS) --model $(R)/copy --data $(R)/train.tokens \
		--steps $$(($(STEPS) - $(CURRICULUM))) $(OPTS) -o $(R)/birdie-main >$@.tmp && mv -f $@.tmp $@
$(R)/birdie-anneal.log: $(R)/birdie-main.log
	ss-train --objective birdie $(BIRDIE_OPTS) --model $(R)/birdie-main --data $(R)/train.tokens \
		--steps $(ANNEAL) $(ANNEAL_OPTS) -o $(R)/birdie-anneal >$@.tmp && mv -f $@.tmp $@
$(R)/control-copy.log: $(R)/init/config.json $(R)/train.tokens
	ss-train --objective lm --model $(R)/init --data $(R)/train.tokens \
		--steps $(CURRICULUM) $(CURRICULUM_OPTS) -o $(R)/control-copy >$@.tmp && mv -f $@.tmp $@
$(R)/control-main.log: $(R)/control-copy.log
	ss-train --objective lm --model $(R)/control-copy --data $(R)/train.tokens \
		--steps $$(($(STEPS) - $(CURRICULUM))) $(OPTS) -o $(R)/control-main >$@.tmp && mv -f $@.tmp $@
$(R)/control-anneal.log: $(R)/control-main.log
	ss-train --objective lm --model $(R)/control-main --data $(R)/train.tokens \
		--steps $(ANNEAL) $(ANNEAL_OPTS) -o $(R)/control-anneal >$@.tmp && mv -f $@.tmp $@

# The fourth part, for both: BP2C (the PICASO paper's fine-tuning for composition, §5): a
# passage's continuation half predicted from the PICASO-R composition of up to BP2C_K halves of
# other passages that BM25 retrieves for its first half (pipelines/train.mk's examples, from
# the 2015 part's first PASSAGES lines; their states encoded by the model being tuned), the
# gradient through the query and continuation only. Where Birdie taught the model to copy, this
# teaches it what retrieved text is worth: Fig. 3's gain at k = 4 grows from 1.4 to 1.6 % (held-out
# context use stays 2.7 %).
$(R)/%.log: $(R)/%-anneal.log
	$(MAKE) --no-print-directory -f $(REALTEXT_MK_DIR)/train.mk examples MODEL=$(R)/$*-anneal \
		OUT=$(R)/bp2c-$* TRAIN=$(SS_SHARED)/train THREADS=1
	ss-train --objective bp2c --mode picaso-r --model $(R)/$*-anneal --data $(R)/bp2c-$*/examples.jsonl \
		--states $(R)/bp2c-$*/halves.states --max-k $(BP2C_K) --steps $(BP2C) $(BP2C_OPTS) \
		-o $(R)/$* >$@.tmp && mv -f $@.tmp $@

$(R)/context-use.tsv: $(R)/birdie.log $(R)/control.log
	{ echo "# $(notdir $(HELDOUT))"; \
	  python3 $(REALTEXT_MK_DIR)/context_use.py $(HELDOUT) 99 $(CTX_N) $(CTX_CHUNK) \
		$(TOP)/build/bin $(R)/birdie $(R)/control && \
	  echo "# $(notdir $(WIKITEXT))" && \
	  python3 $(REALTEXT_MK_DIR)/context_use.py $(WIKITEXT) 99 $(CTX_N) $(CTX_CHUNK) \
		$(TOP)/build/bin $(R)/birdie $(R)/control; } >$@.tmp && mv -f $@.tmp $@

$(R)/squad.tsv: $(R)/birdie.log $(R)/control.log
	python3 $(REALTEXT_MK_DIR)/squad_contains.py $(SQUAD) 0 32 $(TOP)/build/bin $(R)/birdie \
		$(R)/control >$@.tmp && mv -f $@.tmp $@

# pipelines/recall.mk's evaluation phonebooks (its seed, sizes and generator).
$(R)/recall/eval/corpus.jsonl $(R)/recall/eval/queries.jsonl:
	$(MAKE) --no-print-directory -f $(REALTEXT_MK_DIR)/recall.mk R=$(R)/recall $@
$(R)/recall/corpus.tokens: $(R)/recall/eval/corpus.jsonl $(R)/tokenizer.json
	ss-tokenize -q -t $(R)/tokenizer.json --jsonl -o $@ $<
$(R)/recall-%/index.db: $(R)/recall/corpus.tokens $(R)/%.log
	@mkdir -p $(@D)
	ss-encode -q --model $(R)/$* -o $(@D)/corpus.states $<
	rm -f $@ && ss-retrieve build -q --index $@ $< $(@D)/corpus.states # no file when it fails
$(R)/recall-%.tsv: $(R)/recall-%/index.db $(R)/recall/eval/queries.jsonl
	ss-eval recall -q --model $(R)/$* --index $< --qa $(R)/recall/eval/queries.jsonl --ks $(RECALL_KS) \
		--methods $(RECALL_METHODS) -o $@

$(R)/wikitext-%/wikitext.tsv: $(R)/%.log
	$(MAKE) --no-print-directory -f $(REALTEXT_MK_DIR)/eval.mk eval-wikitext MODEL=$(R)/$* \
		TOKENIZER=$(R)/$*/tokenizer.json EVAL_DIR=$(R)/wikitext-$* PASSAGES=$(PASSAGES) \
		KMAX=$(KMAX) METHODS=paper SS_BIN=$(TOP)/build/bin

# The bundled default model (data/model): the weights, config and tokenizer.
bundle: $(R)/birdie.log
	mkdir -p $(TOP)/data/model
	cp $(R)/birdie/config.json $(R)/birdie/model.safetensors $(R)/birdie/tokenizer.json \
		$(TOP)/data/model/

clean:
	rm -rf $(R)
