/* SPDX-License-Identifier: MIT */
/*
 * Compiler helpers shared by every layer: access-once, branch hints,
 * cache-line alignment, container_of, symbol visibility.
 */
#ifndef AORTA_COMPILER_H
#define AORTA_COMPILER_H

#include <stddef.h>
#include <aorta/config.h>

/* Mark a declaration as part of the exported API (default is hidden). */
#define AO_API __attribute__((visibility("default")))

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define __ao_always_inline inline __attribute__((always_inline))
#define __ao_noinline __attribute__((noinline))
#define __ao_cold __attribute__((cold))
#define __ao_unused __attribute__((unused))
#define __ao_must_check __attribute__((warn_unused_result))
#define __ao_noreturn __attribute__((noreturn))

/*
 * One access of x that the compiler may neither tear, fuse nor repeat.  They
 * are relaxed atomics rather than volatile accesses so that ThreadSanitizer
 * sees them as the intentional races they are; on every supported target a
 * relaxed load or store of a machine word is a plain mov/ldr.
 */
#define READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* A compiler-only barrier: no instruction, no reordering across it. */
#define barrier() __asm__ __volatile__("" ::: "memory")

#ifndef AO_CACHELINE_SIZE
#define AO_CACHELINE_SIZE 64
#endif
#define __ao_cacheline_aligned __attribute__((aligned(AO_CACHELINE_SIZE)))

#ifndef container_of
/* The struct that embeds *ptr as its member. */
#define container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#endif

#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif

#define AO_BUILD_BUG_ON(cond) _Static_assert(!(cond), #cond)

/* sparse's lock-context annotations; empty for the compiler. */
#ifdef __CHECKER__
#define __ao_acquires(x) __attribute__((context(x, 0, 1)))
#define __ao_releases(x) __attribute__((context(x, 1, 0)))
#else
#define __ao_acquires(x)
#define __ao_releases(x)
#endif

#endif /* AORTA_COMPILER_H */
