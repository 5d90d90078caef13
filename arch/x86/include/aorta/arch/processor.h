/* SPDX-License-Identifier: MIT */
/*
 * x86: PAUSE, the time-stamp counter, barriers.
 */
#ifndef AORTA_ARCH_PROCESSOR_H
#define AORTA_ARCH_PROCESSOR_H

#include <stdint.h>

#define AO_ARCH_NAME "x86"
/* The cycle counter ticks in TSC cycles, not nanoseconds. */
#define AO_ARCH_CYCLES_ARE_NS 0

/* Tell the core we are spinning: PAUSE (rep; nop) saves power and the
 * pipeline flush when the spun-on line changes. */
static inline void cpu_relax(void)
{
	__asm__ __volatile__("pause" ::: "memory");
}

/* The time-stamp counter; invariant on every CPU of the last 15 years. */
static inline uint64_t ao_cycles(void)
{
	uint32_t lo, hi;

	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

/* Full barrier; x86 orders everything else but store->load. */
static inline void ao_mb(void)
{
	__asm__ __volatile__("lock; addl $0,-4(%%rsp)" ::: "memory", "cc");
}

/* x86 is TSO: loads are not reordered with loads nor stores with stores. */
static inline void ao_rmb(void)
{
	__asm__ __volatile__("" ::: "memory");
}

static inline void ao_wmb(void)
{
	__asm__ __volatile__("" ::: "memory");
}

#endif /* AORTA_ARCH_PROCESSOR_H */
