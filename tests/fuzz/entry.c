// SPDX-License-Identifier: MIT
/*
 * libFuzzer's entry into one target: the Makefile compiles this file once
 * per target, FUZZ_TARGET naming it (-DFUZZ_TARGET=fuzz_load), and links
 * it with tests/fuzz/fuzz_<name>.o.  A failed check aborts, so that
 * libFuzzer keeps the input.
 */
#include <stdio.h>
#include <stdlib.h>
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return FUZZ_TARGET(data, size);
}

void fuzz_check_failed(const char *file, int line, const char *cond)
{
	fprintf(stderr, "%s:%d: check failed: %s\n", file, line, cond);
	abort();
}
