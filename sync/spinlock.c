// SPDX-License-Identifier: MIT
/*
 * The three-phase adaptive lock: slow paths, statistics, debug checks.
 *
 * All of the lock's state is one 32-bit word, so every transition is a
 * single atomic read-modify-write on it and the futex can sleep on exactly
 * the value a waiter last saw:
 *
 *	bit 0	LOCKED		held
 *	bit 1	HANDOFF		held on behalf of whichever sleeper claims it
 *	bit 2	STARVING	a sleeper has waited > starve_ns
 *	bit 3	WOKEN		an unlock woke a sleeper that has not yet
 *				re-checked: further unlocks need not wake
 *	8..31	waiters		threads in phase 3 (registered to sleep)
 *
 * Lock:  fast path CAS 0 -> LOCKED (inline).  Slow path:
 *   1. spin: if the lock is free take it; else join the process's
 *      spinners (a counter of its own, not in the word), unless there are
 *      already as many as there are other CPUs, in which case go straight
 *      to 2.  Then read the word; when neither LOCKED, HANDOFF nor STARVING
 *      is set, CAS LOCKED in; otherwise cpu_relax() for an exponentially
 *      growing, jittered, capped number of times (once only, for a lone
 *      spinner that has waited DENSE_AFTER_NS); until the time budget
 *      (cycle counter) runs out;
 *   2. yield: sched_yield() and retry, a bounded number of times;
 *   3. sleep: add one to waiters; loop { HANDOFF set: claim it; free: take
 *      it; held: clear WOKEN (and maybe set STARVING) and futex-wait on
 *      the word }; the waiter count drops in the same CAS that acquires.
 *
 * Unlock: fast path CAS LOCKED -> 0 (inline), which fails whenever any
 * other bit is set.  Slow path: no waiters: word = 0; STARVING: set HANDOFF
 * and keep LOCKED (the lock passes to a sleeper, newcomers see it busy);
 * otherwise clear LOCKED.  If there are waiters and WOKEN is clear, set
 * WOKEN and wake one.
 *
 * Why no wake is lost: a waiter sleeps only with futex_wait(word, v) where v
 * is the word it last read, so any change after that read (an unlock among
 * them) makes the wait return at once.  WOKEN is set only together with a
 * wake, and every waiter clears it (by CAS, which fails if the word moved)
 * before it sleeps, so while WOKEN is set some waiter is still bound to
 * re-read the word: skipping the wake is safe.
 *
 * How long a waiter can be passed over: barging (a spinning newcomer taking
 * the lock just released to a sleeper) is what makes the lock fast, and it
 * is unbounded in the 2006 server's spin-yield-sleep lock that
 * tools/bench/lockbench compares against.  Here, once a sleeper has waited
 * starve_ns it sets STARVING: from then on no newcomer may take the lock and
 * each unlock hands it to the futex queue, which the kernel wakes in FIFO
 * order, so the starving sleeper waits at most starve_ns plus one critical
 * section per sleeper ahead of it.  It clears STARVING when it gets the
 * lock.
 *
 * Why spinners are counted: a spinner is useful only while a holder runs
 * on another CPU; with more threads than CPUs (a game server's thread
 * pools on a small VM), extra spinners only take CPU time from holders and
 * from threads that have work to do.  So at most (CPUs - 1) threads of the
 * process spin at once, on all locks together; on this 2-CPU machine that
 * raised lockbench throughput at 8 and 16 threads by 4-57% (paired runs,
 * 1 s cells, median of 5).  The count lives on its own cache line, not in
 * the lock word: in the word it made every contended unlock miss its
 * inline fast path and added a locked RMW on the lock's line per wait.  It
 * is a heuristic, so it is RELAXED and orders nothing.  A spinner that is
 * preempted keeps its slot until it runs again and sees its budget gone;
 * meanwhile waiters yield and sleep, as with a mutex.
 *
 * Memory ordering: the acquiring CAS of each path is ACQUIRE and the
 * releasing CAS of each unlock path is RELEASE; they pair with each other
 * and are the only orderings the critical sections need.  The other
 * transitions (register, clear WOKEN, set STARVING) are RELAXED: they
 * order nothing but the word itself, whose modification order already
 * serialises them, and futex_wait re-reads the word in the kernel.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/sync/futex.h>
#include <aorta/sync/spinlock.h>

#define BUSY (AO_SPIN_LOCKED | AO_SPIN_HANDOFF | AO_SPIN_STARVING)

/* Threads of this process in phase 1, on any lock. */
static struct {
	uint32_t n;
} spinners __ao_cacheline_aligned;

/*
 * Cap of the phase-1 backoff, in time: long enough that a handful of
 * spinners do not keep the line bouncing, short enough that a released
 * lock is noticed within a fraction of a 1 us critical section.  A short
 * cap favours long sections (the waiter sees the release sooner), a long
 * one short sections (the holder re-takes the lock without the line
 * moving); lockbench showed neither by more than the noise (the figures
 * are in docs/PERFORMANCE.md).
 */
#define BACKOFF_MAX_NS 500u

/*
 * A spinner that was alone when it joined (always the case on a 2-CPU
 * machine, where one thread may spin) and has waited this long polls at
 * every cpu_relax() instead of backing off.  At the cap the backoff leaves
 * a released lock free for up to BACKOFF_MAX_NS, about 190 ns on average
 * (the jitter), on every hand-over: a fifth of a 1 us section when threads
 * come back before the section ends (lockbench's short scenario).  A
 * lone poller only reads the word, which the holder does not write until
 * it unlocks, so it costs the holder the one miss the backoff's last poll
 * cost; later spinners, not alone, still back off.  In lockbench this
 * raised the short scenario's 1 us cells by about a tenth and left the
 * even scenario unchanged (docs/PERFORMANCE.md).
 */
#define DENSE_AFTER_NS BACKOFF_MAX_NS

static inline bool cas(uint32_t *p, uint32_t *old, uint32_t new, int mo)
{
	return __atomic_compare_exchange_n(p, old, new, false, mo,
					   __ATOMIC_RELAXED);
}

static inline bool deadline_passed(uint64_t now, uint64_t deadline)
{
	return (int64_t)(now - deadline) >= 0;
}

static uint32_t backoff_cap(void)
{
	static uint32_t cap;
	uint32_t c = __atomic_load_n(&cap, __ATOMIC_RELAXED);

	if (unlikely(!c)) {
		/* Benign race: every thread computes the same value. */
		c = BACKOFF_MAX_NS * 16 / ao_relax_ns16();
		c = c < 1 ? 1 : c > 4096 ? 4096 : c;
		__atomic_store_n(&cap, c, __ATOMIC_RELAXED);
	}
	return c;
}

/*
 * How many threads may spin at once: one per CPU this process may run on,
 * less the holder's.  Computed once, from the first caller's affinity.
 */
static uint32_t max_spinners(void)
{
	static uint32_t cached;
	uint32_t m = __atomic_load_n(&cached, __ATOMIC_RELAXED);

	if (unlikely(!m)) {
		cpu_set_t set;
		long n = 0;

		if (!sched_getaffinity(0, sizeof(set), &set))
			n = CPU_COUNT(&set);
		if (n <= 0)
			n = sysconf(_SC_NPROCESSORS_ONLN);
		/* Benign race: every thread computes about the same value. */
		m = n > 2 ? (uint32_t)(n - 1) : 1;
		__atomic_store_n(&cached, m, __ATOMIC_RELAXED);
	}
	return m;
}

static void record(struct ao_spinlock *lock, int phase, bool handoff,
		   uint64_t waited)
{
#if AO_CONFIG_LOCK_STATS
	/* We hold the lock, so we are the only writer. */
	ao__spin_stat_inc(lock->st_phase[phase - 1]);
	if (handoff)
		ao__spin_stat_inc(lock->st_handoffs);
	WRITE_ONCE(lock->st_wait, READ_ONCE(lock->st_wait) + waited);
	if (waited > READ_ONCE(lock->st_wait_max))
		WRITE_ONCE(lock->st_wait_max, waited);
#else
	(void)lock;
	(void)phase;
	(void)handoff;
	(void)waited;
#endif
}

static bool spin_phase(struct ao_spinlock *lock, uint64_t t0, uint64_t budget)
{
	uint64_t deadline = t0 + budget;
	uint64_t dense = t0 + ao_ns_to_cycles(DENSE_AFTER_NS);
	uint32_t cap = backoff_cap();
	uint32_t backoff = 1;
	uint32_t v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);
	bool got = false, alone;
	uint32_t n;

	if (!(v & BUSY) &&
	    cas(&lock->state, &v, v | AO_SPIN_LOCKED, __ATOMIC_ACQUIRE))
		return true;
	/* Join the spinners if there is room. */
	n = __atomic_add_fetch(&spinners.n, 1, __ATOMIC_RELAXED);
	if (n > max_spinners())
		goto out;
	alone = n == 1;
	for (;;) {
		uint64_t now;

		v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);
		/* Test before test-and-set: CAS only when it looks free. */
		if (!(v & BUSY) && cas(&lock->state, &v, v | AO_SPIN_LOCKED,
				       __ATOMIC_ACQUIRE)) {
			got = true;
			break;
		}
		now = ao_cycles();
		if (alone && deadline_passed(now, dense)) {
			/* A long hold, and no other spinner to collide with
			 * when it ends: see the release at once. */
			cpu_relax();
		} else {
			/* Jitter in [backoff/2, backoff) so that spinners
			 * released together do not poll in lockstep. */
			for (uint32_t i = backoff / 2 +
					  (uint32_t)(now & (backoff / 2));
			     i; i--)
				cpu_relax();
			if (backoff < cap)
				backoff <<= 1;
		}
		if (deadline_passed(now, deadline))
			break;
	}
out:
	__atomic_sub_fetch(&spinners.n, 1, __ATOMIC_RELAXED);
	return got;
}

static bool yield_phase(struct ao_spinlock *lock, uint32_t yields)
{
	for (uint32_t i = 0; i < yields; i++) {
		uint32_t v;

		sched_yield();
		v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);
		if (!(v & BUSY) &&
		    cas(&lock->state, &v, v | AO_SPIN_LOCKED, __ATOMIC_ACQUIRE))
			return true;
	}
	return false;
}

/* Returns true if the lock was handed over rather than taken. */
static bool sleep_phase(struct ao_spinlock *lock, uint64_t t0, uint64_t starve)
{
	bool starver = false;
	uint32_t v, n;

	v = __atomic_add_fetch(&lock->state, AO_SPIN_WAITER, __ATOMIC_RELAXED);
	for (;;) {
		if (v & (AO_SPIN_HANDOFF | AO_SPIN_LOCKED)) {
			if (v & AO_SPIN_HANDOFF) {
				/* Ours: keep LOCKED, leave the queue. */
				n = (v & ~(AO_SPIN_HANDOFF | AO_SPIN_WOKEN)) -
				    AO_SPIN_WAITER;
				if (starver)
					n &= ~AO_SPIN_STARVING;
				if (cas(&lock->state, &v, n, __ATOMIC_ACQUIRE))
					return true;
				continue;
			}
			/* Held: go to sleep.  Give up WOKEN so that the next
			 * unlock wakes someone, and flag starvation. */
			n = v & ~AO_SPIN_WOKEN;
			if (!starver && !(v & AO_SPIN_STARVING) &&
			    deadline_passed(ao_cycles(), t0 + starve))
				n |= AO_SPIN_STARVING;
			if (n != v) {
				if (!cas(&lock->state, &v, n, __ATOMIC_RELAXED))
					continue;
				if (n & ~v & AO_SPIN_STARVING)
					starver = true;
				v = n;
			}
			ao_futex_wait(&lock->state, v, -1);
			v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);
			continue;
		}
		/* Free: a queued waiter may take it even when STARVING. */
		n = ((v | AO_SPIN_LOCKED) & ~AO_SPIN_WOKEN) - AO_SPIN_WAITER;
		if (starver)
			n &= ~AO_SPIN_STARVING;
		if (cas(&lock->state, &v, n, __ATOMIC_ACQUIRE))
			return false;
	}
}

void ao__spin_lock_slow(struct ao_spinlock *lock, const char *file, int line)
{
	uint64_t t0 = ao_cycles();
	uint32_t spin_ns = READ_ONCE(lock->spin_ns);
	int phase = 1;
	bool handoff = false;

	/*
	 * The inline CAS expects a word of 0, so it fails on a free lock that
	 * still has sleepers counted.  Taking such a lock at the first look is
	 * no wait at all: count it as the fast path, not as phase 1.
	 */
	if (ao__spin_trylock(lock, file, line))
		return;
	if (spin_ns && spin_phase(lock, t0, ao_ns_to_cycles(spin_ns)))
		goto acquired;
	phase = 2;
	if (yield_phase(lock, READ_ONCE(lock->yields)))
		goto acquired;
	phase = 3;
	handoff = sleep_phase(lock, t0,
			      ao_ns_to_cycles(READ_ONCE(lock->starve_ns)));
acquired:
	record(lock, phase, handoff, ao_cycles() - t0);
	if (AO_CONFIG_DEBUG)
		ao__spin_debug_acquired(lock, file, line);
}

void ao__spin_unlock_slow(struct ao_spinlock *lock, uint32_t v)
{
	uint32_t n;
	bool wake;

	do {
		wake = false;
		if (!(v & AO_SPIN_WAITERS_MASK)) {
			n = 0;
		} else {
			/* STARVING: keep it held, for a sleeper to claim. */
			if (v & AO_SPIN_STARVING)
				n = v | AO_SPIN_HANDOFF;
			else
				n = v & ~AO_SPIN_LOCKED;
			if (!(v & AO_SPIN_WOKEN)) {
				n |= AO_SPIN_WOKEN;
				wake = true;
			}
		}
		/* Release: pairs with the acquire CAS of the next holder. */
	} while (!cas(&lock->state, &v, n, __ATOMIC_RELEASE));
	/*
	 * The lock may already be gone (its next holder may have freed it):
	 * FUTEX_WAKE only hashes the address, it does not touch the memory.
	 */
	if (wake)
		ao_futex_wake(&lock->state, 1);
}

void ao_spin_init(struct ao_spinlock *lock)
{
	*lock = (struct ao_spinlock)AO_SPINLOCK_INIT;
}

int ao_spin_set_tune(struct ao_spinlock *lock, const struct ao_spin_tune *t)
{
	if (!t || t->spin_ns > AO_SPIN_MAX_SPIN_NS ||
	    t->yields > AO_SPIN_MAX_YIELDS ||
	    t->starve_ns > AO_SPIN_MAX_STARVE_NS)
		return -EINVAL;
	WRITE_ONCE(lock->spin_ns, t->spin_ns);
	WRITE_ONCE(lock->yields, t->yields);
	WRITE_ONCE(lock->starve_ns, t->starve_ns);
	return 0;
}

void ao_spin_get_tune(const struct ao_spinlock *lock, struct ao_spin_tune *t)
{
	t->spin_ns = READ_ONCE(lock->spin_ns);
	t->yields = READ_ONCE(lock->yields);
	t->starve_ns = READ_ONCE(lock->starve_ns);
}

int ao_spin_stats(const struct ao_spinlock *lock, struct ao_spin_stats *st)
{
	memset(st, 0, sizeof(*st));
#if AO_CONFIG_LOCK_STATS
	st->fast = READ_ONCE(lock->st_fast);
	st->phase1 = READ_ONCE(lock->st_phase[0]);
	st->phase2 = READ_ONCE(lock->st_phase[1]);
	st->phase3 = READ_ONCE(lock->st_phase[2]);
	st->handoffs = READ_ONCE(lock->st_handoffs);
	st->wait_ns = ao_cycles_to_ns(READ_ONCE(lock->st_wait));
	st->wait_max_ns = ao_cycles_to_ns(READ_ONCE(lock->st_wait_max));
	return 0;
#else
	(void)lock;
	return -EOPNOTSUPP;
#endif
}

void ao_spin_stats_reset(struct ao_spinlock *lock)
{
#if AO_CONFIG_LOCK_STATS
	ao_spin_lock(lock);
	WRITE_ONCE(lock->st_fast, 0);
	for (int i = 0; i < 3; i++)
		WRITE_ONCE(lock->st_phase[i], 0);
	WRITE_ONCE(lock->st_handoffs, 0);
	WRITE_ONCE(lock->st_wait, 0);
	WRITE_ONCE(lock->st_wait_max, 0);
	ao_spin_unlock(lock);
#else
	(void)lock;
#endif
}

void ao_spin_stats_add(struct ao_spin_stats *a, const struct ao_spin_stats *b)
{
	a->fast += b->fast;
	a->phase1 += b->phase1;
	a->phase2 += b->phase2;
	a->phase3 += b->phase3;
	a->handoffs += b->handoffs;
	a->wait_ns += b->wait_ns;
	if (b->wait_max_ns > a->wait_max_ns)
		a->wait_max_ns = b->wait_max_ns;
}

/* ---- debug checks (DEBUG=1) ---- */

#if AO_CONFIG_DEBUG
static __thread int my_tid;

static int self_tid(void)
{
	if (unlikely(!my_tid))
		my_tid = (int)syscall(SYS_gettid);
	return my_tid;
}

static __ao_noreturn __ao_cold void misuse(struct ao_spinlock *lock,
					   const char *file, int line,
					   const char *what, int owner)
{
	const char *lf = READ_ONCE(lock->file);

	fprintf(stderr,
		"aorta: %s:%d: ao_spin_unlock(%p): %s (owner tid %d, this "
		"tid %d; last locked/unlocked at %s:%d)\n",
		file, line, (void *)lock, what, owner, self_tid(),
		lf ? lf : "?", READ_ONCE(lock->line));
	abort();
}
#endif

void ao__spin_debug_acquired(struct ao_spinlock *lock, const char *file,
			     int line)
{
#if AO_CONFIG_DEBUG
	WRITE_ONCE(lock->owner, self_tid());
	WRITE_ONCE(lock->file, file);
	WRITE_ONCE(lock->line, line);
#else
	(void)lock;
	(void)file;
	(void)line;
#endif
}

void ao__spin_debug_release(struct ao_spinlock *lock, const char *file,
			    int line)
{
#if AO_CONFIG_DEBUG
	uint32_t v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);
	int owner = READ_ONCE(lock->owner);

	if (!(v & AO_SPIN_LOCKED) || (!owner && (v & AO_SPIN_HANDOFF)))
		misuse(lock, file, line, "lock is not held (double unlock?)",
		       owner);
	if (owner != self_tid())
		misuse(lock, file, line, "lock is held by another thread",
		       owner);
	WRITE_ONCE(lock->owner, 0);
	WRITE_ONCE(lock->file, file);
	WRITE_ONCE(lock->line, line);
#else
	(void)lock;
	(void)file;
	(void)line;
#endif
}
