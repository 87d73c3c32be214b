# eval.mk — the PICASO paper's evaluation on the bundled data, joined from
# ss-* tools: WikiText-2 continuation NLL and timing vs k retrieved chunks
# (§6.1, Fig. 3) and MS MARCO data attribution (Appendix C, Table 4).
#
# From the repository root, after `make`:
#   make -f pipelines/eval.mk eval               # both evaluations + plots
#   make -f pipelines/eval.mk eval-wikitext PASSAGES=50
#   make -f pipelines/eval.mk eval-attribution QUERIES=20
#   make -f pipelines/eval.mk plots              # PNGs (needs gnuplot)
# Outputs in $(EVAL_DIR) (build/eval/<model name>/): wikitext.tsv,
# wikitext-passages.tsv, wikitext-{fig3,nll,time}.png, attribution.tsv,
# attribution-queries.tsv. The database (halves.tok → halves.states →
# halves.db) is built once per model; every file is written under a temporary
# name and renamed, so an interrupted run redoes only what is missing, and a
# change of PASSAGES/KMAX/... reruns only the evaluation.

EVAL_MK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
SS_SHARED ?= $(abspath $(EVAL_MK_DIR)/../../shared)
# The model, the corpus and the tokenizer bundled in data/; the MS MARCO sample is not bundled
# (Microsoft's non-commercial terms): eval-attribution reads it from ../shared.
MODEL     ?= $(abspath $(EVAL_MK_DIR)/../data/model)
SS_BIN    ?= $(abspath $(EVAL_MK_DIR)/../build/bin)
EVAL_DIR  ?= $(abspath $(EVAL_MK_DIR)/../build/eval/$(notdir $(MODEL)))
WIKITEXT  ?= $(abspath $(EVAL_MK_DIR)/../data/wikitext-2-raw.test.hf-crlf.raw)
MSMARCO   ?= $(SS_SHARED)/data/qa/msmarco-v1.1-train-sample200.json
TOKENIZER ?= $(abspath $(EVAL_MK_DIR)/../data/tokenizer.json)
# Sample size: passages evaluated (0 = all ~1600). The default keeps the whole
# WikiText run, database included, well within 20 minutes on 2 cores with t1.
PASSAGES  ?= 300
MIN_TOKENS ?= 64
KMAX      ?= 10
SEED      ?= 1
QUERIES   ?= 0
THREADS   ?=
EVAL_FLAGS = --model $(MODEL) $(if $(THREADS),--threads $(THREADS))

# Short names, prefixed so that the fragment can be included by another Makefile.
EV_E := $(EVAL_DIR)
EV_B := $(SS_BIN)

.PHONY: eval eval-wikitext eval-attribution plots eval-db eval-clean eval-force
.DELETE_ON_ERROR:

eval: eval-wikitext eval-attribution plots
eval-wikitext: $(EV_E)/wikitext.tsv
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
	$(EV_B)/ss-encode $(EVAL_FLAGS) -o $@ $<

$(EV_E)/halves.db: $(EV_E)/halves.tok $(EV_E)/halves.states $(EV_B)/ss-retrieve
	rm -f $@.tmp
	$(EV_B)/ss-retrieve build -q --index $@.tmp $(EV_E)/halves.tok $(EV_E)/halves.states
	mv $@.tmp $@

# Reruns the evaluation when a knob changes (the file changes only then).
$(EV_E)/wikitext.params: eval-force
	@mkdir -p $(@D)
	@echo 'passages=$(PASSAGES) min_tokens=$(MIN_TOKENS) kmax=$(KMAX) seed=$(SEED)' | \
		cmp -s - $@ 2>/dev/null || \
		echo 'passages=$(PASSAGES) min_tokens=$(MIN_TOKENS) kmax=$(KMAX) seed=$(SEED)' >$@
$(EV_E)/attribution.params: eval-force
	@mkdir -p $(@D)
	@echo 'queries=$(QUERIES)' | cmp -s - $@ 2>/dev/null || echo 'queries=$(QUERIES)' >$@
eval-force: ;

$(EV_E)/wikitext.tsv: $(EV_E)/halves.db $(EV_E)/halves.tok $(EV_E)/wikitext.params $(EV_B)/ss-eval
	$(EV_B)/ss-eval wikitext $(EVAL_FLAGS) -v --index $(EV_E)/halves.db --tokens $(EV_E)/halves.tok \
		--passages $(PASSAGES) --min-tokens $(MIN_TOKENS) --kmax $(KMAX) --seed $(SEED) \
		--per-passage $(EV_E)/wikitext-passages.tsv -o $@

$(EV_E)/attribution.tsv: $(MSMARCO) $(EV_E)/attribution.params $(EV_B)/ss-eval
	@mkdir -p $(@D)
	$(EV_B)/ss-eval attribution $(EVAL_FLAGS) -v --qa $(MSMARCO) --queries $(QUERIES) \
		--tokenizer $(TOKENIZER) \
		--per-query $(EV_E)/attribution-queries.tsv -o $@

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
