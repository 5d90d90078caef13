/* SPDX-License-Identifier: MIT */
/*
 * Shared bits of the libFuzzer targets: the targets themselves (each
 * tests/fuzz/fuzz_<name>.c defines fuzz_<name>(), which entry.c hands
 * libFuzzer's inputs to, and the CMocka runners tests/test_fuzz_*.c
 * replay), a check whose failure is reported by fuzz_check_failed()
 * (entry.c: a message and abort(), so that libFuzzer saves the input; the
 * runners: a CMocka failure), and a small PRNG that an input seeds, for
 * choices (chunk sizes, failures) that must replay exactly from the same
 * input.
 */
#ifndef AORTA_TESTS_FUZZ_H
#define AORTA_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The targets: each takes one input and returns 0. */
int fuzz_framer(const uint8_t *data, size_t size);
int fuzz_proto(const uint8_t *data, size_t size);
int fuzz_load(const uint8_t *data, size_t size);
int fuzz_echo(const uint8_t *data, size_t size);
int fuzz_arena(const uint8_t *data, size_t size);
int fuzz_ws_frame(const uint8_t *data, size_t size);
int fuzz_ws_upgrade(const uint8_t *data, size_t size);
/* The tools' WebSocket client decoder (tools/common/ws_client.c). */
int fuzz_ws_client(const uint8_t *data, size_t size);
/* ao-echo's command line (fuzz_echo's input): the exit status its parser
 * asked for, or -1 when it accepted the line. */
int fuzz_echo_status(const uint8_t *data, size_t size);

/* A check failed: cond (its text) at file:line. */
void fuzz_check_failed(const char *file, int line, const char *cond);

#define FUZZ_CHECK(cond)                                              \
	do {                                                          \
		if (!(cond))                                          \
			fuzz_check_failed(__FILE__, __LINE__, #cond); \
	} while (0)

/* xorshift64*: never seeded with 0. */
struct fuzz_rng {
	uint64_t s;
};

static inline void fuzz_rng_seed(struct fuzz_rng *r, uint64_t seed)
{
	r->s = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
	if (!r->s)
		r->s = 1;
}

static inline uint32_t fuzz_rng_next(struct fuzz_rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return (uint32_t)((r->s * 0x2545f4914f6cdd1dull) >> 32);
}

/* A value in [0, n) (n > 0). */
static inline uint32_t fuzz_rng_below(struct fuzz_rng *r, uint32_t n)
{
	return fuzz_rng_next(r) % n;
}

/* Take the first n bytes of the input as a little-endian number. */
static inline uint64_t fuzz_take(const uint8_t **p, size_t *len, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n && *len; i++, (*p)++, (*len)--)
		v |= (uint64_t) * *p << (8 * i);
	return v;
}

/*
 * A command line from the input: argv[0] = arg0, then the input split at
 * its NUL bytes, at most max arguments, NULL-terminated (argv has room for
 * max + 2).  Returns argc; *buf, the NUL-terminated copy the arguments
 * point into, is the caller's to free.
 */
static inline int fuzz_argv(const uint8_t *data, size_t size, char *arg0,
			    char **argv, int max, char **buf)
{
	int argc = 0;

	*buf = malloc(size + 1);
	FUZZ_CHECK(*buf);
	memcpy(*buf, data, size);
	(*buf)[size] = '\0';
	argv[argc++] = arg0;
	for (size_t i = 0; i < size && argc <= max; i++) {
		argv[argc++] = *buf + i;
		while (i < size && (*buf)[i])
			i++;
	}
	argv[argc] = NULL;
	return argc;
}

#endif /* AORTA_TESTS_FUZZ_H */
