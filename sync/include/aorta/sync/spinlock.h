/* SPDX-License-Identifier: MIT */
/*
 * The three-phase adaptive lock.
 *
 * A waiter spins (test-and-test-and-set with bounded exponential backoff
 * and cpu_relax()) for a time budget, then calls sched_yield() a bounded
 * number of times, then sleeps on a futex until an unlock wakes it.  An
 * uncontended lock/unlock pair is two atomic instructions and no system
 * call; an unlock makes a system call only when a waiter is asleep and
 * none is already awake.
 *
 * Unfairness is bounded: a sleeper that has waited longer than the starve
 * budget (default 1 ms) turns on hand-off mode, in which an unlock passes
 * the lock straight to a sleeper and newcomers queue behind them, until
 * that sleeper has the lock.
 *
 * When the lock is saturated and fewer circulating threads would serve it
 * faster, it restricts concurrency: waiters park (sleep) at once and
 * unlocks do not wake them, so one thread circulates with the lock and its
 * data in its own cache; each parked thread times out in turn and competes
 * again (the rotation).  A controller in the unlock slow path switches this
 * on and off by measuring both.  See sync/spinlock.c for the state protocol.
 */
#ifndef AORTA_SYNC_SPINLOCK_H
#define AORTA_SYNC_SPINLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/cleanup.h>

/*
 * Defaults, each chosen with tools/bench/lockbench against alternatives
 * run side by side (the figures are in docs/PERFORMANCE.md, "The lock"):
 * SPIN_NS covers a few 1 us critical sections, and a longer spin is only
 * CPU burnt while a holder sleeps; YIELDS is small because a yield costs
 * about a microsecond of CPU when nothing else wants the CPU (the 2006
 * server's lock that lockbench compares against yields 4000 times, ~5 ms
 * of CPU per long wait); STARVE_NS bounds how long a sleeper may be
 * passed over, well below pthread_mutex's worst waits.
 */
#define AO_SPIN_DEFAULT_SPIN_NS 10000u /* phase 1 budget: 10 us */
#define AO_SPIN_DEFAULT_YIELDS 4u /* phase 2: sched_yield() calls */
#define AO_SPIN_DEFAULT_STARVE_NS 1000000u /* hand-off after 1 ms asleep */

/* Upper bounds accepted by ao_spin_set_tune(). */
#define AO_SPIN_MAX_SPIN_NS 100000000u /* 100 ms */
#define AO_SPIN_MAX_YIELDS 100000u
#define AO_SPIN_MAX_STARVE_NS 1000000000u /* 1 s */

/* Lock word: flag bits, then the number of phase-3 waiters. */
#define AO_SPIN_LOCKED 0x1u /* held */
#define AO_SPIN_HANDOFF 0x2u /* held for whichever sleeper claims it */
#define AO_SPIN_STARVING 0x4u /* a sleeper starves: unlocks hand off */
#define AO_SPIN_WOKEN 0x8u /* a woken sleeper is on its way: no wake */
#define AO_SPIN_PARK 0x10u /* restricted: waiters park, unlocks do not wake */
#define AO_SPIN_WAITER 0x100u /* one phase-3 waiter */
#define AO_SPIN_WAITERS_MASK 0xffffff00u

/* Per-lock statistics (all zero, and the functions -EOPNOTSUPP, when the
 * library is built with LOCK_STATS=0). */
struct ao_spin_stats {
	uint64_t fast; /* taken at the first try */
	uint64_t phase1; /* taken while spinning */
	uint64_t phase2; /* taken while yielding */
	uint64_t phase3; /* taken after sleeping on the futex */
	uint64_t handoffs; /* of phase3: handed over by an unlock */
	uint64_t parked; /* parked (restricted) before taking the lock */
	uint64_t wait_ns; /* total time in the slow path */
	uint64_t wait_max_ns; /* longest single acquisition */
};

/* Concurrency restriction (struct ao_spin_tune's park). */
enum {
	AO_SPIN_PARK_AUTO = 0, /* restrict when measured to pay */
	AO_SPIN_PARK_NEVER = 1, /* never restrict */
	AO_SPIN_PARK_ALWAYS = 2, /* restrict whenever waiters are asleep */
};

/* Per-lock tunables. */
struct ao_spin_tune {
	uint32_t spin_ns; /* phase 1 budget in ns (0: skip phase 1) */
	uint32_t yields; /* phase 2 sched_yield() calls (0: skip phase 2) */
	uint32_t starve_ns; /* a sleeper waiting this long forces hand-off */
	uint32_t park; /* AO_SPIN_PARK_AUTO, _NEVER or _ALWAYS */
};

struct ao_spinlock {
	uint32_t state;
	uint32_t spin_ns;
	uint32_t yields;
	uint32_t starve_ns;
	uint32_t park;
	/* The restriction's controller: read and written only by the
	 * holder (sync/spinlock.c). */
#if !AO_CONFIG_LOCK_STATS
	uint64_t cr_acq; /* acquisitions (with statistics: their sum) */
#endif
	uint64_t cr_acq0; /* acquisitions when the epoch began */
	uint32_t cr_state; /* CR_* flags */
	uint32_t cr_left; /* epochs until the other mode is tried */
	uint32_t cr_gap; /* epochs between tries */
	uint64_t cr_t0; /* cycle counter when the epoch began */
	uint64_t cr_base; /* mean cost of the epochs in force */
	uint64_t cr_try; /* cost of a try's first epoch */
#if AO_CONFIG_LOCK_STATS
	/* Written only by the holder, read racily by ao_spin_stats(). */
	uint64_t st_fast, st_phase[3], st_handoffs, st_parked, st_wait,
		st_wait_max;
#endif
#if AO_CONFIG_DEBUG
	int owner; /* thread id of the holder, 0 when free */
	int line; /* where it was last locked or unlocked */
	const char *file;
#endif
};

#define AO_SPINLOCK_INIT                                        \
	{                                                       \
		.state = 0, .spin_ns = AO_SPIN_DEFAULT_SPIN_NS, \
		.yields = AO_SPIN_DEFAULT_YIELDS,               \
		.starve_ns = AO_SPIN_DEFAULT_STARVE_NS,         \
	}

/* Initialise a lock at run time (same as AO_SPINLOCK_INIT). */
AO_API void ao_spin_init(struct ao_spinlock *lock);
/* Set the tunables; -EINVAL if one is above its AO_SPIN_MAX_* bound. */
AO_API int ao_spin_set_tune(struct ao_spinlock *lock,
			    const struct ao_spin_tune *tune);
/* Read the tunables. */
AO_API void ao_spin_get_tune(const struct ao_spinlock *lock,
			     struct ao_spin_tune *tune);
/* Copy the statistics; 0, or -EOPNOTSUPP when compiled out. */
AO_API int ao_spin_stats(const struct ao_spinlock *lock,
			 struct ao_spin_stats *st);
/* Zero the statistics (takes the lock to do so). */
AO_API void ao_spin_stats_reset(struct ao_spinlock *lock);
/* Add b's counters to a (for totals over many locks). */
AO_API void ao_spin_stats_add(struct ao_spin_stats *a,
			      const struct ao_spin_stats *b);

/* ao_spin_lock(lock): take the lock, waiting as long as it takes. */
#define ao_spin_lock(lock) ao__spin_lock((lock), __FILE__, __LINE__)
/* ao_spin_trylock(lock): take the lock if that needs no wait; true if so. */
#define ao_spin_trylock(lock) ao__spin_trylock((lock), __FILE__, __LINE__)
/* ao_spin_unlock(lock): release a lock this thread holds. */
#define ao_spin_unlock(lock) ao__spin_unlock((lock), __FILE__, __LINE__)

/* True if some thread holds the lock (a snapshot, for assertions). */
static inline bool ao_spin_is_locked(const struct ao_spinlock *lock)
{
	return __atomic_load_n(&lock->state, __ATOMIC_RELAXED) & AO_SPIN_LOCKED;
}

/* Out-of-line halves; not for direct use. */
AO_API void ao__spin_lock_slow(struct ao_spinlock *lock, const char *file,
			       int line);
AO_API void ao__spin_unlock_slow(struct ao_spinlock *lock, uint32_t state);
AO_API void ao__spin_debug_acquired(struct ao_spinlock *lock, const char *file,
				    int line);
AO_API void ao__spin_debug_release(struct ao_spinlock *lock, const char *file,
				   int line);

#if AO_CONFIG_LOCK_STATS
/* Only the holder writes: a relaxed load and store, no locked RMW. */
#define ao__spin_stat_inc(field)                                          \
	__atomic_store_n(&(field),                                        \
			 __atomic_load_n(&(field), __ATOMIC_RELAXED) + 1, \
			 __ATOMIC_RELAXED)
#else
#define ao__spin_stat_inc(field) ((void)0)
#endif

/* An acquisition by the fast path: the statistics count it, or, compiled
 * out, the restriction's controller does (the holder's, ordered by the
 * lock). */
#if AO_CONFIG_LOCK_STATS
#define ao__spin_count_fast(lock) ao__spin_stat_inc((lock)->st_fast)
#else
#define ao__spin_count_fast(lock) ((lock)->cr_acq++)
#endif

static __ao_always_inline bool ao__spin_trylock(struct ao_spinlock *lock,
						const char *file, int line)
{
	uint32_t v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);

	/* A free lock may still have sleepers counted; taking it is fine
	 * unless a starving sleeper asked for hand-off. */
	if (v & (AO_SPIN_LOCKED | AO_SPIN_HANDOFF | AO_SPIN_STARVING))
		return false;
	/* Acquire: the critical section stays after this; pairs with the
	 * release in ao__spin_unlock() and ao__spin_unlock_slow(). */
	if (!__atomic_compare_exchange_n(&lock->state, &v, v | AO_SPIN_LOCKED,
					 false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return false;
	ao__spin_count_fast(lock);
	if (AO_CONFIG_DEBUG)
		ao__spin_debug_acquired(lock, file, line);
	return true;
}

static __ao_always_inline void ao__spin_lock(struct ao_spinlock *lock,
					     const char *file, int line)
	__ao_acquires(lock)
{
	bool held;

	/*
	 * Set LOCKED whatever else the word holds: a free lock never has
	 * HANDOFF or STARVING set (an unlock that owes a sleeper the lock
	 * keeps LOCKED), and sleepers counted or PARK do not stop a thread
	 * from taking a free lock.  A held lock is left as it is.  Written
	 * so that gcc emits one lock bts on x86 (clang 14 a CAS loop; with
	 * likely(!held) gcc made a loop too).  Acquire: pairs with the
	 * release in ao__spin_unlock() and ao__spin_unlock_slow().
	 */
	held = __atomic_fetch_or(&lock->state, AO_SPIN_LOCKED,
				 __ATOMIC_ACQUIRE) &
	       AO_SPIN_LOCKED;
	if (unlikely(held)) {
		ao__spin_lock_slow(lock, file, line);
		return;
	}
	ao__spin_count_fast(lock);
	if (AO_CONFIG_DEBUG)
		ao__spin_debug_acquired(lock, file, line);
}

static __ao_always_inline void ao__spin_unlock(struct ao_spinlock *lock,
					       const char *file, int line)
	__ao_releases(lock)
{
	uint32_t v;

	if (AO_CONFIG_DEBUG)
		ao__spin_debug_release(lock, file, line);
	/*
	 * Anything but "held, no waiters, no flags" goes to the slow path
	 * with the value seen.  A plain load first: when sleepers are counted
	 * (a restricted lock's holder sees them on every unlock), a CAS bound
	 * to fail would cost a locked operation for nothing.  Release: the
	 * critical section is visible to the next holder; pairs with the
	 * acquire of every lock path.
	 */
	v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);
	if (unlikely(v != AO_SPIN_LOCKED) ||
	    unlikely(!__atomic_compare_exchange_n(&lock->state, &v, 0, false,
						  __ATOMIC_RELEASE,
						  __ATOMIC_RELAXED))) {
		ao__spin_unlock_slow(lock, v);
		return;
	}
}

AO_DEFINE_GUARD(ao_spinlock, struct ao_spinlock *, ao_spin_lock(_T),
		ao_spin_unlock(_T))
AO_DEFINE_GUARD_COND(ao_spinlock, _try, ao_spin_trylock(_T))

#endif /* AORTA_SYNC_SPINLOCK_H */
