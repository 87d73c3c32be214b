# scale.mk — retrieval at scale (issue 20): the Wikipedia text in
# $(SS_SHARED)/train (45,920 articles, 399 MB) cut into 256-token chunks,
# indexed with tiny random states (retrieval never reads them), then 200
# 30-word passages as queries, k = 10: p50/p95/p99 in batch, through the
# ss-retrieve tool in batch and one process per query, index size and build
# time; FTS5 bm25() as the exhaustive peer (an FTS5 table with the index's
# own tokenizer, compounds included), whose top 10 ours must match
# (bench/retrieve --scale). qa: recall@10 and MRR@10 of the index against
# FTS5 as the index before schema 2 queried it (white-space words quoted).
#
# From the repository root, after `make`:
#   make -f pipelines/scale.mk scale             # 360 k chunks, with the FTS5 peer
#   make -f pipelines/scale.mk scale-1m          # the chunks 3 times (1.08 M), new ids
#   make -f pipelines/scale.mk scale-3.6m        # 10 times (3.6 M); about 10 GB of disk
#   make -f pipelines/scale.mk qa                # recall@10, MRR@10 on MS MARCO, HotpotQA
#   make -f pipelines/scale.mk sizing            # docs/SCALING.md: 10 k, 100 k, 365 k, 3.65 M
#                                                # chunks, one index and 4 shards (about 20 GB)
# Outputs in $(SCALE_DIR): the token streams (kept: tokenizing takes minutes),
# and per run a directory xN/ with states, index.db, queries.jsonl.

SCALE_MK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
SS_SHARED ?= $(abspath $(SCALE_MK_DIR)/../../shared)
SS_BUILD  ?= $(abspath $(SCALE_MK_DIR)/../build)
SCALE_DIR ?= $(SS_BUILD)/scale
QUERIES   ?= 200
# FTS5 takes seconds a query at a million chunks: fewer peer queries there.
PEER_QUERIES ?= 200

TRAIN  := $(wildcard $(SS_SHARED)/train/*.txt.zst)
TOKENS := $(patsubst $(SS_SHARED)/train/%.txt.zst,$(SCALE_DIR)/%.tokens,$(TRAIN))
BENCH  := $(SS_BUILD)/bench/retrieve --scale --queries $(QUERIES) --cli $(SS_BUILD)/bin/ss-retrieve

.PHONY: scale scale-1m scale-3.6m qa tokens sizing
.DELETE_ON_ERROR:

tokens: $(TOKENS)

scale: $(TOKENS)
	$(BENCH) --peer --peer-queries $(PEER_QUERIES) --keep $(SCALE_DIR)/x1 $(TOKENS)

scale-1m: $(TOKENS)
	$(BENCH) --copies 3 --peer --peer-queries $(if $(filter 200,$(PEER_QUERIES)),20,$(PEER_QUERIES)) \
		--keep $(SCALE_DIR)/x3 $(TOKENS)

scale-3.6m: $(TOKENS)
	$(BENCH) --copies 10 --keep $(SCALE_DIR)/x10 $(TOKENS)

# One size: build one index and 4 shards of the same chunks (bench/retrieve
# --shards), then query both alternately (bench/shards: wall and CPU time,
# top 10 checked equal). $(1): directory name, $(2): bench/retrieve options.
sizing_run = $(SS_BUILD)/bench/retrieve --scale --no-modes --shards 4 $(2) --keep $(SCALE_DIR)/$(1) $(TOKENS) && \
	$(SS_BUILD)/bench/shards $(SCALE_DIR)/$(1)/queries.txt $(SCALE_DIR)/$(1)/index.db \
		$(foreach s,0 1 2 3,$(SCALE_DIR)/$(1)/shard-$(s).db)

sizing: $(TOKENS)
	@echo "load average: $$(cut -d ' ' -f 1-3 /proc/loadavg)"
	$(call sizing_run,n10k,--chunks 10000)
	$(call sizing_run,n100k,--chunks 100000)
	$(call sizing_run,n360k,)
	$(call sizing_run,n3.6m,--copies 10)

qa:
	SS_SHARED=$(SS_SHARED) $(SS_BUILD)/bench/retrieve --qa

# Articles are separated by blank lines: one JSON line per article, id
# PART:N, then chunks of 256 tokens (ids PART:N#0, #1, ...).
$(SCALE_DIR)/%.tokens: $(SS_SHARED)/train/%.txt.zst
	@mkdir -p $(@D)
	zstd -dc $< | python3 $(SCALE_MK_DIR)/train_examples.py articles $* > $@.jsonl
	$(SS_BUILD)/bin/ss-tokenize -t $(SCALE_MK_DIR)/../data/tokenizer.json --jsonl --chunk 256 -o $@ $@.jsonl
	rm -f $@.jsonl
