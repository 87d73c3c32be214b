# eval.mk — the PICASO paper's evaluation on the bundled data, joined from
# ss-* tools: WikiText-2 continuation NLL and timing vs k retrieved chunks
# (§6.1, Fig. 3; with the souping paper's pooling variants as rows, and
# k up to 50 as App. B.2), MS MARCO answer NLL (Table 1 row 1), MS MARCO
# data attribution (Appendix C, Table 4), retrieval quality of the BM25
# index over a k1 x b sweep (§B.5), processing vs inference time (App. B.3,
# Fig. 7). Every target takes MODEL=DIR: the same run on a trained model is
# one command. The bundled model is small (data/model/README.md): its NLLs
# move by about 1 % with retrieved context.
#
# From the repository root, after `make`:
#   make -f pipelines/eval.mk eval               # everything + plots
#   make -f pipelines/eval.mk eval-wikitext PASSAGES=50   # + summary, PNGs
#   make -f pipelines/eval.mk eval-k50 PASSAGES=20        # k = 0..50
#   make -f pipelines/eval.mk eval-wikitext STATE_DTYPE=q8  # states stored as q8
#   make -f pipelines/eval.mk eval-msmarco QUERIES=50
#   make -f pipelines/eval.mk eval-rerank RERANK_N=10    # MS MARCO recall@k, BM25 vs rerank
#   make -f pipelines/eval.mk eval-attribution QUERIES=20
#   make -f pipelines/eval.mk eval-retrieval K1S=0.6,1.2 BS=0.5,0.75
#   make -f pipelines/eval.mk eval-timing LENGTHS=256,1024,4096
#   make -f pipelines/eval.mk eval-openbookqa QUESTIONS=100 OBQA_KMAX=10
# Outputs in $(EVAL_DIR) (build/eval/<model name>/): wikitext.tsv,
# wikitext-summary.tsv, wikitext-passages.tsv, wikitext-{fig3,nll,time}.png,
# wikitext-k50.tsv and its PNGs, msmarco.tsv, msmarco-queries.tsv,
# msmarco.png, attribution.tsv, attribution-queries.tsv, retrieval.tsv,
# retrieval.png, timing.tsv, timing.png, openbookqa.tsv, openbookqa.png. The database (halves.tok → halves.states →
# halves.db) is built once per model; every file is written under a temporary
# name and renamed, so an interrupted run redoes only what is missing, and a
# change of PASSAGES/KMAX/... reruns only the evaluation.

EVAL_MK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
SS_SHARED ?= $(abspath $(EVAL_MK_DIR)/../../shared)
# The model, the corpus and the tokenizer bundled in data/; the MS MARCO sample is not bundled
# (Microsoft's non-commercial terms): eval-attribution reads it from ../shared.
MODEL     ?= $(abspath $(EVAL_MK_DIR)/../data/model)
SS_BIN    ?= $(abspath $(EVAL_MK_DIR)/../build/bin)
SS_BENCH  ?= $(abspath $(SS_BIN)/../bench)
# Storage dtype of the database's states (ss-encode --state-dtype): empty = f32. Every method
# that starts from stored states (all but naive; concat from its first document's) then reads
# them as stored, so the same run with STATE_DTYPE=q8 gives the NLL cost of q8 storage. A
# dtype has its own EVAL_DIR (<model name>-<dtype>).
STATE_DTYPE ?=
EVAL_DIR  ?= $(abspath $(EVAL_MK_DIR)/../build/eval/$(notdir $(MODEL))$(if $(STATE_DTYPE),-$(STATE_DTYPE)))
WIKITEXT  ?= $(abspath $(EVAL_MK_DIR)/../data/wikitext-2-raw.test.hf-crlf.raw)
MSMARCO   ?= $(SS_SHARED)/data/qa/msmarco-v1.1-train-sample200.json
OBQA      ?= $(SS_SHARED)/data/qa/openbookqa-main-test.tsv
# OpenBookQA: questions (0 = all 500) and k = 0..OBQA_KMAX whole WikiText passages.
QUESTIONS ?= 100
OBQA_KMAX ?= 10
TOKENIZER ?= $(firstword $(wildcard $(MODEL)/tokenizer.json) $(abspath $(EVAL_MK_DIR)/../data/tokenizer.json))
# Sample size: passages evaluated (0 = all ~1600). The default keeps the whole
# WikiText run, database included, well within 20 minutes on 2 cores with t1.
PASSAGES  ?= 300
MIN_TOKENS ?= 64
KMAX      ?= 10
SEED      ?= 1
QUERIES   ?= 0
# Rows of the WikiText and MS MARCO tables: the paper's 7 methods and the
# souping paper's soup/sum/max x norm none/before/after/both.
METHODS   ?= paper,souping
# k up to 50 (App. B.2): fewer passages, the paper's methods.
K50_PASSAGES ?= 20
# BM25 sweep (eval-retrieval) and Fig. 7's input lengths (eval-timing).
K1S       ?= 0.3,0.6,0.9,1.2,1.5,2.0
BS        ?= 0.2,0.4,0.6,0.75,0.9,1.0
LENGTHS   ?= 256,512,1024,2048,4096,8192
GEN       ?= 32
THREADS   ?=
DEVICE    ?=
EVAL_FLAGS = --model $(MODEL) $(if $(THREADS),--threads $(THREADS)) $(if $(DEVICE),--device $(DEVICE))

# Short names, prefixed so that the fragment can be included by another Makefile.
EV_E := $(EVAL_DIR)
EV_B := $(SS_BIN)

.PHONY: eval eval-wikitext eval-attribution eval-msmarco eval-rerank eval-retrieval eval-timing eval-k50 eval-openbookqa \
	plots eval-db eval-clean eval-force
.DELETE_ON_ERROR:

eval: eval-wikitext eval-k50 eval-msmarco eval-rerank eval-attribution eval-retrieval eval-timing eval-openbookqa plots
eval-wikitext: $(EV_E)/wikitext.tsv
	@cat $(EV_E)/wikitext-summary.tsv
eval-attribution: $(EV_E)/attribution.tsv
eval-db: $(EV_E)/halves.db

$(EV_B)/ss-%:
	@echo "eval.mk: $@ is missing: build the tools first (make)" >&2; exit 1

# Passages: the non-empty lines that are not headings (" = Title = ",
# " = = Section = = "), CR line ends removed.
$(EV_E)/passages.txt: $(WIKITEXT)
	@mkdir -p $(@D)
	tr -d '\r' <$< | grep -v '^ *$$' | grep -v '^ *=.*= *$$' >$@.tmp
	mv $@.tmp $@

# Query half and continuation half of every passage: ids passages.txt:LINE#0/#1.
$(EV_E)/halves.tok: $(EV_E)/passages.txt $(EV_B)/ss-tokenize
	cd $(EV_E) && $(EV_B)/ss-tokenize -t $(TOKENIZER) --parts 2 -o halves.tok passages.txt

$(EV_E)/halves.states: $(EV_E)/halves.tok $(EV_B)/ss-encode
	$(EV_B)/ss-encode $(EVAL_FLAGS) $(if $(STATE_DTYPE),--state-dtype $(STATE_DTYPE)) -o $@ $<

$(EV_E)/halves.db: $(EV_E)/halves.tok $(EV_E)/halves.states $(EV_B)/ss-retrieve
	rm -f $@.tmp
	$(EV_B)/ss-retrieve build -q --index $@.tmp $(EV_E)/halves.tok $(EV_E)/halves.states
	mv $@.tmp $@

# Reruns the evaluation when a knob changes (the file changes only then).
$(EV_E)/wikitext.params: eval-force
	@mkdir -p $(@D)
	@echo 'passages=$(PASSAGES) min_tokens=$(MIN_TOKENS) kmax=$(KMAX) seed=$(SEED) methods=$(METHODS)' | \
		cmp -s - $@ 2>/dev/null || \
		echo 'passages=$(PASSAGES) min_tokens=$(MIN_TOKENS) kmax=$(KMAX) seed=$(SEED) methods=$(METHODS)' >$@
$(EV_E)/attribution.params: eval-force
	@mkdir -p $(@D)
	@echo 'queries=$(QUERIES)' | cmp -s - $@ 2>/dev/null || echo 'queries=$(QUERIES)' >$@
$(EV_E)/%.params: eval-force
	@mkdir -p $(@D)
	@echo '$(PARAMS_$*)' | cmp -s - $@ 2>/dev/null || echo '$(PARAMS_$*)' >$@
PARAMS_msmarco = queries=$(QUERIES) methods=$(METHODS)
PARAMS_k50 = passages=$(K50_PASSAGES) min_tokens=$(MIN_TOKENS) seed=$(SEED)
PARAMS_retrieval = k1=$(K1S) b=$(BS)
PARAMS_timing = lengths=$(LENGTHS) gen=$(GEN)
PARAMS_openbookqa = questions=$(QUESTIONS) kmax=$(OBQA_KMAX)
eval-force: ;

$(EV_E)/wikitext.tsv: $(EV_E)/halves.db $(EV_E)/halves.tok $(EV_E)/wikitext.params $(EV_B)/ss-eval
	$(EV_B)/ss-eval wikitext $(EVAL_FLAGS) -v --index $(EV_E)/halves.db --tokens $(EV_E)/halves.tok \
		--passages $(PASSAGES) --min-tokens $(MIN_TOKENS) --kmax $(KMAX) --seed $(SEED) \
		--methods $(METHODS) --summary $(EV_E)/wikitext-summary.tsv \
		--per-passage $(EV_E)/wikitext-passages.tsv -o $@

# App. B.2: k = 0..50 on fewer passages.
eval-k50: $(EV_E)/wikitext-k50.tsv
	@cat $(EV_E)/wikitext-k50-summary.tsv
$(EV_E)/wikitext-k50.tsv: $(EV_E)/halves.db $(EV_E)/halves.tok $(EV_E)/k50.params $(EV_B)/ss-eval
	$(EV_B)/ss-eval wikitext $(EVAL_FLAGS) -v --index $(EV_E)/halves.db --tokens $(EV_E)/halves.tok \
		--passages $(K50_PASSAGES) --min-tokens $(MIN_TOKENS) --kmax 50 --seed $(SEED) \
		--summary $(EV_E)/wikitext-k50-summary.tsv -o $@
	$(call gp,eval.gp,wikitext-k50.tsv,wikitext-k50,xstep=5)

# MS MARCO passage retrieval, BM25 against BM25's top RERANK_N reranked by MODEL from the
# passages' states (ss-retrieve query --rerank): the sample's passages pooled into one index,
# recall@k of each query's selected passage (ss-eval recall --retrieve; the EM column means
# nothing here). Writes msmarco-rerank.tsv (recall@k in the column "recall").
RERANK_N  ?= 10
RERANK_KS ?= 1,3,5
eval-rerank: $(EV_E)/msmarco-rerank.tsv
$(EV_E)/msmarco-rr/queries.jsonl: $(MSMARCO)
	@mkdir -p $(@D)
	python3 $(EVAL_MK_DIR)/msmarco_recall.py $< $(@D)
$(EV_E)/msmarco-rr/index.db: $(EV_E)/msmarco-rr/queries.jsonl $(EV_B)/ss-encode
	$(EV_B)/ss-tokenize -q -t $(TOKENIZER) --jsonl -o $(@D)/corpus.tok $(@D)/corpus.jsonl
	$(EV_B)/ss-encode -q $(EVAL_FLAGS) -o $(@D)/corpus.states $(@D)/corpus.tok
	rm -f $@ && $(EV_B)/ss-retrieve build -q --index $@ $(@D)/corpus.tok $(@D)/corpus.states
$(EV_E)/msmarco-rerank.tsv: $(EV_E)/msmarco-rr/index.db $(EV_B)/ss-eval
	$(EV_B)/ss-eval recall -q $(EVAL_FLAGS) --index $< --qa $(EV_E)/msmarco-rr/queries.jsonl \
		--tokenizer $(TOKENIZER) --ks $(RERANK_KS) --methods naive --retrieve --retrievers bm25,rerank \
		--rerank $(RERANK_N) -o $@.tmp && mv -f $@.tmp $@
	@awk -F '\t' 'NR == 1 || $$4 == "all"' $@ | cut -f 1,3,5,10

# Table 1 row 1: MS MARCO answer NLL per method (all of a query's passages).
eval-msmarco: $(EV_E)/msmarco.tsv
$(EV_E)/msmarco.tsv: $(MSMARCO) $(EV_E)/msmarco.params $(EV_B)/ss-eval
	@mkdir -p $(@D)
	$(EV_B)/ss-eval msmarco $(EVAL_FLAGS) -v --qa $(MSMARCO) --queries $(QUERIES) \
		--methods $(METHODS) --tokenizer $(TOKENIZER) \
		--per-query $(EV_E)/msmarco-queries.tsv -o $@
	$(call gp,eval-msmarco.gp,msmarco.tsv,msmarco)

# §B.5: recall@k, MRR@10, nDCG@10 of the BM25 index on the MS MARCO and
# HotpotQA samples for every k1 x b (bench/retrieve --qa, built by `make`).
eval-retrieval: $(EV_E)/retrieval.tsv
$(EV_E)/retrieval.tsv: $(EV_E)/retrieval.params
	@test -x $(SS_BENCH)/retrieve || { echo "eval.mk: $(SS_BENCH)/retrieve is missing: build it first (make)" >&2; exit 1; }
	SS_SHARED=$(SS_SHARED) $(SS_BENCH)/retrieve --qa --k1 $(K1S) --b $(BS) >$@.tmp
	mv $@.tmp $@
	$(call gp,eval-retrieval.gp,retrieval.tsv,retrieval)

# App. B.6, Table 3: OpenBookQA with k whole WikiText passages (the paper's
# database for it) composed; a second database: whole.tok → whole.states → whole.db.
eval-openbookqa: $(EV_E)/openbookqa.tsv
$(EV_E)/whole.tok: $(EV_E)/passages.txt $(EV_B)/ss-tokenize
	cd $(EV_E) && $(EV_B)/ss-tokenize -t $(TOKENIZER) -o whole.tok passages.txt
$(EV_E)/whole.states: $(EV_E)/whole.tok $(EV_B)/ss-encode
	$(EV_B)/ss-encode $(EVAL_FLAGS) -o $@ $<
$(EV_E)/whole.db: $(EV_E)/whole.tok $(EV_E)/whole.states $(EV_B)/ss-retrieve
	rm -f $@.tmp
	$(EV_B)/ss-retrieve build -q --index $@.tmp $(EV_E)/whole.tok $(EV_E)/whole.states
	mv $@.tmp $@
$(EV_E)/openbookqa.tsv: $(OBQA) $(EV_E)/whole.db $(EV_E)/openbookqa.params $(EV_B)/ss-eval
	$(EV_B)/ss-eval openbookqa $(EVAL_FLAGS) -v --qa $(OBQA) --index $(EV_E)/whole.db \
		--tokens $(EV_E)/whole.tok --kmax $(OBQA_KMAX) --queries $(QUESTIONS) \
		--tokenizer $(TOKENIZER) -o $@
	$(call gp,eval-openbookqa.gp,openbookqa.tsv,openbookqa)

# App. B.3, Fig. 7: processing L tokens vs generating GEN tokens.
eval-timing: $(EV_E)/timing.tsv
$(EV_E)/timing.tsv: $(EV_E)/timing.params $(EV_B)/ss-eval
	$(EV_B)/ss-eval timing $(EVAL_FLAGS) -q --lengths $(LENGTHS) --gen $(GEN) -o $@
	$(call gp,eval-timing.gp,timing.tsv,timing)

$(EV_E)/attribution.tsv: $(MSMARCO) $(EV_E)/attribution.params $(EV_B)/ss-eval
	@mkdir -p $(@D)
	$(EV_B)/ss-eval attribution $(EVAL_FLAGS) -v --qa $(MSMARCO) --queries $(QUERIES) \
		--tokenizer $(TOKENIZER) \
		--per-query $(EV_E)/attribution-queries.tsv -o $@

# gp SCRIPT,TSV,PREFIX[,VARS]: runs pipelines/SCRIPT on $(EV_E)/TSV into
# $(EV_E)/PREFIX*.png; without gnuplot it says so and skips (not an error).
gp = @if command -v gnuplot >/dev/null 2>&1; then \
	gnuplot -e "tsv='$(EV_E)/$(2)'; out='$(EV_E)/$(3)'; $(4)" $(EVAL_MK_DIR)/$(1) && \
	echo "plot: $(EV_E)/$(3)*.png"; \
	else echo "plot: gnuplot not found: skipping $(3) (install gnuplot-nox)"; fi

# The figures; without gnuplot the step says so and is skipped (not an error).
plots: $(EV_E)/wikitext.tsv
	@if command -v gnuplot >/dev/null 2>&1; then \
		gnuplot -e "tsv='$(EV_E)/wikitext.tsv'; out='$(EV_E)/wikitext'" $(EVAL_MK_DIR)/eval.gp && \
		echo "plots: $(EV_E)/wikitext-fig3.png $(EV_E)/wikitext-nll.png $(EV_E)/wikitext-time.png"; \
	else \
		echo "plots: gnuplot not found: skipping the PNGs (install gnuplot-nox)"; \
	fi

eval-clean:
	rm -rf $(EV_E)
