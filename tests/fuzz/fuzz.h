/*
 * fuzz.h — what the libFuzzer harnesses in tests/fuzz/ share.
 * Each harness defines LLVMFuzzerTestOneInput(data, size) and is built two
 * ways: with clang -fsanitize=fuzzer,address,undefined (make fuzz), and with
 * the normal compiler against replay.c (make test replays every seed and
 * past crash). Loaders that take a path get the input through a file in a
 * private temporary directory, removed at exit.
 */
#ifndef SS_FUZZ_H
#define SS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The harness's temporary directory (created on first use). */
const char *fuzz_dir(void);
/* fuzz_dir()/name, in a static buffer (one of 4, used in turn). */
const char *fuzz_path(const char *name);
/* Writes data[0..size) to fuzz_path(name) and returns that path. */
const char *fuzz_file(const char *name, const void *data, size_t size);
/* Path of a file in the source tree (tests/fuzz/...), from $SS_TOP or ".". */
const char *fuzz_src(const char *rel);

#endif
