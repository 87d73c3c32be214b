# config.mk — what users change. Override on the command line: make PREFIX=/opt/ss CUDA=off
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
MANDIR   ?= $(PREFIX)/share/man
CC       ?= cc
CFLAGS   ?= -O2 -g -march=x86-64-v2
# BLAS for the CPU GEMMs: openblas (default) or blis (Debian's libblis-dev; builds into build/blis/).
BLAS     ?= openblas
# auto: build the CUDA plugin when nvcc is found; on: require it; off: never.
CUDA     ?= auto
NVCC     ?= nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# Where the shared data (tokenizer, corpora, golden fixtures) lives; tests and the demo read it.
SS_SHARED ?= $(abspath ../shared)
