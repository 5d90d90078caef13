// SPDX-License-Identifier: MIT
/*
 * Cycle counter calibration.
 *
 * The lock's spin budget is a time, not a count (PAUSE costs ~10 cycles on
 * old Intel cores, ~140 on Skylake, 10-50 on AMD), so the slow path needs a
 * cheap clock that it can turn into nanoseconds: the cycle counter, scaled
 * by a factor measured once against CLOCK_MONOTONIC.  The factors are Q32
 * fixed point so a conversion is one multiply and one shift.
 */
#include <errno.h>
#include <time.h>
#include <aorta/clock.h>

enum { CAL_NONE, CAL_RUNNING, CAL_DONE };

#define CAL_WINDOW_NS 1000000ull /* 1 ms: 0.01% error for ~50 ns jitter */
#define RELAX_ROUNDS 8
#define RELAX_PER_ROUND 256

static struct {
	unsigned int state;
	/* Provisional values for the moments before calibration finishes:
	 * 3 GHz, and a PAUSE of 10 ns.  Only ever a little off. */
	uint64_t cyc_per_ns_q32; /* cycles per ns, Q32 */
	uint64_t ns_per_cyc_q32; /* ns per cycle, Q32 */
	uint64_t cyc_per_sec;
	uint32_t relax_ns16;
} cal = {
	.state = CAL_NONE,
#if AO_ARCH_CYCLES_ARE_NS
	.cyc_per_ns_q32 = 1ull << 32,
	.ns_per_cyc_q32 = 1ull << 32,
	.cyc_per_sec = 1000000000ull,
#else
	.cyc_per_ns_q32 = 3ull << 32,
	.ns_per_cyc_q32 = (1ull << 32) / 3,
	.cyc_per_sec = 3000000000ull,
#endif
	.relax_ns16 = 160,
};

uint64_t ao_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *ao_arch_name(void)
{
	return AO_ARCH_NAME;
}

static inline uint64_t mul_q32(uint64_t a, uint64_t q32)
{
#ifdef __SIZEOF_INT128__
	return (uint64_t)(((unsigned __int128)a * q32) >> 32);
#else
	return (uint64_t)((double)a * ((double)q32 / 4294967296.0));
#endif
}

#if !AO_ARCH_CYCLES_ARE_NS
/* One (cycles, ns) sample with the tightest bracket of three tries. */
static void sample(uint64_t *cyc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;

	*cyc = *ns = 0;

	for (int i = 0; i < 3; i++) {
		uint64_t c0 = ao_cycles();
		uint64_t t = ao_now_ns();
		uint64_t c1 = ao_cycles();

		if (c1 - c0 < best) {
			best = c1 - c0;
			*cyc = c0 + (c1 - c0) / 2;
			*ns = t;
		}
	}
}
#endif

static void calibrate(void)
{
	uint64_t c0 = 0, t0 = 0, c1 = 0, t1 = 0, cps, q, best;

#if AO_ARCH_CYCLES_ARE_NS
	c0 = t0 = 0;
	c1 = t1 = 1;
	cps = 1000000000ull;
#else
	sample(&c0, &t0);
	do {
		sample(&c1, &t1);
	} while (t1 - t0 < CAL_WINDOW_NS);
	cps = (uint64_t)((double)(c1 - c0) * 1e9 / (double)(t1 - t0));
	if (!cps)
		cps = 1;
#endif
	q = (uint64_t)((double)cps / 1e9 * 4294967296.0);
	/* Release: the factors are complete before CAL_DONE is seen; pairs
	 * with the acquire load in ready(). */
	__atomic_store_n(&cal.cyc_per_ns_q32, q ? q : 1, __ATOMIC_RELAXED);
	__atomic_store_n(&cal.ns_per_cyc_q32,
			 (uint64_t)(1e9 / (double)cps * 4294967296.0),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&cal.cyc_per_sec, cps, __ATOMIC_RELAXED);

	/* The cost of cpu_relax(): the cheapest of a few rounds, so that a
	 * preemption in one round does not count. */
	best = UINT64_MAX;
	for (int r = 0; r < RELAX_ROUNDS; r++) {
		uint64_t s = ao_cycles();

		for (int i = 0; i < RELAX_PER_ROUND; i++)
			cpu_relax();
		s = ao_cycles() - s;
		if (s < best)
			best = s;
	}
	best = mul_q32(best * 16,
		       __atomic_load_n(&cal.ns_per_cyc_q32, __ATOMIC_RELAXED)) /
	       RELAX_PER_ROUND;
	__atomic_store_n(&cal.relax_ns16, (uint32_t)(best ? best : 1),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&cal.state, CAL_DONE, __ATOMIC_RELEASE);
}

/* Calibrate on first use.  A thread that finds another one calibrating does
 * not wait: it uses the provisional factors, which are only a little off. */
static inline void ready(void)
{
	unsigned int s = __atomic_load_n(&cal.state, __ATOMIC_ACQUIRE);

	if (likely(s == CAL_DONE))
		return;
	if (s == CAL_NONE &&
	    __atomic_compare_exchange_n(&cal.state, &s, CAL_RUNNING, 0,
					__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		calibrate();
}

int ao_clock_calibrate(void)
{
	ready();
	return 0;
}

uint64_t ao_cycles_to_ns(uint64_t cycles)
{
	ready();
	return mul_q32(cycles,
		       __atomic_load_n(&cal.ns_per_cyc_q32, __ATOMIC_RELAXED));
}

uint64_t ao_ns_to_cycles(uint64_t ns)
{
	ready();
	return mul_q32(ns,
		       __atomic_load_n(&cal.cyc_per_ns_q32, __ATOMIC_RELAXED));
}

uint64_t ao_cycles_per_sec(void)
{
	ready();
	return __atomic_load_n(&cal.cyc_per_sec, __ATOMIC_RELAXED);
}

uint32_t ao_relax_ns16(void)
{
	ready();
	return __atomic_load_n(&cal.relax_ns16, __ATOMIC_RELAXED);
}
