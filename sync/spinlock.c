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
 *	bit 4	PARK		restricted: waiters park, unlocks do not wake
 *	8..31	waiters		threads in phase 3 (registered to sleep)
 *
 * Lock:  fast path: set LOCKED with an atomic OR (inline); it took the lock
 * if LOCKED was clear.  HANDOFF and STARVING are never set on a free lock
 * (an unlock that owes the lock to a sleeper keeps LOCKED, and the starver
 * clears STARVING when it gets the lock), so a clear LOCKED bit is a lock
 * anyone may take.  Slow path:
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
 * While PARK is set, a waiter skips 1 and 2 and parks at once (3), with a
 * time-out; a parked waiter that wakes (timed out, or woken) and finds the
 * lock held and PARK still set leaves the queue (waiters - 1, in one CAS
 * that also clears WOKEN) and goes through 1-3 once more: the rotation.
 *
 * Unlock: fast path: if a plain load reads LOCKED alone, CAS LOCKED -> 0
 * (inline); any other value, or a failed CAS, goes to the slow path with
 * the value seen.  Slow path: no waiters: word = 0; STARVING: set HANDOFF
 * and keep LOCKED (the lock passes to a sleeper, newcomers see it busy);
 * otherwise clear LOCKED.  With waiters, PARK is set or cleared as the
 * controller says.  If there are waiters, WOKEN is clear and either PARK is
 * clear or STARVING set, set WOKEN and wake one.  An unlock that sets PARK
 * where it was clear wakes every sleeper (see below).
 *
 * Why no wake is lost: a waiter sleeps only with futex_wait(word, v) where v
 * is the word it last read, so any change after that read (an unlock among
 * them) makes the wait return at once.  WOKEN is set only together with a
 * wake, and every waiter clears it (by CAS, which fails if the word moved)
 * before it sleeps, so while WOKEN is set some waiter is still bound to
 * re-read the word: skipping the wake is safe.  Unlocks do not wake while
 * PARK is set, so a waiter that sleeps on a word with PARK set sleeps with
 * a time-out: if the circulating thread never comes back, a parked waiter
 * finds the lock free within that time.  One that went to sleep without a
 * time-out, on a word without PARK, is woken when PARK is set (the unlock
 * that sets it wakes all); it re-reads the word and parks with a time-out.
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
 * Concurrency restriction (PARK): when the lock is saturated, every
 * hand-over to a waiter on another CPU moves the lock word and the data it
 * guards between caches.  With the waiters parked, the holder re-takes the
 * lock after its outside work with both still in its cache (Dice,
 * "Malthusian Locks", EuroSys 2017).  That wins when a hand-over costs
 * more than the overlap two circulating threads get (one's outside work
 * with the other's section), which depends on the section, the work and
 * what the machine charges for moving a line, so it is measured, not
 * guessed.  Every acquisition is counted in the lock (the statistics'
 * counters, or with those compiled out one of its own: a plain add by the
 * holder, on the line the lock bit was just set on); on each
 * contended unlock (one with waiters) the holder checks whether an epoch
 * of CR_EPOCH acquisitions has passed, and if so times it with the cycle
 * counter.  The mode in force keeps a running mean of its epochs; every
 * cr_gap epochs the other mode is tried, for one epoch if that was half
 * again as slow, else for two, and kept if their mean was a sixteenth
 * faster.  A try that loses doubles the gap (CR_GAP_MIN .. CR_GAP_MAX),
 * one that wins resets it.  Epochs slower than CR_SLOW_NS per acquisition
 * mean the lock is not saturated: the mode goes back to unrestricted.
 * The controller's fields are read and written only by the holder, so
 * they need no atomics (the lock's acquire and release order them); the
 * protocol's state stays the one word (PARK in it), and a lock whose
 * waiters never sleep never runs the controller.  Long-term fairness: a
 * parked waiter sleeps for CR_TURN_NS times the sleepers counted, so one
 * of them times out about every CR_TURN_NS and competes again, in turn
 * (only after a wait that did sleep: see sleep_phase()); if it loses, it
 * parks again and, past starve_ns, sets STARVING as any sleeper does.
 *
 * Memory ordering: the acquiring RMW of each path (the inline OR, each
 * acquiring CAS) is ACQUIRE and the releasing CAS of each unlock path is
 * RELEASE; they pair with each other and are the only orderings the
 * critical sections need, the controller's holder-only fields included.
 * The other transitions (register, leave the queue for a turn, clear
 * WOKEN, set STARVING) and the inline unlock's first load are RELAXED:
 * they order nothing but the word itself, whose modification order
 * already serialises them, and futex_wait re-reads the word in the
 * kernel.  PARK is set and cleared only inside releasing CASes.
 */
#include <errno.h>
#include <limits.h>
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

/*
 * The restriction's controller (see the top of this file).  An epoch of
 * 8,192 acquisitions lasts 1-12 ms when the lock is saturated by 50 ns -
 * 1 us sections, some hundred epochs a second.
 */
#define CR_EPOCH 8192u
#define CR_GAP_MIN 8u /* epochs in a mode before the other is tried */
#define CR_GAP_MAX 128u /* ... after tries that lost, doubling */
#define CR_SLOW_NS 5000u /* slower per acquisition: not saturated */
#define CR_TURN_NS 250000u /* a parked waiter times out every this */
#define CR_TURN_MAX_NS 100000000ull /* ... times the sleepers, up to this */
#define CR_PARK 1u /* cr_state: restricted */
#define CR_TRY 2u /* cr_state: trying the mode it is in */
#define CR_TRY2 4u /* cr_state: ... its second epoch */

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
		   bool parked, uint64_t waited)
{
#if AO_CONFIG_LOCK_STATS
	/* We hold the lock, so we are the only writer. */
	ao__spin_stat_inc(lock->st_phase[phase - 1]);
	if (handoff)
		ao__spin_stat_inc(lock->st_handoffs);
	if (parked)
		ao__spin_stat_inc(lock->st_parked);
	WRITE_ONCE(lock->st_wait, READ_ONCE(lock->st_wait) + waited);
	if (waited > READ_ONCE(lock->st_wait_max))
		WRITE_ONCE(lock->st_wait_max, waited);
#else
	(void)phase;
	(void)handoff;
	(void)parked;
	(void)waited;
	lock->cr_acq++; /* the controller's count, see acquisitions() */
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

enum { SLEEP_TAKEN, SLEEP_HANDOFF, SLEEP_TURN };

/* How long a waiter parks: its turn comes about every CR_TURN_NS. */
static int64_t park_ns(uint32_t v)
{
	uint64_t ns = (uint64_t)CR_TURN_NS * (v / AO_SPIN_WAITER);

	return (int64_t)(ns < CR_TURN_MAX_NS ? ns : CR_TURN_MAX_NS);
}

/*
 * Returns SLEEP_HANDOFF if the lock was handed over, SLEEP_TAKEN if it was
 * taken, SLEEP_TURN if a parked waiter left the queue to compete again.
 */
static int sleep_phase(struct ao_spinlock *lock, uint64_t t0, uint64_t starve,
		       bool *parked)
{
	bool starver = false, timed = false;
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
					return SLEEP_HANDOFF;
				continue;
			}
			if (timed && (v & AO_SPIN_PARK) && !starver) {
				/* Parked, and awake again: our turn to compete
				 * (a starver stays, it is owed the lock). */
				n = (v & ~AO_SPIN_WOKEN) - AO_SPIN_WAITER;
				if (cas(&lock->state, &v, n, __ATOMIC_RELAXED))
					return SLEEP_TURN;
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
			/* Unlocks do not wake while PARK is set: park with a
			 * time-out, so that a lock left free is found. */
			timed = v & AO_SPIN_PARK;
			if (ao_futex_wait(&lock->state, v,
					  timed ? park_ns(v) : -1) == -EAGAIN)
				/* The word moved: we never slept, so it is no
				 * turn of ours.  Leaving the queue here let two
				 * waiters unsettle each other's waits (and the
				 * holder's unlock CAS) for ever, which the spin
				 * model found. */
				timed = false;
			else if (timed)
				*parked = true;
			v = __atomic_load_n(&lock->state, __ATOMIC_RELAXED);
			continue;
		}
		/* Free: a queued waiter may take it even when STARVING. */
		n = ((v | AO_SPIN_LOCKED) & ~AO_SPIN_WOKEN) - AO_SPIN_WAITER;
		if (starver)
			n &= ~AO_SPIN_STARVING;
		if (cas(&lock->state, &v, n, __ATOMIC_ACQUIRE))
			return SLEEP_TAKEN;
	}
}

void ao__spin_lock_slow(struct ao_spinlock *lock, const char *file, int line)
{
	uint64_t t0, starve;
	uint32_t spin_ns = READ_ONCE(lock->spin_ns);
	bool turn = false, parked = false;
	int phase, r = SLEEP_TAKEN;

	/*
	 * The inline path fails only on a held lock, but it may be free by
	 * now.  Taking it at this first look is no wait at all: count it as
	 * the fast path, not as phase 1.
	 */
	if (ao__spin_trylock(lock, file, line))
		return;
	t0 = ao_cycles();
	starve = ao_ns_to_cycles(READ_ONCE(lock->starve_ns));
	for (;;) {
		/* Restricted: park at once, unless it is our turn. */
		if (turn || !(__atomic_load_n(&lock->state, __ATOMIC_RELAXED) &
			      AO_SPIN_PARK)) {
			phase = 1;
			if (spin_ns && spin_phase(lock, turn ? ao_cycles() : t0,
						  ao_ns_to_cycles(spin_ns)))
				goto acquired;
			phase = 2;
			if (yield_phase(lock, READ_ONCE(lock->yields)))
				goto acquired;
		}
		phase = 3;
		r = sleep_phase(lock, t0, starve, &parked);
		if (r != SLEEP_TURN)
			break;
		turn = true;
	}
acquired:
	record(lock, phase, r == SLEEP_HANDOFF, parked, ao_cycles() - t0);
	if (AO_CONFIG_DEBUG)
		ao__spin_debug_acquired(lock, file, line);
}

/*
 * Acquisitions so far, for the controller: with statistics, the sum of
 * their counters (every path counts one); without, a counter of its own.
 * Read by the holder, like every counter here written by holders only.
 */
static uint64_t acquisitions(const struct ao_spinlock *lock)
{
#if AO_CONFIG_LOCK_STATS
	return lock->st_fast + lock->st_phase[0] + lock->st_phase[1] +
	       lock->st_phase[2];
#else
	return lock->cr_acq;
#endif
}

/*
 * The restriction's controller, run by the holder on each contended unlock
 * (see the top of this file): AO_SPIN_PARK if the lock is to be restricted
 * from this unlock on, else 0.  Only the holder reads and writes the cr_*
 * fields: the lock's acquire and release order them.
 */
static uint32_t cr_mode(struct ao_spinlock *lock)
{
	uint32_t mode = READ_ONCE(lock->park), st = lock->cr_state, m;
	uint64_t now, cost, acq, n;

	if (mode != AO_SPIN_PARK_AUTO)
		return mode == AO_SPIN_PARK_ALWAYS ? AO_SPIN_PARK : 0;
	acq = acquisitions(lock);
	n = acq - lock->cr_acq0;
	if (n < CR_EPOCH)
		return st & CR_PARK ? AO_SPIN_PARK : 0;
	/* Cost: cycles per acquisition, in sixteenths. */
	now = ao_cycles();
	cost = (now - lock->cr_t0) * 16 / n;
	lock->cr_t0 = now;
	lock->cr_acq0 = acq;
	m = st & CR_PARK;
	if (cost > ao_ns_to_cycles(CR_SLOW_NS) * 16) {
		/* Not saturated (or the first epoch): start over. */
		st = 0;
		lock->cr_gap = CR_GAP_MIN;
		lock->cr_left = CR_GAP_MIN;
		lock->cr_base = 0;
	} else if (!(st & CR_TRY)) {
		/* In force: a running mean, a quarter for the new epoch. */
		lock->cr_base = lock->cr_base ? (3 * lock->cr_base + cost) / 4 :
						cost;
		if (!--lock->cr_left)
			st = (m ^ CR_PARK) | CR_TRY;
	} else if (!(st & CR_TRY2) &&
		   cost < lock->cr_base + lock->cr_base / 2) {
		/* Not clearly worse after one epoch: run a second. */
		lock->cr_try = cost;
		st |= CR_TRY2;
	} else {
		if (st & CR_TRY2)
			cost = (lock->cr_try + cost) / 2;
		if (cost + cost / 16 < lock->cr_base) {
			/* A sixteenth faster: keep it. */
			st = m;
			lock->cr_base = cost;
			lock->cr_gap = CR_GAP_MIN;
		} else {
			st = m ^ CR_PARK;
			if (lock->cr_gap < CR_GAP_MAX)
				lock->cr_gap *= 2;
		}
		lock->cr_left = lock->cr_gap;
	}
	lock->cr_state = st;
	return st & CR_PARK ? AO_SPIN_PARK : 0;
}

void ao__spin_unlock_slow(struct ao_spinlock *lock, uint32_t v)
{
	uint32_t n, park = 0;
	bool ctl = false;
	int wake;

	do {
		wake = 0;
		if (!(v & AO_SPIN_WAITERS_MASK)) {
			n = 0;
		} else {
			if (!ctl) {
				park = cr_mode(lock);
				ctl = true;
			}
			n = (v & ~AO_SPIN_PARK) | park;
			/* STARVING: keep it held, for a sleeper to claim. */
			if (v & AO_SPIN_STARVING)
				n |= AO_SPIN_HANDOFF;
			else
				n &= ~AO_SPIN_LOCKED;
			if (park & ~v) {
				/* Restricted from now: sleepers without a
				 * time-out must re-read the word and park. */
				wake = INT_MAX;
			} else if (!(v & AO_SPIN_WOKEN) &&
				   (!park || (v & AO_SPIN_STARVING))) {
				n |= AO_SPIN_WOKEN;
				wake = 1;
			}
		}
		/* Release: pairs with the acquire CAS of the next holder. */
	} while (!cas(&lock->state, &v, n, __ATOMIC_RELEASE));
	/*
	 * The lock may already be gone (its next holder may have freed it):
	 * FUTEX_WAKE only hashes the address, it does not touch the memory.
	 */
	if (wake)
		ao_futex_wake(&lock->state, wake);
}

void ao_spin_init(struct ao_spinlock *lock)
{
	*lock = (struct ao_spinlock)AO_SPINLOCK_INIT;
}

int ao_spin_set_tune(struct ao_spinlock *lock, const struct ao_spin_tune *t)
{
	if (!t || t->spin_ns > AO_SPIN_MAX_SPIN_NS ||
	    t->yields > AO_SPIN_MAX_YIELDS ||
	    t->starve_ns > AO_SPIN_MAX_STARVE_NS ||
	    t->park > AO_SPIN_PARK_ALWAYS)
		return -EINVAL;
	WRITE_ONCE(lock->spin_ns, t->spin_ns);
	WRITE_ONCE(lock->yields, t->yields);
	WRITE_ONCE(lock->starve_ns, t->starve_ns);
	WRITE_ONCE(lock->park, t->park);
	return 0;
}

void ao_spin_get_tune(const struct ao_spinlock *lock, struct ao_spin_tune *t)
{
	t->spin_ns = READ_ONCE(lock->spin_ns);
	t->yields = READ_ONCE(lock->yields);
	t->starve_ns = READ_ONCE(lock->starve_ns);
	t->park = READ_ONCE(lock->park);
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
	st->parked = READ_ONCE(lock->st_parked);
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
	WRITE_ONCE(lock->st_parked, 0);
	WRITE_ONCE(lock->st_wait, 0);
	WRITE_ONCE(lock->st_wait_max, 0);
	/* The controller counts with these: its epoch starts again. */
	lock->cr_acq0 = 0;
	lock->cr_t0 = ao_cycles();
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
	a->parked += b->parked;
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
