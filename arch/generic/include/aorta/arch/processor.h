/* SPDX-License-Identifier: MIT */
/*
 * Generic fallback for architectures without a folder: C11 fences and
 * clock_gettime.  Correct everywhere, fast nowhere in particular.
 */
#ifndef AORTA_ARCH_PROCESSOR_H
#define AORTA_ARCH_PROCESSOR_H

#include <stdint.h>
#include <time.h>

#define AO_ARCH_NAME "generic"
/* The "cycle" counter is CLOCK_MONOTONIC in nanoseconds. */
#define AO_ARCH_CYCLES_ARE_NS 1

/* No portable spin hint: a compiler barrier keeps the loop honest. */
static inline void cpu_relax(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline uint64_t ao_cycles(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void ao_mb(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static inline void ao_rmb(void)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
}

static inline void ao_wmb(void)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

#endif /* AORTA_ARCH_PROCESSOR_H */
