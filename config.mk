# config.mk — what users change. Override on the command line: make PREFIX=/opt/ss CUDA=off
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
MANDIR   ?= $(PREFIX)/share/man
# The tokenizer, demo corpus and default model (data/), installed here and compiled into the tools.
DATADIR  ?= $(PREFIX)/share/ss
# bash completion (tools/ss.bash), one file per tool where bash-completion looks them up by name
COMPDIR  ?= $(PREFIX)/share/bash-completion/completions
CC       ?= cc
CFLAGS   ?= -O2 -g -march=x86-64-v2
# BLAS for the CPU GEMMs: openblas (default) or blis (Debian's libblis-dev; builds into build/blis/).
BLAS     ?= openblas
# auto: build the CUDA plugin when nvcc is found; on: require it; off: never.
CUDA     ?= auto
NVCC     ?= nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# The large shared data (t2, the t1 pickle layout, corpora) beside the checkout, when there is one:
# only the tests that need it read it (they skip without it). The demo and the core tests use data/
# and tests/fixtures/.
SS_SHARED ?= $(wildcard $(abspath ../shared))
