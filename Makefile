# ss — one non-recursive Makefile. Targets: all test bench man install clean demo deps.
# Quiet unless V=1. SANITIZE=1 builds with ASan+UBSan into build/san/.
include config.mk

PKGS := libzstd msgpack libarchive openblas sqlite3 libpcre2-8 libutf8proc libcjson
ifeq ($(SANITIZE),1)
B := build/san
# float-cast-overflow: gcc's "undefined" leaves it out (clang's has it).
SANFLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=all
else
B := build
SANFLAGS :=
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WARN   := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wvla
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) -pthread -Ilib -Itools -Itests $(PKG_CFLAGS) -MMD -MP
LDLIBS := $(PKG_LIBS) -lm -ldl -pthread
ALL_LDFLAGS := $(LDFLAGS) $(SANFLAGS)

ifeq ($(V),1)
Q :=
else
Q := @
endif
say = $(if $(Q),@printf '  %-7s %s\n' $(1) $(2))

LIB_SRC   := $(wildcard lib/*.c)
LIB_OBJ   := $(LIB_SRC:%.c=$(B)/%.o)
LIB       := $(B)/libss.a
TOOLS     := $(patsubst tools/%.c,$(B)/bin/%,$(wildcard tools/ss-*.c))
# tools/*.c that are not ss-*.c are shared by every tool (cli helpers).
TOOLCOMMON_OBJ := $(patsubst %.c,$(B)/%.o,$(filter-out tools/ss-%.c,$(wildcard tools/*.c)))
TEST_SRC  := $(wildcard tests/test_*.c)
TESTS     := $(TEST_SRC:tests/%.c=$(B)/tests/%)
TESTUTIL_SRC := $(wildcard tests/util/*.c)
TESTUTIL_OBJ := $(TESTUTIL_SRC:%.c=$(B)/%.o)
BENCH_SRC := $(wildcard bench/*.c)
BENCHES   := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
MANS      := $(wildcard man/*.1 man/*.5)

# CUDA plugin: kernels/*.cu → libss_cuda.so, dlopen()ed by the tools only when a GPU is present
# (lib/device.c). Each .cu compiles on its own (parallel, incremental); the plugin links cuBLAS
# and the CUDA runtime, with an rpath to the toolkit's libraries. libss and the tools never link CUDA.
CU_SRC := $(wildcard kernels/*.cu)
CU_OBJ := $(CU_SRC:%.cu=$(B)/%.o)
ifeq ($(CUDA),off)
HAVE_NVCC :=
else
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
ifeq ($(CUDA),on)
ifeq ($(HAVE_NVCC),)
$(error CUDA=on but nvcc was not found)
endif
endif
CUDA_LIBDIR := $(if $(HAVE_NVCC),$(abspath $(dir $(HAVE_NVCC))../lib64))
NVCCFLAGS := -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter \
	-Werror=all-warnings -Ilib -Ikernels $(PKG_CFLAGS)
CUDA_PLUGIN := $(if $(and $(HAVE_NVCC),$(CU_SRC)),$(B)/lib/libss_cuda.so)

.PHONY: all test check bench man install clean demo eval deps cuda-note
all: $(LIB) $(TOOLS) $(TESTS) $(BENCHES) $(CUDA_PLUGIN) cuda-note

cuda-note:
ifeq ($(CUDA),off)
	@true
else
	@$(if $(HAVE_NVCC),true,echo "  note    nvcc not found: skipping CUDA targets (CPU build only)")
endif

$(B)/%.o: %.c
	$(call say,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJ)
	$(call say,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(TOOLS): $(B)/bin/%: $(B)/tools/%.o $(TOOLCOMMON_OBJ) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(TOOLCOMMON_OBJ) $(LIB) $(LDLIBS)

$(TESTS): $(B)/tests/%: $(B)/tests/%.o $(TESTUTIL_OBJ) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(TESTUTIL_OBJ) $(LIB) $(LDLIBS) -lcmocka

$(BENCHES): $(B)/bench/%: $(B)/bench/%.o $(TESTUTIL_OBJ) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(TESTUTIL_OBJ) $(LIB) $(LDLIBS)

$(B)/kernels/%.o: kernels/%.cu $(wildcard kernels/*.cuh) lib/ss.h lib/ss_ops.h lib/ss_device.h
	$(call say,NVCC,$<)
	@mkdir -p $(@D)
	$(Q)$(HAVE_NVCC) $(NVCCFLAGS) -c -o $@ $<

$(B)/lib/libss_cuda.so: $(CU_OBJ)
	$(call say,NVLD,$@)
	@mkdir -p $(@D)
	$(Q)$(HAVE_NVCC) -shared $(CUDA_ARCH) -o $@ $^ -lcublas -Xlinker -rpath,$(CUDA_LIBDIR)

# lib/device.c searches the install LIBDIR for the plugin.
$(B)/lib/device.o: ALL_CFLAGS += -DSS_LIBDIR='"$(LIBDIR)"'

# The test runner: unit tests (cmocka), CLI cases, man-page examples. Prints "N passed, M failed".
test: all
	$(Q)SS_SHARED=$(SS_SHARED) SS_BUILD=$(B) tests/run

# The README's test command: the suite, then again under ASan+UBSan.
check:
	$(Q)$(MAKE) --no-print-directory test
	$(Q)$(MAKE) --no-print-directory test SANITIZE=1

bench: all
	$(Q)SS_SHARED=$(SS_SHARED) SS_BUILD=$(B) bench/run

man:
	@mkdir -p $(B)
	$(Q)for m in $(MANS); do man -l -Tutf8 $$m >/dev/null 2>$(B)/man.err || { cat $(B)/man.err; exit 1; }; \
		if [ -s $(B)/man.err ]; then echo "$$m:"; cat $(B)/man.err; exit 1; fi; done; echo "  man     $(words $(MANS)) pages ok"

deps:
	$(Q).ci/install-deps

# The main job on its bundled default (README quick start). Installs what is missing first.
# MODEL=dir and DOCS="files..." override the model and the corpus (pipelines/demo.sh).
demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)SS_SHARED=$(SS_SHARED) SS_BUILD=$(B) $(if $(MODEL),MODEL='$(MODEL)') $(if $(DOCS),DOCS='$(DOCS)') pipelines/demo.sh

# The paper's evaluation (PICASO §6.1, App. C) on the bundled data: pipelines/eval.mk.
eval: all
	$(Q)$(MAKE) --no-print-directory -f pipelines/eval.mk eval SS_SHARED=$(SS_SHARED) SS_BIN=$(abspath $(B))/bin

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)
	$(if $(CUDA_PLUGIN),install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(LIBDIR))
	install -m 644 $(wildcard man/*.1) $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(wildcard man/*.5) $(DESTDIR)$(MANDIR)/man5

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TOOLS:$(B)/bin/%=$(B)/tools/%.d) $(TESTS:=.d) $(BENCHES:=.d) $(TESTUTIL_OBJ:.o=.d) $(TOOLCOMMON_OBJ:.o=.d)
