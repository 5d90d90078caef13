/* SPDX-License-Identifier: MIT */
/*
 * arm64: ISB as the spin hint, the virtual counter, barriers.
 */
#ifndef AORTA_ARCH_PROCESSOR_H
#define AORTA_ARCH_PROCESSOR_H

#include <stdint.h>

#define AO_ARCH_NAME "arm64"
#define AO_ARCH_CYCLES_ARE_NS 0

/*
 * YIELD is a no-op on most cores; ISB stalls for a pipeline's worth of time,
 * which is what a spin loop wants (Rust's spin_loop and others use it).
 */
static inline void cpu_relax(void)
{
	__asm__ __volatile__("isb" ::: "memory");
}

/* The generic timer's virtual count (cntvct_el0); ticks at cntfrq_el0. */
static inline uint64_t ao_cycles(void)
{
	uint64_t v;

	__asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v)::"memory");
	return v;
}

static inline void ao_mb(void)
{
	__asm__ __volatile__("dmb ish" ::: "memory");
}

static inline void ao_rmb(void)
{
	__asm__ __volatile__("dmb ishld" ::: "memory");
}

static inline void ao_wmb(void)
{
	__asm__ __volatile__("dmb ishst" ::: "memory");
}

#endif /* AORTA_ARCH_PROCESSOR_H */
