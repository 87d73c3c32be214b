# pipelines/recall.mk — a Mamba-2 that recalls what its (composed) state holds, trained here on
# the CPU, and the PICASO and souping papers' claims measured on it (issue 30): key-value
# documents from gen/mkrecall (formats/recall.md), pretraining with ss-train --objective lm,
# ss-eval recall before and after fine-tuning for composition (bptc, bp2c, the souping paper's
# soup objective, and plain lm as the control).
#
#   make -f pipelines/recall.mk model         [R=build/recall] [THREADS=2]   (<= 30 min on 2 cores)
#   make -f pipelines/recall.mk eval          [MODEL=R/model] (zero-shot table, R/eval-base.tsv)
#   make -f pipelines/recall.mk finetune      (bptc, bp2c, soup-k2/4/8, lm-ft from R/model, each evaluated)
#   make -f pipelines/recall.mk bundle        (copies R/model into data/recall-model)
#   make -f pipelines/recall.mk dtypes        [MODEL=data/recall-model] (quality per state dtype)
#
# The model: gen/mkmodel's Mamba-2 of SHAPE (d_model 128, 4 layers, d_state 64, headdim 32,
# vocabulary 556 = 256 bytes + 300 added tokens: names and digit pairs, mkrecall tokenizer),
# tied embeddings, 0.54 M parameters. Its data: PRE_SEQS sequences of 1..16 phonebook lines
# ("Vera Rossi: 7297", two tokens a name, two a number) with distinct keys, a blank line, then 16
# of those lines again (mkrecall train --pairs 1 --max-docs 16 --repeats 16); the loss counts
# only the lines after the blank line (--loss-after): recalling, not guessing. The mixture of
# 1 to 16 lines is the curriculum: with a line or two the copy is easy to find, and the model
# leaves the no-recall plateau (2.84 nats/token on the questions) after about 500 steps; 8-16
# lines stayed on it for 1,000 steps. 7,000 steps: 25 minutes with 2 threads on the 2-core
# development machine; the model card, data/recall-model/README.md, has the loss curve and the
# zero-shot table.
#
# Evaluation data (held out: other seeds than the training data, whose keys are drawn afresh
# per sequence anyway): a corpus of EVAL_DOCS documents of 8 lines, every key in one document
# only (so BM25 on the key's words finds it), and EVAL_QUERIES queries, each with its gold
# document and 15 distractors (mkrecall queries --k 16); ss-eval recall at k = KS, gold at a
# uniformly drawn position, oracle documents and (--retrieve) BM25's top k of the key.
#
# R/tokenizer.json     mkrecall tokenizer
# R/init/              the random initial model (+ tokenizer.json)
# R/pretrain.tokens    the pretraining sequences, tokenized
# R/model/             the pretrained model (checkpoint every 250 steps: --resume continues)
# R/pretrain.log       ss-train's JSON line per step (renamed into place at the end)
# R/eval/corpus.*      the evaluation corpus: JSONL, tokens; R/eval/queries.jsonl
# R/eval-NAME/         states and index of the corpus under model NAME
# R/eval-NAME.tsv      ss-eval recall of model NAME (base = R/model; the fine-tuned ones below)
# R/ft/                fine-tuning corpus and queries (other seeds), its states under R/model
# R/ft-NAME/           fine-tuned models: bptc, bp2c (picaso-r, k <= FT_K), soup-kK (bptc with
#                      --mode soup, k <= K), lm-ft (lm on fresh pretraining sequences): FT_STEPS each
# R/finetune.tsv       every model's rows of context oracle, pos all: the before/after table
# R/recall-NAME.png    the gnuplot figure of each table (pipelines/eval-recall.gp)
# R/eval-dt-T/         the evaluation corpus's states stored as dtype T (ss-encode --state-dtype T,
#                      T in DTYPES) under MODEL, and their index; R/eval-dt-T.tsv its ss-eval recall
# R/dtypes.tsv         per stored dtype: bytes per chunk as stored and the oracle rows (pos all)
#                      of picaso-r and soup at k = DTYPE_KS (issue 54: what each dtype costs)

SHELL    := /bin/bash
RECALL_MK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
TOP      := $(abspath $(RECALL_MK_DIR)/..)
R        ?= $(TOP)/build/recall
THREADS  ?=
MKRECALL ?= $(TOP)/build/gen/mkrecall
MKMODEL  ?= $(TOP)/build/gen/mkmodel
SHAPE    ?= --d-model 128 --n-layer 4 --d-state 64 --headdim 32 --expand 2 --ngroups 1 \
	    --vocab 556 --pad-multiple 8 --seed 1
PRE_SEED ?= 7
PRE_SEQS ?= 200000
PRE_DATA ?= --pairs 1 --max-docs 16 --repeats 16
PRE_STEPS ?= 7000
PRE_OPTS ?= --lr 3e-3 --min-lr 3e-4 --warmup 50 --seq-len 256 --batch-tokens 2048 --batch-seqs 32
LOSS_AFTER := $$'\n\n'
EVAL_SEED ?= 1001
EVAL_DOCS ?= 300
EVAL_QUERIES ?= 200
KS       ?= 1,2,4,8,16
METHODS  ?= naive,concat,caso,picaso-s,picaso-r,soup,piconcat-r
MODEL    ?= $(R)/model
FT_SEED  ?= 2002
FT_DOCS  ?= 300
FT_QUERIES ?= 20000
FT_K     ?= 16
FT_STEPS ?= 300
FT_OPTS  ?= --lr 1e-3 --min-lr 1e-4 --warmup 20 --batch-tokens 2048 --batch-seqs 16
SOUP_KS  ?= 2 4 8
DTYPES   ?= f32 f16 bf16 q8
DTYPE_KS ?= 1,4,8,16

export PATH := $(TOP)/build/bin:$(PATH)
threads := $(if $(THREADS),--threads $(THREADS))
FT_MODELS := bptc bp2c $(addprefix soup-k,$(SOUP_KS)) lm-ft
# What MODEL needs first: pretraining, when it is this directory's model.
MODEL_DEP := $(if $(filter $(R)/model,$(MODEL)),$(R)/pretrain.log)

.PHONY: model eval finetune bundle dtypes clean
.SECONDARY:
.DELETE_ON_ERROR:
model: $(R)/pretrain.log
eval: $(R)/eval-base.tsv

$(R)/tokenizer.json:
	@mkdir -p $(@D)
	$(MKRECALL) tokenizer -o $@

$(R)/init/config.json: $(R)/tokenizer.json
	$(MKMODEL) $(@D) $(SHAPE) && cp $< $(@D)/tokenizer.json

$(R)/pretrain.tokens: $(R)/tokenizer.json
	$(MKRECALL) train --seed $(PRE_SEED) --seqs $(PRE_SEQS) $(PRE_DATA) -o $@.jsonl
	ss-tokenize -q -t $< --jsonl -o $@ $@.jsonl && rm -f $@.jsonl

# The log is renamed into place at the end: until then model/ holds the last checkpoint.
$(R)/pretrain.log: $(R)/init/config.json $(R)/pretrain.tokens
	ss-train --objective lm --model $(R)/init $(threads) --data $(R)/pretrain.tokens \
		--loss-after $(LOSS_AFTER) --steps $(PRE_STEPS) --save-every 250 $(PRE_OPTS) \
		-o $(R)/model >$@.tmp && mv -f $@.tmp $@

# Evaluation corpus and queries (the tokens depend on the tokenizer only).
$(R)/eval/corpus.jsonl:
	@mkdir -p $(@D)
	$(MKRECALL) corpus --seed $(EVAL_SEED) --docs $(EVAL_DOCS) --pairs 8 -o $@
$(R)/eval/queries.jsonl:
	@mkdir -p $(@D)
	$(MKRECALL) queries --seed $(EVAL_SEED) --docs $(EVAL_DOCS) --pairs 8 --k 16 \
		--queries $(EVAL_QUERIES) -o $@
$(R)/ft/corpus.jsonl:
	@mkdir -p $(@D)
	$(MKRECALL) corpus --seed $(FT_SEED) --docs $(FT_DOCS) --pairs 8 -o $@
$(R)/ft/queries.jsonl:
	@mkdir -p $(@D)
	$(MKRECALL) queries --seed $(FT_SEED) --docs $(FT_DOCS) --pairs 8 --k $(FT_K) \
		--queries $(FT_QUERIES) -o $@
$(R)/%/corpus.tokens: $(R)/%/corpus.jsonl $(R)/tokenizer.json
	ss-tokenize -q -t $(R)/tokenizer.json --jsonl -o $@ $<

# One model's database of the evaluation corpus, and its table. NAME=base is R/model.
model_of = $(if $(filter base,$(1)),$(MODEL),$(R)/ft-$(1))
$(R)/eval-base/index.db: $(MODEL_DEP)
$(R)/eval-%/index.db: $(R)/eval/corpus.tokens
	@mkdir -p $(@D)
	ss-encode -q --model $(call model_of,$*) $(threads) -o $(@D)/corpus.states $<
	t=$@.tmp.$$$$; rm -f $$t $$t-journal; \
	ss-retrieve build -q --index $$t $< $(@D)/corpus.states && mv -f $$t $@ || { rm -f $$t $$t-journal; exit 1; }
$(R)/eval-%.tsv: $(R)/eval-%/index.db $(R)/eval/queries.jsonl
	ss-eval recall -q --model $(call model_of,$*) $(threads) --index $< --qa $(R)/eval/queries.jsonl \
		--ks $(KS) --methods $(METHODS) --retrieve -o $@
	gnuplot -e "tsv='$@'; out='$(R)/recall-$*'" $(RECALL_MK_DIR)/eval-recall.gp

# Fine-tuning for composition, each FT_STEPS steps from MODEL on the fine-tuning corpus's
# queries (k drawn uniformly in 0..max-k per example, the gold chunk composed last).
$(R)/ft/corpus.states: $(R)/ft/corpus.tokens $(MODEL_DEP)
	ss-encode -q --model $(MODEL) $(threads) -o $@ $<
$(FT_MODELS:%=$(R)/ft-%/config.json): $(MODEL_DEP)
FT = ss-train --model $(MODEL) $(threads) --steps $(FT_STEPS) $(FT_OPTS)
$(R)/ft-bptc/config.json: $(R)/ft/queries.jsonl $(R)/ft/corpus.tokens
	$(FT) --objective bptc --mode picaso-r --max-k $(FT_K) --data $< --chunk-tokens $(R)/ft/corpus.tokens \
		-o $(@D) >$(R)/ft-bptc.log
$(R)/ft-bp2c/config.json: $(R)/ft/queries.jsonl $(R)/ft/corpus.states
	$(FT) --objective bp2c --mode picaso-r --max-k $(FT_K) --data $< --states $(R)/ft/corpus.states \
		-o $(@D) >$(R)/ft-bp2c.log
$(R)/ft-soup-k%/config.json: $(R)/ft/queries.jsonl $(R)/ft/corpus.tokens
	$(FT) --objective bptc --mode soup --max-k $* --data $< --chunk-tokens $(R)/ft/corpus.tokens \
		-o $(@D) >$(R)/ft-soup-k$*.log
$(R)/ft/lm.tokens: $(R)/tokenizer.json
	@mkdir -p $(@D)
	$(MKRECALL) train --seed $(FT_SEED) --seqs 20000 $(PRE_DATA) -o $@.jsonl
	ss-tokenize -q -t $< --jsonl -o $@ $@.jsonl && rm -f $@.jsonl
$(R)/ft-lm-ft/config.json: $(R)/ft/lm.tokens
	$(FT) --objective lm --loss-after $(LOSS_AFTER) --seq-len 256 --data $< -o $(@D) >$(R)/ft-lm-ft.log
$(R)/eval-bptc/index.db $(R)/eval-bp2c/index.db $(R)/eval-lm-ft/index.db: $(R)/eval-%/index.db: $(R)/ft-%/config.json
$(foreach k,$(SOUP_KS),$(eval $(R)/eval-soup-k$(k)/index.db: $(R)/ft-soup-k$(k)/config.json))

finetune: $(R)/finetune.tsv
$(R)/finetune.tsv: $(R)/eval-base.tsv $(FT_MODELS:%=$(R)/eval-%.tsv)
	{ head -n 1 $< | sed 's/^/model\t/'; for m in base $(FT_MODELS); do \
		awk -v m=$$m -F '\t' 'NR > 1 && $$1 == "oracle" && $$4 == "all" { print m "\t" $$0 }' \
			$(R)/eval-$$m.tsv || exit 1; done; } >$@

# Quality per stored state dtype: the same corpus encoded at each dtype, composed in f32 (the
# eval-dt-% rules are chosen over eval-% for these: a shorter stem).
$(R)/eval-dt-%/index.db: $(R)/eval/corpus.tokens $(MODEL_DEP)
	@mkdir -p $(@D)
	ss-encode -q --model $(MODEL) $(threads) --state-dtype $* -o $(@D)/corpus.states $<
	t=$@.tmp.$$$$; rm -f $$t $$t-journal; \
	ss-retrieve build -q --index $$t $< $(@D)/corpus.states && mv -f $$t $@ || { rm -f $$t $$t-journal; exit 1; }
$(R)/eval-dt-%.tsv: $(R)/eval-dt-%/index.db $(R)/eval/queries.jsonl
	ss-eval recall -q --model $(MODEL) $(threads) --index $< --qa $(R)/eval/queries.jsonl \
		--ks $(DTYPE_KS) --methods picaso-r,soup -o $@
dtypes: $(R)/dtypes.tsv
$(R)/dtypes.tsv: $(DTYPES:%=$(R)/eval-dt-%.tsv)
	{ head -n 1 $< | sed 's/^/dtype\tbytes_per_chunk\t/'; for d in $(DTYPES); do \
		b=$$(( $$(stat -c %s $(R)/eval-dt-$$d/corpus.states) / $(EVAL_DOCS) )); \
		awk -v d=$$d -v b=$$b -F '\t' 'NR > 1 && $$1 == "oracle" && $$4 == "all" { print d "\t" b "\t" $$0 }' \
			$(R)/eval-dt-$$d.tsv || exit 1; done; } >$@

# The bundled demo model (data/recall-model): the weights, config and tokenizer.
bundle: $(R)/pretrain.log
	mkdir -p $(TOP)/data/recall-model
	cp $(MODEL)/config.json $(MODEL)/model.safetensors $(MODEL)/tokenizer.json $(TOP)/data/recall-model/

clean:
	rm -rf $(R)
