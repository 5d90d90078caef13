// SPDX-License-Identifier: MIT
/*
 * XIOSpinLock::Wait() from the seed, line for line:
 *
 *	int count = 4000;
 *	while (--count >= 0) {
 *		if (InterlockedCompareExchange(&m_lock, 1, 0) == 0) return;
 *		__builtin_ia32_pause();
 *	}
 *	count = 4000;
 *	while (--count >= 0) {
 *		sched_yield();
 *		if (InterlockedCompareExchange(&m_lock, 1, 0) == 0) return;
 *	}
 *	while (true) {
 *		usleep(1000);
 *		if (InterlockedCompareExchange(&m_lock, 1, 0) == 0) return;
 *	}
 *
 * The only liberty taken: PAUSE is spelled per architecture, so that the
 * benchmark builds off x86 too.
 */
#include <sched.h>
#include <unistd.h>
#include "seed_lock.h"

static inline void seed_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

void seed_lock_wait(struct seed_lock *l)
{
	int count = SEED_LOCK_SPINS;

	/* Phase 1: spin with CAS and PAUSE. */
	while (--count >= 0) {
		if (seed_lock_try(l))
			return;
		seed_pause();
	}
	/* Phase 2: yield the CPU. */
	count = SEED_LOCK_YIELDS;
	while (--count >= 0) {
		sched_yield();
		if (seed_lock_try(l))
			return;
	}
	/* Phase 3: sleep 1 ms and poll, forever. */
	for (;;) {
		usleep(SEED_LOCK_SLEEP_US);
		if (seed_lock_try(l))
			return;
	}
}
