# rag.mk — the data of bench/rag (issue 35 §3): retrieval-augmented answers
# over the Wikipedia text in $(SS_SHARED)/train, cut into 365 k chunks of
# 256 tokens (scale.mk's token streams), with a mamba2-130m-shape model.
#
# A state of that shape is 19.4 MB, so the 365 k chunks' states (7 TB) are
# not stored: the index holds every chunk's text and tokens, stateless
# (ss-retrieve add --stateless), and the states of the chunks the
# questions retrieve, encoded once as a corpus is (ss-encode --ids), which
# makes those documents stateful. Retrieval runs over all 365 k chunks.
#
# From the repository root, after `make`:
#   make -f pipelines/rag.mk                 # about 10 minutes on 2 cores
#   build/bench/rag                          # the benchmark (see its header)
#   make -f pipelines/rag.mk MODEL=DIR       # another model (its GGUF for the peer:
#                                            # llama.cpp's convert_hf_to_gguf.py DIR)
# Outputs in $(RAG_DIR): model (a link to MODEL), text.db (the stateless
# index), questions.jsonl (QUESTIONS of them, 30 words of evenly spaced
# chunks), hits.txt (the ids of their top K), hits.states, index.db.

RAG_MK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
include $(RAG_MK_DIR)/scale.mk
.DEFAULT_GOAL := rag

RAG_DIR   ?= $(SS_BUILD)/rag
QUESTIONS ?= 32
K         ?= 10
MODEL     ?= $(RAG_DIR)/mamba2-130m
BIN       := $(SS_BUILD)/bin

.PHONY: rag
rag: $(RAG_DIR)/index.db $(RAG_DIR)/model

$(RAG_DIR)/mamba2-130m:
	@mkdir -p $(@D)
	$(SS_BUILD)/gen/mkmodel $@ --preset mamba2-130m

$(RAG_DIR)/model: | $(MODEL)
	@mkdir -p $(@D)
	ln -sfn $(abspath $(MODEL)) $@

$(RAG_DIR)/text.db: $(TOKENS) | $(MODEL)
	@mkdir -p $(@D)
	rm -f $@.tmp
	$(BIN)/ss-retrieve add --index $@.tmp --stateless --model $(MODEL) $(TOKENS)
	mv $@.tmp $@

$(RAG_DIR)/questions.jsonl: $(RAG_DIR)/text.db
	$(SS_BUILD)/bench/rag --make-questions $(QUESTIONS) --index $< > $@

$(RAG_DIR)/hits.txt: $(RAG_DIR)/questions.jsonl
	$(BIN)/ss-retrieve query --index $(RAG_DIR)/text.db -k $(K) --literal --ids < $< | cut -f3 | sort -u > $@

$(RAG_DIR)/hits.states: $(RAG_DIR)/hits.txt
	$(BIN)/ss-encode --model $(MODEL) --ids $< -o $@ $(TOKENS)

$(RAG_DIR)/index.db: $(RAG_DIR)/text.db $(RAG_DIR)/hits.states
	cp $< $@.tmp
	$(BIN)/ss-retrieve add --index $@.tmp $(RAG_DIR)/hits.states
	mv $@.tmp $@
