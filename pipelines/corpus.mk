# pipelines/corpus.mk — build a state database from a corpus in SHARDS shards, each with its
# own index; the shards' indexes are queried as one (ss-retrieve --index @DB/index.list).
#
#   make -f pipelines/corpus.mk DB=dir DOCS="files..." MODEL=dir SHARDS=N [CHUNK=256] -j N
#
# DB/corpus.tokens   ss-tokenize --chunk CHUNK of DOCS (text, JSONL, tar/zip; tokenized once)
# DB/shard-I.states  ss-encode --shard I/SHARDS of the tokens, one file target per shard
# DB/shard-I.db      the index of shard I: ss-retrieve build over the tokens and shard-I.states
#                    (the documents of the other shards, text without a state, are left out)
# DB/index.list      the shards' indexes, one a line: what ss-retrieve and ss-eval take as
#                    --index @DB/index.list, ranking their union exactly as one index would;
#                    written after checking that they form one (no id in two shards)
# DB/index.db        (target merge, not built by default) ss-retrieve merge of the shards'
#                    indexes into one file, for a user who wants one
# DB/build.conf      DOCS, MODEL, SHARDS, CHUNK (and STATE_DTYPE when set) of the build:
#                    changing one rebuilds all
#
# Targets: all (default, = index), tokens, shards, shard-I (one shard's states and index; a
# Slurm array task), index (the list), merge, todo-shards (prints the ids of the shards still
# to do; for slurm/submit.sh), clean. No job builds an index over the whole corpus: each shard
# task indexes its own documents (reading the whole token stream, of which it keeps its own),
# and the union's statistics are summed at query time. ss-encode --shard is round-robin, so
# documents of equal score at a query's k-th place may be chosen otherwise than by one index
# over the corpus (ids, ranks and scores are otherwise the same). THREADS=N is passed to ss-encode --threads (default: online cores; with -j N on a
# small machine, THREADS=1 avoids oversubscription). DETERMINISTIC=1 (default) passes
# ss-encode --deterministic: a document's state is the same bytes whatever shard, batch or
# threads encode it (on the CPU; slower on short chunks); DETERMINISTIC=0 lets ss-encode
# pick a GPU and batch freely. STATE_DTYPE=q8 (or f16, bf16) stores the states so (ss-encode
# --state-dtype; q8 is a quarter of f32: 4.4 MB a mamba2-130m document on disk, not 18.1).
# Every file is written whole under a temporary name of its own (the tools' -o; the recipes
# below for the rest: NAME.tmp.PID) and renamed, so an interrupted run never leaves a file that
# make takes as done, and runs of the same build at once (a Slurm job submitted twice) each
# rename a whole file into place: re-running redoes only the missing or out-of-date targets.
# No target is ever deleted by make (no .DELETE_ON_ERROR; all .PRECIOUS): a failing or killed
# run must not delete a good file that another run renamed into place meanwhile.
# Tools come from PATH, else from this checkout's build/bin.

DB     ?= db
DOCS   ?=
MODEL  ?= $(SS_MODEL)
SHARDS ?= 4
CHUNK  ?= 256
THREADS ?=
DETERMINISTIC ?= 1
STATE_DTYPE ?=

ifeq ($(strip $(DOCS)),)
$(error DOCS is empty: give the corpus files, e.g. DOCS="a.txt b.jsonl c.tar")
endif
ifeq ($(strip $(MODEL)),)
$(error MODEL is empty: give the model directory (or set SS_MODEL))
endif
# ss-tokenize reads MODEL's tokenizer (its tokenizer.json, else the bundled GPT-NeoX one).
export SS_MODEL := $(MODEL)

export PATH := $(PATH):$(abspath $(dir $(lastword $(MAKEFILE_LIST)))../build/bin)

ifeq ($(shell printf '%s\n' '$(SHARDS)' | grep -x '[1-9][0-9]*'),)
$(error SHARDS=$(SHARDS) is not a positive integer)
endif
SHARD_IDS   := $(shell i=0; while [ $$i -lt $(SHARDS) ]; do echo $$i; i=$$((i + 1)); done)
SHARD_FILES := $(SHARD_IDS:%=$(DB)/shard-%.states)
SHARD_DBS   := $(SHARD_IDS:%=$(DB)/shard-%.db)
CONF        := $(DB)/build.conf
conf_line   := docs=$(DOCS) model=$(MODEL) shards=$(SHARDS) chunk=$(CHUNK)$(if $(STATE_DTYPE), state_dtype=$(STATE_DTYPE))
encode_opts := $(if $(THREADS),--threads $(THREADS)) $(if $(filter 1,$(DETERMINISTIC)),--deterministic) \
	$(if $(STATE_DTYPE),--state-dtype $(STATE_DTYPE))

.PHONY: all tokens shards index merge todo-shards clean FORCE $(SHARD_IDS:%=shard-%)
.PRECIOUS: $(CONF) $(DB)/corpus.tokens $(DB)/shard-%.states $(DB)/shard-%.db $(DB)/index.list $(DB)/index.db
all: index
tokens: $(DB)/corpus.tokens
# The states are named here, not only through the pattern rules: a file make reaches only through
# them is intermediate, and a deleted intermediate file is not rebuilt.
shards: $(SHARD_FILES) $(SHARD_DBS)
index: $(DB)/index.list
merge: $(DB)/index.db
$(SHARD_IDS:%=shard-%): shard-%: $(DB)/shard-%.db

# Rewritten (atomically) only when the settings change, so its mtime says when they last did.
$(CONF): FORCE
	@mkdir -p $(@D)
	@printf '%s\n' '$(conf_line)' >$@.tmp.$$$$ && \
	if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv -f $@.tmp.$$$$ $@; fi

$(DB)/corpus.tokens: $(DOCS) $(CONF)
	ss-tokenize -q --chunk $(CHUNK) -o $@ $(DOCS)

$(DB)/shard-%.states: $(DB)/corpus.tokens $(CONF)
	ss-encode -q --model $(MODEL) $(encode_opts) --shard $*/$(SHARDS) -o $@ $(DB)/corpus.tokens

# Built under a temporary name of this run's own (an interrupted build leaves no shard-I.db,
# and a concurrent one builds its own); state paths are stored relative to the index's
# directory, so the name does not matter to them. -q: the other shards' documents (text
# without a state here) are left out without a warning each. One line: $$$$ is one shell's PID.
$(DB)/shard-%.db: $(DB)/corpus.tokens $(DB)/shard-%.states
	t=$@.tmp.$$$$; rm -f $$t $$t-journal; \
	ss-retrieve build -q --index $$t $(DB)/corpus.tokens $(DB)/shard-$*.states && mv -f $$t $@ || \
	{ rm -f $$t $$t-journal; exit 1; }

# The list, relative to DB (ss-retrieve reads @FILE's paths relative to FILE's directory);
# written once ss-retrieve has opened the shards as one (refusing an id in two of them).
$(DB)/index.list: $(SHARD_DBS)
	t=$@.tmp.$$$$; printf '%s\n' $(notdir $(SHARD_DBS)) >$$t && \
	ss-retrieve stats --index @$$t >/dev/null && mv -f $$t $@ || { rm -f $$t; exit 1; }

# One file of every shard's documents (ss-retrieve merge: written whole or not at all).
$(DB)/index.db: $(SHARD_DBS)
	ss-retrieve merge -q -o $@ $(SHARD_DBS)

# A shard is still to do when its states or index are missing, or older than the tokens or
# the settings (its index: than its states), and every shard is when the tokens are missing or older than a document, or the settings
# changed (as the rules above would decide, before the tokens job has run).
todo-shards:
	@all=; [ "$$(cat $(CONF) 2>/dev/null)" = '$(conf_line)' ] || all=1; \
	for f in $(DOCS); do [ -f $(DB)/corpus.tokens ] && [ ! "$$f" -nt $(DB)/corpus.tokens ] || all=1; done; \
	for i in $(SHARD_IDS); do s=$(DB)/shard-$$i.states; \
		x=$(DB)/shard-$$i.db; \
		if [ -n "$$all" ] || [ ! -f $$s ] || [ $(DB)/corpus.tokens -nt $$s ] || [ $(CONF) -nt $$s ] || \
			[ ! -f $$x ] || [ $$s -nt $$x ]; \
		then echo $$i; fi; \
	done

clean:
	rm -f $(DB)/corpus.tokens $(DB)/shard-*.states $(DB)/shard-*.db $(DB)/index.list $(DB)/index.db \
		$(CONF) $(DB)/*.tmp.* $(DB)/*.merge-*

FORCE:
