// SPDX-License-Identifier: MIT
/*
 * Executors: worker threads, two queue disciplines, one interface.
 *
 * Queues
 * ------
 * Both disciplines have one intrusive FIFO, ex->q: single items go onto
 * its lock-free inbox (one CAS, no lock: core/inbox.h), and workers
 * take them under the sync/ three-phase lock (no mutex, no condition
 * variable), which the submitters never touch.  Under AO_EXEC_SHARED
 * it is the only queue: every submit appends to it, and a worker takes a
 * small batch at a time (len / (2 * workers) + 1, at most 16) into a
 * private list, so that with many items queued a worker takes the lock
 * once per batch, and with few queued it takes one item and leaves the rest
 * to the others.  Under AO_EXEC_STEAL it is the injector: it receives the
 * submissions made from outside the pool and the overflow of the workers'
 * deques.  Each worker owns a fixed ring of AO_EXEC_DEQUE_SIZE slots
 * (core/deque.h: Chase-Lev with the PPoPP'13 orderings, no resize).  A
 * submit made on a worker pushes onto that worker's ring with no atomic
 * read-modify-write at all; the worker pops its ring LIFO (the newest item
 * is the one whose data is in cache), and thieves take the oldest item
 * with one CAS.  A full ring moves its older half to the injector in one
 * locked append (as Go's runqputslow and Tokio's push_overflow do); the
 * ring never grows, so no memory reclamation is needed and no submit is
 * refused for lack of ring space.  A worker looks for work in its ring,
 * then the injector (taking len / workers + 1 items, at most half a ring,
 * the rest onto its own ring), then the other rings from a random start.
 * Every 61st look (Go's and Tokio's interval) starts at the injector, so
 * external submissions cannot starve behind a worker that keeps feeding
 * its own ring.
 *
 * Waking
 * ------
 * An idle worker first searches: it spins for spin_ns (20 us by default)
 * looking for work, the pause between two looks doubling from 8 to 256
 * pause instructions, so that a worker that keeps running dry does not
 * pull the inbox's cache line away from the submitter after every push.
 * At most half the workers search at once (Go's and Tokio's throttle);
 * the others spin an eighth as long, uncounted.  A spin that ended in
 * a park halves the next one, and one that finds work restores it, so a
 * worker woken for a lone item now and then parks right after it (see
 * worker_idle() for why that halves the wake-up latency).  When the
 * workers and one outside thread outnumber the CPUs, a spin yields the
 * CPU between looks instead of pausing (spin_pause()), and time during
 * which a yield gave the CPU to another thread is not charged to the
 * spin, up to LENT_MAX_NS (spin_lent(): a runnable worker is moved to an
 * idle CPU by the kernel, a parked one needs a wake).  A worker in its
 * own loop leaves an inbox younger than INBOX_AGE_NS alone while head is
 * empty, so that it takes the producer's line once per batch, not once
 * per item or two ("Batches" above patience()).  Parking is an event
 * count prepare / re-check every queue / wait, so an idle executor sleeps
 * in the kernel and burns no CPU; nothing in it polls on a timer.  A submit
 * publishes its item and then, after a SEQ_CST fence, wakes one sleeper
 * only if (a) some worker is prepared to sleep, (b) no worker is
 * searching, and (c) no wake is already on its way (wake_pending); a
 * submit onto a queue that already held items skips all of it (why that
 * loses nothing: submit()).  When every worker is busy the cost is the
 * fence and three loads; no system call.  A woken worker counts itself
 * as searching and clears wake_pending, so later submits can wake a
 * second sleeper only once the first is up and looking.  When the last
 * searcher finds work it wakes another sleeper if more work is visible
 * (Go's resetspinning), so a burst fans out one worker at a time.
 *
 * Why no wake-up is lost: the submitter does push; fence; load {nsleeping,
 * nsearching, wake_pending}.  A parking worker does prepare (SEQ_CST RMW);
 * nsearching-- (SEQ_CST RMW); wake_pending = 0 (SEQ_CST); fence; load every
 * queue (a first look that submitters cannot see, so a worker that ran dry
 * for a moment costs the producer nothing); then nsleeping++ (SEQ_CST RMW);
 * fence; load every queue again.  Whichever fence comes second in the
 * single total order of SEQ_CST operations sees the other side's stores:
 * either the worker sees the item and does not sleep, or the submitter
 * sees a sleeper, no searcher and no pending wake, and bumps the epoch,
 * which makes the wait return at once.  If the submitter instead saw
 * another searcher or a pending wake, that worker has yet to do its own
 * re-check (it clears the flag or leaves searching the same way), so the
 * item is seen by it.
 * wake_pending is cleared by every worker that prepares to park, so a wake
 * that found nobody to wake cannot leave it set for good.  Work that a
 * worker takes out of sight for a moment is published again the same way:
 * a worker that moves the inbox to the locked list and leaves items there
 * (ao_inbox_take()), or that moves a batch from the injector to its ring
 * (inject_grab()), calls exec_notify() as a submit would.
 * tests/model/exec.pml checks the protocol with spin (README there).
 *
 * Drivers
 * -------
 * What the workers drive besides their queues, the timer service today,
 * is a driver (core/driver.h), and the executor knows it only through
 * that interface: run what is due (driver_tick() between items, the idle
 * spin, a group wait), park through it (park(): the driver picks the
 * timeout, its next deadline, or declines to sleep), and release it when
 * the executor ends.  The driver calls back only ao__exec_unpark() (wake
 * one parked worker) and attaches and detaches itself.  So this file
 * includes no timer header, and another driver (an io ring) would plug in
 * the same way.
 *
 * Bound and backpressure
 * ----------------------
 * With capacity > 0, the slots in use are the items accepted but not
 * started and the slots workers hold; the free ones are a budget, the low
 * half of ex->ext_word, plus what workers gave back (room_freed) since the
 * last taker that found the budget empty folded it in (room_fold()).  A
 * submit takes a slot from the budget by CAS; from outside the pool the
 * same CAS counts the call in (the word's high half, see "Drain"), so a
 * bounded submit costs no more atomic operations than an unbounded one,
 * and give-backs land on another line, so the producer's CAS does not
 * miss after each of them.  A worker keeps the slots
 * of the items it starts as credit, uses them for its own submits first
 * (taking spares a batch at a time when it has none), and gives them back
 * in batches (capacity / (8 * workers), 1 to AO_EXEC_CREDIT_MAX), and all
 * at once when it goes idle or parks in a group wait; so the producer and
 * the workers do not bounce one counter per item.  Held credit only makes
 * the bound stricter (by at most an eighth of it), never looser.  Outside
 * the pool a full executor blocks the submitter (block policy: a spin of
 * spin_ns, RELAX_NS when oversubscribed (room_wait()), then a sleep on an
 * event count until half the capacity is free, so a fast producer sleeps
 * once per half a queue rather than once per give-back) or returns
 * -EAGAIN (fail policy, and ao_exec_try_submit() always).  On one of the
 * executor's own workers a blocking submit cannot wait: if every worker
 * waited for room that only workers can make, the pool would deadlock (a
 * textbook bounded thread pool, the baseline execbench compares with,
 * does).  So a worker that finds the pool full runs the item itself,
 * inline, at once
 * (depth-first, as a work-first scheduler would): it never waits, and the
 * item needs no slot.  The nesting is bounded by AO_EXEC_INLINE_MAX; a
 * deeper submit is queued beyond the bound instead, which can only happen
 * in a chain of tasks that keep submitting into a full pool.
 *
 * Drain, shutdown, nothing lost
 * -----------------------------
 * Every accepted item is counted once as submitted and once as finished,
 * in per-worker counters (only their worker writes them, so the hot path
 * has no shared counter) plus shared ones for external submitters (the
 * high half of ext_word; ext_refused for the refusals, which count as
 * finished; ext_done for strand items a thread outside the pool ran,
 * ao_strand_run_held()).
 * An item is counted submitted before it can be counted finished, so a
 * reader that sums all the finished counters first and then all the
 * submitted ones gets finished <= submitted, with equality only if at some
 * instant between the two passes everything submitted had finished.
 * ao_exec_drain() waits for that on an event count that workers notify as
 * they go idle.  Shutdown stores stopping with SEQ_CST after which every
 * external submit, whose counting RMW precedes its load of stopping, is
 * either refused or counted and waited for; a submit from a worker happens
 * inside an accepted item that is not finished yet, so it cannot be missed
 * either.  ao_exec_destroy() shuts down, drains, and only then tells the
 * workers to exit: every accepted item has run.
 *
 * Orderings are commented where they are used, each with its pair.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/clock.h>
#include <aorta/core/cpu.h>
#include <aorta/core/exec.h>
#include <aorta/sync/eventcount.h>
#include <aorta/sync/spinlock.h>
#include "call_priv.h"
#include "deque.h"
#include "driver.h"
#include "exec_priv.h"
#include "inbox.h"

/* Every this many looks for work, the injector comes first. */
#define GLOBAL_INTERVAL 61u
/* The most items a shared-queue worker takes per lock. */
#define SHARED_BATCH_MAX 16u
/* Retries of a steal that lost a race, per victim. */
#define STEAL_RETRIES 4
/* An idle spin that ended in a park halves the next one, down to
 * spin_ns >> SPIN_FAILS_MAX (see worker_idle()). */
#define SPIN_FAILS_MAX 8u
/* Pause, not yield, for this long at the start of a spin (spin_pause()). */
#define RELAX_NS 2000u
/* Pauses between two looks of a spin: from PAUSES_MIN, doubling. */
#define PAUSES_MIN 8u
#define PAUSES_MAX 256u
/* A worker in its own loop leaves an inbox younger than this alone while
 * it can (see "Batches" above patience()). */
#define INBOX_AGE_NS 1000u
/* A yield of an idle spin that took longer than this gave the CPU to
 * another thread; such time is not charged to the spin, up to LENT_MAX_NS
 * in all (spin_lent()). */
#define LENT_NS 4000u
#define LENT_MAX_NS 4000000u
/* With a driver attached, a busy worker looks at the clock about this
 * often: every k items, k doubling (to DRIVER_EVERY_MAX) while items are
 * short and halving while they are long (driver_tick()). */
#define DRIVER_CHECK_NS 10000u
#define DRIVER_EVERY_MAX 64u

struct ao_worker {
	struct ao_deque dq; /* AO_EXEC_STEAL: this worker's ring */
	struct ao_exec *ex;
	struct ao_work *local; /* AO_EXEC_SHARED: the batch being run */
	uint64_t rng;
	uint32_t tick;
	uint32_t depth; /* inline runs in progress */
	uint32_t spin_fails; /* idle spins in a row that found nothing */
	uint32_t drv_count; /* items until the next run of the driver */
	uint32_t drv_every; /* k, see DRIVER_CHECK_NS */
	uint64_t drv_last; /* the clock at the last run */
	int64_t credit; /* slots held, not yet given back (room_give()) */
	unsigned int id;
	bool searching;
	bool started;
	pthread_t thread;
	/* Written by this worker only (relaxed store of load + 1), read by
	 * the statistics and by drain. */
	uint64_t sub; /* items it accepted */
	uint64_t done; /* items it finished (executed = done + inlined) */
	uint64_t taken; /* items it took from a queue (or a strand) */
	uint64_t inlined, stolen, overflowed, parks, wakeups;
	/* Written by thieves. */
	uint64_t stolen_from __ao_cacheline_aligned;
} __ao_cacheline_aligned;

struct ao_exec {
	struct ao_exec_config cfg;
	unsigned int nworkers;
	bool oversub; /* workers + one outside thread > usable CPUs */
	int64_t capacity; /* 0: unbounded */
	int64_t room_resume; /* free slots a blocked submitter waits for */
	int64_t credit_batch;
	uint64_t spin_cycles;
	uint64_t relax_cycles; /* RELAX_NS */
	uint64_t inbox_age_cycles; /* INBOX_AGE_NS */
	uint64_t lent_cycles, lent_max_cycles; /* LENT_NS, LENT_MAX_NS */
	struct ao_worker *workers;
	uint32_t stopping; /* shutdown started: refuse submits */
	uint32_t exiting; /* drained after shutdown: workers return */
	char name[16];
	struct ao_driver *drv; /* the driver (core/driver.h), or NULL */
	struct ao_driver *drv_dead; /* detached ones, released with us */

	struct ao_inbox q __ao_cacheline_aligned;

	/* Wake state (see "Waking" above). */
	uint32_t nsearching __ao_cacheline_aligned;
	uint32_t nsleeping; /* parked, or about to (after a first re-check) */
	uint32_t wake_pending;
	struct ao_eventcount idle_ec;

	/*
	 * External calls counted in (high 32 bits, modulo 2^32) and, with
	 * capacity > 0, the bound's budget of free slots (low 32 bits, see
	 * "Bound"): one word, so that a bounded external submit counts
	 * itself in and takes its slot with one CAS.  ext_left counts the
	 * calls out, in 64 bits; the calls in progress, ext_word's count
	 * minus ext_left modulo 2^32, are far fewer than 2^32
	 * (ext_entered()).
	 */
	uint64_t ext_word __ao_cacheline_aligned;
	uint64_t ext_left; /* external calls that have returned (destroy) */

	/* Slots given back by workers, and how many of those have been
	 * moved into ext_word's budget (room_fold()); a line of their own,
	 * so that give-backs do not take the submitters' line away. */
	int64_t room_freed __ao_cacheline_aligned;
	int64_t room_folded;
	struct ao_eventcount room_ec;

	uint64_t ext_refused __ao_cacheline_aligned;
	/* Accepted items that ran off the pool (a strand turn its submitter
	 * held, ao_strand_run_held()): finished, like the refusals. */
	uint64_t ext_done;
	uint32_t offpool; /* threads in ao__exec_finished_off() */
	uint64_t rejected;
	uint64_t notifies;

	/* Drainers. */
	uint32_t drainers __ao_cacheline_aligned;
	struct ao_eventcount drain_ec;
};

/* The worker the calling thread is, if any. */
static __thread struct ao_worker *cur_worker
	__attribute__((tls_model("initial-exec")));

#define OWN_INC(f) __atomic_store_n(&(f), (f) + 1, __ATOMIC_RELAXED)
#define LOAD(f) __atomic_load_n(&(f), __ATOMIC_RELAXED)

/* ext_word: one external call counted in; the budget of free slots. */
#define EXT_ONE (1ull << 32)
static inline int64_t budget_of(uint64_t word)
{
	return (int64_t)(uint32_t)word;
}

/*
 * External calls counted in, in 64 bits; *left gets the calls counted out.
 * ext_left is read first, ext_word after it: the calls in progress at the
 * second read are (word's count - left) modulo 2^32, as calls leave after
 * they enter.  ACQUIRE pairs with the RELEASE in ext_leave(); the SEQ_CST
 * load with the SEQ_CST RMWs that count calls in (accept_external()).
 */
static inline uint64_t ext_entered(const struct ao_exec *ex, uint64_t *left)
{
	uint64_t l = __atomic_load_n(&ex->ext_left, __ATOMIC_ACQUIRE);
	uint64_t w = __atomic_load_n(&ex->ext_word, __ATOMIC_SEQ_CST);

	*left = l;
	return l + (uint32_t)((uint32_t)(w >> 32) - (uint32_t)l);
}

static inline struct ao_worker *worker_of(const struct ao_exec *ex)
{
	struct ao_worker *w = cur_worker;

	return w && w->ex == ex ? w : NULL;
}

/* ---- waking ---- */

/* Is there work any worker could take?  Loads only. */
static bool work_visible(struct ao_exec *ex)
{
	if (ao_inbox_peek(&ex->q))
		return true;
	if (ex->cfg.kind == AO_EXEC_STEAL) {
		for (unsigned int i = 0; i < ex->nworkers; i++)
			if (ao_deque_size(&ex->workers[i].dq))
				return true;
	}
	return false;
}

/* After publishing work: wake one sleeper if nobody is looking. */
static void exec_notify(struct ao_exec *ex)
{
	/* SEQ_CST fence: the item pushed before this call is ordered before
	 * the loads below (StoreLoad); pairs with the SEQ_CST RMWs, store
	 * and fences a parking worker makes before its second re-check of
	 * the queues (park_prepare()). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!LOAD(ex->nsleeping) || LOAD(ex->nsearching) ||
	    LOAD(ex->wake_pending))
		return;
	/* One wake at a time: whoever sets the flag wakes; it is cleared
	 * by the worker that wakes up (or by any worker that parks). */
	if (__atomic_exchange_n(&ex->wake_pending, 1, __ATOMIC_SEQ_CST))
		return;
	__atomic_fetch_add(&ex->notifies, 1, __ATOMIC_RELAXED);
	ao__ec_wake(&ex->idle_ec, 1);
}

/* Tell drainers to look again (an item finished, or one was refused). */
static void notify_drainers(struct ao_exec *ex)
{
	/* SEQ_CST fence: our finished/refused count is ordered before the
	 * load of drainers (StoreLoad); pairs with the SEQ_CST RMWs on
	 * drainers and drain_ec in ao_exec_drain() before it sums. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (LOAD(ex->drainers))
		ao_ec_notify_all(&ex->drain_ec);
}

bool ao__exec_blocking(const struct ao_exec *ex)
{
	return ex->cfg.policy == AO_EXEC_BLOCK;
}

void ao__exec_wake_all(struct ao_exec *ex)
{
	ao_ec_notify_all(&ex->idle_ec);
}

/*
 * One pause of a spin that waits for other threads to make progress (an
 * idle worker waiting for work, a submitter waiting for room).  With a CPU
 * for every worker and for one thread feeding them, a few pause
 * instructions.  Oversubscribed (2 workers and the producer on 2 CPUs),
 * the spinner would take a CPU from the very thread it waits for, which
 * then makes no progress until the scheduler's next tick; so it yields,
 * which returns at once when nothing else is runnable on this CPU.  The
 * spins stay bounded in time and end in a park either way.  Only after the
 * first RELAX_NS of a spin: a yield pushes the thread's EEVDF deadline
 * back, so a worker that yielded just before it parked is later woken
 * without preempting its waker (the wake-up latency that worker_idle()'s
 * shrinking spin avoids), and a short spin catches work handed over within
 * microseconds without a trip through the scheduler.  True if it yielded.
 */
static inline bool spin_pause(const struct ao_exec *ex, bool may_yield,
			      unsigned int *pauses)
{
	if (may_yield && ex->oversub) {
		sched_yield();
		return true;
	}
	for (unsigned int i = 0; i < *pauses; i++)
		cpu_relax();
	if (*pauses < PAUSES_MAX)
		*pauses *= 2;
	return false;
}

/* ---- the bound ---- */

/*
 * Slots are taken from the budget in ext_word, by CAS, and given back to
 * room_freed, by RMW on another line; the taker that finds the budget
 * empty folds what was given back into it.  Free slots are
 * budget + room_freed - room_folded, which is what the bound counts (and
 * never more than capacity).  So a producer's CAS finds its line where it
 * left it, and pays one miss per fold (about once per capacity minus
 * queued items), not one per give-back.
 */

/* Move the slots given back since the last fold into the budget; false if
 * there were none (true if another taker folded them meanwhile). */
static bool room_fold(struct ao_exec *ex)
{
	/* SEQ_CST, as every access to the bound's counters: they pair with
	 * each other and with room_wait()'s prepare (see there). */
	int64_t s = __atomic_load_n(&ex->room_folded, __ATOMIC_SEQ_CST);
	int64_t f = __atomic_load_n(&ex->room_freed, __ATOMIC_SEQ_CST);

	if (f <= s)
		return false;
	/* room_folded only grows, so no ABA; the winner adds f - s. */
	if (!__atomic_compare_exchange_n(&ex->room_folded, &s, f, false,
					 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return true;
	__atomic_fetch_add(&ex->ext_word, (uint64_t)(f - s), __ATOMIC_SEQ_CST);
	/* A waiter that read room_folded after our CAS and the budget
	 * before our add saw the slots nowhere: wake it (the fence in
	 * ao_ec_has_waiters() pairs with its prepare). */
	ao_ec_notify_all(&ex->room_ec);
	return true;
}

/* Take up to want capacity slots; how many were free.  With count, also
 * count an external call in with the same CAS (only when a slot is
 * taken). */
static int64_t room_take_count(struct ao_exec *ex, int64_t want, bool count)
{
	/* Relaxed: only the CAS's guess; the CAS is SEQ_CST. */
	uint64_t v = __atomic_load_n(&ex->ext_word, __ATOMIC_RELAXED);

	for (;;) {
		int64_t n = budget_of(v);

		if (!n) {
			if (!room_fold(ex))
				return 0;
			v = __atomic_load_n(&ex->ext_word, __ATOMIC_RELAXED);
			continue;
		}
		if (n > want)
			n = want;
		if (__atomic_compare_exchange_n(
			    &ex->ext_word, &v,
			    v - (uint64_t)n + (count ? EXT_ONE : 0), true,
			    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			return n;
	}
}

static int64_t room_take(struct ao_exec *ex, int64_t want)
{
	return room_take_count(ex, want, false);
}

/* Free slots now (see above); clamped at 0, as borrowed slots
 * (room_borrow()) may make it negative. */
static int64_t room_free(struct ao_exec *ex)
{
	int64_t f = __atomic_load_n(&ex->room_folded, __ATOMIC_SEQ_CST);

	f = __atomic_load_n(&ex->room_freed, __ATOMIC_SEQ_CST) - f;
	f += budget_of(__atomic_load_n(&ex->ext_word, __ATOMIC_SEQ_CST));
	return f > 0 ? f : 0;
}

/* Give n slots back. */
static void room_give(struct ao_exec *ex, int64_t n)
{
	/* SEQ_CST RMW, then the fence in ao_ec_has_waiters(): pairs with
	 * room_wait()'s prepare and re-check.  A blocked submitter waits
	 * for half the capacity (room_resume), so most give-backs wake
	 * nobody and read nothing more. */
	__atomic_fetch_add(&ex->room_freed, n, __ATOMIC_SEQ_CST);
	if (ao_ec_has_waiters(&ex->room_ec) && room_free(ex) >= ex->room_resume)
		ao_ec_notify_all(&ex->room_ec);
}

/* Queue one item beyond the bound: a slot owed, paid back when the item
 * starts and its slot is given back like any other. */
static void room_borrow(struct ao_exec *ex)
{
	__atomic_fetch_sub(&ex->room_freed, 1, __ATOMIC_SEQ_CST);
}

/* Take one capacity slot if one is free. */
static bool room_try(struct ao_exec *ex)
{
	return room_take(ex, 1) == 1;
}

/* External submitter: take a slot, waiting for one if blocking. */
static int room_wait(struct ao_exec *ex, bool blocking)
{
	for (;;) {
		uint32_t key;
		uint64_t end, relax_end, now;
		unsigned int pauses = PAUSES_MIN;

		if (room_try(ex))
			return 0;
		if (!blocking)
			return -EAGAIN;
		/*
		 * Workers give room back every few items: spin a little
		 * before paying two system calls to sleep and be woken.
		 * Oversubscribed, only for RELAX_NS, with no yields: the
		 * pool is full, so the workers have work and need CPU, and a
		 * submitter that spins or yields keeps its CPU looking busy,
		 * so the kernel does not move a worker onto it; asleep, it
		 * leaves that CPU to a worker (a longer spin left the two
		 * workers sharing one CPU: docs/PERFORMANCE.md).
		 */
		now = ao_cycles();
		relax_end = now + ex->relax_cycles;
		end = ex->oversub ? relax_end : now + ex->spin_cycles;
		while (!room_free(ex) && !LOAD(ex->stopping) &&
		       (now = ao_cycles()) < end)
			spin_pause(ex, now >= relax_end, &pauses);
		if (room_try(ex))
			return 0;
		/* Sleep until half the capacity is free (or shutdown), not
		 * just one slot: one sleep and one wake per half a queue,
		 * not per batch a worker gives back.  SEQ_CST RMW in
		 * prepare, then SEQ_CST loads: either we see the room a
		 * worker gave back, or its notify sees us. */
		key = ao_ec_prepare(&ex->room_ec);
		if (__atomic_load_n(&ex->stopping, __ATOMIC_SEQ_CST)) {
			ao_ec_cancel(&ex->room_ec);
			return -ESHUTDOWN;
		}
		if (room_free(ex) >= ex->room_resume) {
			ao_ec_cancel(&ex->room_ec);
			continue;
		}
		ao_ec_wait(&ex->room_ec, key, -1);
	}
}

/* Give the slots of started items back. */
static void flush_credit(struct ao_worker *w)
{
	if (!w->credit)
		return;
	room_give(w->ex, w->credit);
	w->credit = 0;
}

/*
 * A worker's credit is the capacity slots it holds that no queued item
 * occupies: those of items it started, and spares it took in a batch.  Its
 * own submits use them first, so a worker that spawns as much as it runs
 * (fork-join, a tree) touches the shared counter once per batch, not twice
 * per item.  Fewer than credit_batch are held; the worker going idle gives
 * them all back.
 */
static inline void item_started(struct ao_worker *w)
{
	struct ao_exec *ex = w->ex;

	OWN_INC(w->taken);
	if (!ex->capacity)
		return;
	if (++w->credit >= ex->credit_batch)
		flush_credit(w);
}

/* ---- finding work ---- */

static inline uint32_t worker_rand(struct ao_worker *w)
{
	/* xorshift64 */
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return (uint32_t)(w->rng >> 32);
}

/*
 * Batches.  A detach takes the inbox's line from the submitter, whose next
 * push then waits for it to come back.  With the queue short (a bounded
 * executor, or workers as fast as the producer) the workers would detach
 * the inbox as soon as it holds an item or two, and the producer would pay
 * that miss on nearly every submit, settling at a fraction of its speed
 * with a few items per detach (docs/PERFORMANCE.md has the measurements).
 * So a worker in its own loop (patient) leaves an inbox alone until its
 * oldest item is INBOX_AGE_NS old, and looks again later, as its idle
 * spin does anyway: a batch then holds what the producer pushed in that
 * time.  The worker cannot sleep on it meanwhile: work_visible() still
 * sees the inbox, so park_prepare() calls the park off and the take after
 * it has no patience; so an item waits at most INBOX_AGE_NS more, and
 * only while a worker is already looking.  A worker woken from sleep, a
 * group wait and ao_exec_run_one() take it at once.
 */

/* How young an inbox a take may leave to grow (ao_inbox_take()). */
static inline uint64_t patience(const struct ao_exec *ex, bool patient)
{
	return patient ? ex->inbox_age_cycles : 0;
}

static struct ao_work *shared_find(struct ao_worker *w, bool patient)
{
	struct ao_exec *ex = w->ex;
	struct ao_work *x = w->local;
	unsigned int n;
	bool hidden;

	if (x) {
		w->local = x->next;
		return x;
	}
	x = ao_inbox_take(&ex->q, 2 * (uint64_t)ex->nworkers, SHARED_BATCH_MAX,
			  &w->local, &n, &hidden, patience(ex, patient));
	if (hidden)
		exec_notify(ex);
	return x;
}

/* Take a batch from the injector: run the first, ring the rest. */
static struct ao_work *inject_grab(struct ao_worker *w, bool patient)
{
	struct ao_exec *ex = w->ex;
	int64_t room = AO_DEQUE_SIZE - ao_deque_size(&w->dq);
	struct ao_work *x, *rest = NULL;
	unsigned int n;
	bool hidden;

	if (room > AO_DEQUE_SIZE / 2)
		room = AO_DEQUE_SIZE / 2;
	x = ao_inbox_take(&ex->q, ex->nworkers, (uint64_t)room + 1, &rest, &n,
			  &hidden, patience(ex, patient));
	if (!rest) {
		if (hidden)
			exec_notify(ex); /* see ao_inbox_take() */
		return x;
	}
	while (rest) {
		struct ao_work *next = rest->next;

		/* Cannot fail: only we push, and room was measured first
		 * (thieves only make more). */
		ao_deque_push(&w->dq, rest);
		rest = next;
	}
	/*
	 * Between ao_inbox_take() and the pushes the items were in neither
	 * queue, so a worker parking meanwhile may have re-checked and
	 * missed them; the submitters that relied on it have gone.  Publish
	 * them as a submit would: if that worker is asleep now, wake it
	 * (this is what a searcher's stop_searching() does anyway, but this
	 * worker may not be searching, and may be about to run an item that
	 * blocks until the ones it holds have run).
	 */
	exec_notify(ex);
	return x;
}

static struct ao_work *steal_any(struct ao_worker *w)
{
	struct ao_exec *ex = w->ex;
	unsigned int n = ex->nworkers;
	unsigned int start;

	if (n == 1)
		return NULL;
	start = worker_rand(w) % n;
	for (unsigned int i = 0; i < n; i++) {
		struct ao_worker *v = &ex->workers[(start + i) % n];

		if (v == w)
			continue;
		for (int tries = 0; tries < STEAL_RETRIES; tries++) {
			struct ao_work *x;
			enum ao_steal r = ao_deque_steal(&v->dq, &x);

			if (r == AO_STEAL_OK) {
				OWN_INC(w->stolen);
				__atomic_fetch_add(&v->stolen_from, 1,
						   __ATOMIC_RELAXED);
				return x;
			}
			if (r == AO_STEAL_EMPTY)
				break;
			cpu_relax();
		}
	}
	return NULL;
}

/* steal_find() past its common case: the injector's turn (due), or an
 * empty ring.  Out of line, so the common case needs no stack frame. */
static __attribute__((noinline)) struct ao_work *
steal_find_slow(struct ao_worker *w, bool patient, bool due)
{
	struct ao_work *x;

	if (due)
		w->tick = GLOBAL_INTERVAL - 1;
	x = inject_grab(w, patient);
	if (!x && due)
		x = ao_deque_pop(&w->dq);
	return x ? x : steal_any(w);
}

static inline __attribute__((always_inline)) struct ao_work *
steal_find(struct ao_worker *w, bool patient)
{
	struct ao_work *x;

	/* A countdown, not ++tick % GLOBAL_INTERVAL: no division on the
	 * path of every item.  Every GLOBAL_INTERVAL-th look starts at the
	 * injector, so a worker busy with its own ring does not starve it. */
	if (unlikely(!w->tick--))
		return steal_find_slow(w, patient, true);
	x = ao_deque_pop(&w->dq);
	if (likely(x))
		return x;
	return steal_find_slow(w, patient, false);
}

/*
 * The next item for w to run, or NULL; counts it as started.  patient: w
 * is in its own loop and will look again soon, so it may leave a young
 * inbox to grow (see "Batches" above patience()).
 */
static inline __attribute__((always_inline)) struct ao_work *
find_work(struct ao_worker *w, bool patient)
{
	struct ao_work *x;

	if (w->ex->cfg.kind == AO_EXEC_STEAL)
		x = steal_find(w, patient);
	else
		x = shared_find(w, patient);
	if (x)
		item_started(w);
	return x;
}

static inline void run_item(struct ao_worker *w, struct ao_work *x)
{
	x->fn(x);
	/* RELEASE: the item's effects and every submit it made (counted in
	 * sub before) come before this count; pairs with the ACQUIRE loads
	 * in exec_quiescent(). */
	__atomic_store_n(&w->done, w->done + 1, __ATOMIC_RELEASE);
}

/* ---- idle: search, then park ---- */

static void stop_searching(struct ao_worker *w)
{
	struct ao_exec *ex = w->ex;

	w->searching = false;
	/* SEQ_CST RMW: pairs with exec_notify()'s fence, as in park().  The
	 * last searcher to find work wakes another sleeper if there is more
	 * (submits made while we searched relied on us). */
	if (__atomic_fetch_sub(&ex->nsearching, 1, __ATOMIC_SEQ_CST) == 1 &&
	    work_visible(ex))
		exec_notify(ex);
}

static void start_searching(struct ao_worker *w)
{
	struct ao_exec *ex = w->ex;

	__atomic_fetch_add(&ex->nsearching, 1, __ATOMIC_SEQ_CST);
	w->searching = true;
	/* Up and looking: a later submit may wake someone else. */
	__atomic_store_n(&ex->wake_pending, 0, __ATOMIC_SEQ_CST);
}

/*
 * The first half of a park, shared by idle workers and group waits: get a
 * key, leave searching, and re-check twice.  The first re-check happens
 * before submitters can see us (nsleeping), so the common case of a worker
 * that ran dry for a moment and finds new work costs the producer nothing;
 * only a worker that found nothing becomes visible, and re-checks once
 * more so that a submit that did not see it is seen by it.  Returns true
 * with the key in *key if the caller may sleep (then it must call
 * park_finish()), false if it must not (prepare already cancelled).
 */
static bool park_prepare(struct ao_worker *w, bool (*cond)(void *arg),
			 void *arg, uint32_t *key)
{
	struct ao_exec *ex = w->ex;

	*key = ao_ec_prepare(&ex->idle_ec);
	if (w->searching) {
		w->searching = false;
		__atomic_fetch_sub(&ex->nsearching, 1, __ATOMIC_SEQ_CST);
	}
	__atomic_store_n(&ex->wake_pending, 0, __ATOMIC_SEQ_CST);
	for (int pass = 0; pass < 2; pass++) {
		if (pass)
			__atomic_fetch_add(&ex->nsleeping, 1, __ATOMIC_SEQ_CST);
		/* SEQ_CST fence: the prepare, the nsearching decrement, the
		 * flag clear and (second pass) the nsleeping increment are
		 * ordered before the loads of the queues below (StoreLoad);
		 * pairs with the fence at the start of exec_notify(). */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&ex->exiting, __ATOMIC_ACQUIRE) ||
		    work_visible(ex) || (cond && cond(arg))) {
			if (pass)
				__atomic_fetch_sub(&ex->nsleeping, 1,
						   __ATOMIC_RELAXED);
			ao_ec_cancel(&ex->idle_ec);
			return false;
		}
	}
	return true;
}

/* The second half: sleep until a notify after park_prepare(), or for
 * timeout_ns (< 0: no timeout). */
static void park_finish(struct ao_worker *w, uint32_t key, int64_t timeout_ns)
{
	struct ao_exec *ex = w->ex;

	OWN_INC(w->parks);
	ao_ec_wait(&ex->idle_ec, key, timeout_ns);
	__atomic_fetch_sub(&ex->nsleeping, 1, __ATOMIC_RELAXED);
	OWN_INC(w->wakeups);
}

/*
 * A park that park_prepare() called off because it saw work: the worker
 * stays up, but it is no longer searching, and submitters may have relied
 * on it.  One that saw it searching skipped its wake (as with a searcher
 * that finds work, stop_searching()); one that saw it among the sleepers
 * set wake_pending for a wake-up that this worker has now swallowed, and
 * until the flag is cleared every later submit skips its wake too.  If
 * this worker then runs one item that blocks until another one runs, the
 * rest would wait for it while the other workers sleep (seen under TSan:
 * two gate items, one worker in the first, the second never taken).  So
 * clear the flag and, if work is still visible, wake a sleeper for it.
 * SEQ_CST store: as in park_prepare(); exec_notify() has its own fence.
 */
static void park_called_off(struct ao_exec *ex)
{
	__atomic_store_n(&ex->wake_pending, 0, __ATOMIC_SEQ_CST);
	if (work_visible(ex))
		exec_notify(ex);
}

enum { PARK_EXIT, PARK_SLEPT, PARK_CALLED_OFF };

/* The executor's side of a park through a driver (struct ao_park). */
struct park_wait {
	struct ao_park park;
	struct ao_worker *w;
	uint32_t key;
	bool slept;
};

static void park_wait(struct ao_park *p, int64_t timeout_ns)
{
	struct park_wait *pw = container_of(p, struct park_wait, park);

	if (pw->slept)
		return; /* at most once per park */
	pw->slept = true;
	park_finish(pw->w, pw->key, timeout_ns);
}

/*
 * The one park of a worker, idle (worker_idle()) or waiting for a group
 * (ao__exec_park_worker(), with its condition cond): park_prepare(), which
 * may call it off, then sleep until notified.  With a driver attached the
 * sleep goes through it (core/driver.h): the driver picks the timeout, its
 * next deadline, or does not sleep at all when something is due, and it
 * reads its state after our prepare, so a change that needs a worker
 * earlier is either seen by it or sees us and wakes us
 * (ao__exec_unpark()).  What follows a park is the caller's.
 */
static int park(struct ao_worker *w, bool (*cond)(void *arg), void *arg)
{
	struct ao_exec *ex = w->ex;
	struct park_wait pw = { .park.wait = park_wait, .w = w };
	struct ao_driver *d;

	if (!park_prepare(w, cond, arg, &pw.key))
		return __atomic_load_n(&ex->exiting, __ATOMIC_ACQUIRE) ?
			       PARK_EXIT :
			       PARK_CALLED_OFF;
	d = ao__exec_driver(ex);
	if (d)
		d->ops->park(d, &pw.park);
	else
		park_wait(&pw.park, -1);
	if (pw.slept)
		return PARK_SLEPT;
	/* The driver has something due: do not sleep. */
	__atomic_fetch_sub(&ex->nsleeping, 1, __ATOMIC_RELAXED);
	ao_ec_cancel(&ex->idle_ec);
	return PARK_CALLED_OFF;
}

/*
 * An idle spin's yield gave the CPU to another thread for lent cycles:
 * return the spin's new end.  That time is not charged to the spin (up to
 * cap): on two CPUs with two workers and a busy producer, a worker that
 * shares its CPU with the producer would otherwise find its budget gone
 * after one yield, park, and be woken again by the producer's next push
 * onto an empty queue, a futex wake (and a switch back) per batch; one that
 * stays runnable costs a yield per scheduler slice, and the kernel moves it
 * to an idle CPU by itself, where a parked worker needs a wake.  It stops
 * searching, though: while it waits for a CPU it must not hold back the
 * wakes of sleepers that could run on others (stop_searching() wakes one
 * if work is visible).
 */
static uint64_t spin_lent(struct ao_worker *w, uint64_t end, uint64_t lent,
			  uint64_t now, uint64_t cap)
{
	if (w->searching)
		stop_searching(w);
	return now < cap ? end + lent : end;
}

/* No work: search, park; return the next item, or NULL to exit. */
static struct ao_work *worker_idle(struct ao_worker *w)
{
	struct ao_exec *ex = w->ex;
	struct ao_work *x;

	flush_credit(w);
	notify_drainers(ex);
	for (;;) {
		uint64_t budget, now, relax_end, end, cap, before;
		unsigned int pauses = PAUSES_MIN;
		bool yielded;
		int r;

		if (!w->searching && 2 * LOAD(ex->nsearching) < ex->nworkers)
			start_searching(w);
		/*
		 * A searcher spins the whole budget.  The others (not
		 * counted, so submits still wake sleepers for them) spin an
		 * eighth of it: when work trickles in from a producer a
		 * little slower than the workers, a worker that ran dry
		 * would otherwise enter park() between every two items,
		 * and each time the producer would see a prepared waiter
		 * and pay a futex wake for it.
		 *
		 * The budget halves with every spin in a row that ended in
		 * a park, and is whole again once a spin finds work.  A
		 * worker woken now and then for a lone item (the wake-up
		 * latency case) thus parks straight after it; one that
		 * spun before sleeping is, on Linux 6.x (EEVDF), woken
		 * without preempting the thread that woke it and waits for
		 * that thread to block, several times the wake-up latency
		 * (docs/PERFORMANCE.md).
		 */
		budget = w->searching ? ex->spin_cycles : ex->spin_cycles / 8;
		budget >>= w->spin_fails;
		now = ao_cycles();
		relax_end = now + ex->relax_cycles;
		end = now + budget;
		cap = now + ex->lent_max_cycles;
		do {
			struct ao_driver *d = ao__exec_driver(ex);

			if (work_visible(ex)) {
				x = find_work(w, true);
				if (x) {
					if (w->searching)
						stop_searching(w);
					w->spin_fails = 0;
					return x;
				}
			}
			/* The driver's work that is due, or about to be
			 * (a precise timer): run it here.  The spin goes on
			 * as it was: a wake-up for a deadline is not a sign
			 * that items follow (a full spin after each would
			 * cost more CPU than the expiry itself). */
			if (d)
				d->ops->run(d, 0, true);
			before = now;
			yielded = spin_pause(ex, now >= relax_end, &pauses);
			now = ao_cycles();
			if (yielded && now - before > ex->lent_cycles)
				end = spin_lent(w, end, now - before, now, cap);
		} while (now < end && !LOAD(ex->exiting));
		if (w->spin_fails < SPIN_FAILS_MAX)
			w->spin_fails++;
		r = park(w, NULL, NULL);
		if (r == PARK_EXIT)
			return NULL;
		if (r == PARK_SLEPT)
			start_searching(w);
		x = find_work(w, false);
		if (x) {
			if (w->searching)
				stop_searching(w);
			else if (r == PARK_CALLED_OFF)
				park_called_off(ex);
			return x;
		}
	}
}

static void pin_worker(struct ao_worker *w)
{
	cpu_set_t allowed, one;
	unsigned int k, seen = 0;
	int n;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return;
	n = CPU_COUNT(&allowed);
	if (n <= 0)
		return;
	k = w->id % (unsigned int)n;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		if (seen++ == k) {
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			pthread_setaffinity_np(pthread_self(), sizeof(one),
					       &one);
			return;
		}
	}
}

/*
 * Between items, with a driver attached: every drv_every items, look at
 * the clock and run what is due, ahead of the queued items.  drv_every
 * adapts so that the looks come about every DRIVER_CHECK_NS: one clock
 * read per 10 us of work costs nothing, and a due timer waits at most
 * that (or one long item).
 */
static __attribute__((noinline)) void driver_tick(struct ao_worker *w)
{
	struct ao_driver *drv = ao__exec_driver(w->ex);
	uint64_t now = ao_now_ns(), d = now - w->drv_last;

	w->drv_last = now;
	if (d < DRIVER_CHECK_NS / 2 && w->drv_every < DRIVER_EVERY_MAX)
		w->drv_every *= 2;
	else if (d > DRIVER_CHECK_NS && w->drv_every > 1)
		w->drv_every /= 2;
	w->drv_count = w->drv_every;
	if (drv)
		drv->ops->run(drv, now, false);
}

static void *worker_main(void *arg)
{
	struct ao_worker *w = arg;
	struct ao_exec *ex = w->ex;
	char name[32];

	cur_worker = w;
	/* The kernel keeps 15 characters of a thread's name. */
	snprintf(name, sizeof(name), "%s%u", ex->name, w->id);
	name[15] = '\0';
	pthread_setname_np(pthread_self(), name);
	if (ex->cfg.pin)
		pin_worker(w);
	for (;;) {
		struct ao_work *x = find_work(w, true);

		if (!x) {
			x = worker_idle(w);
			if (!x)
				break;
		}
		run_item(w, x);
		if (unlikely(LOAD(ex->drv) != NULL) && !--w->drv_count)
			driver_tick(w);
	}
	cur_worker = NULL;
	return NULL;
}

/* ---- submitting ---- */

/* A full ring: the older half goes to the injector for the others, the
 * new item stays here where its data is warm.  Out of line: rare. */
static __attribute__((noinline)) bool push_overflow(struct ao_worker *w,
						    struct ao_work *work)
{
	struct ao_exec *ex = w->ex;
	struct ao_work *first, *last;
	unsigned int n;

	n = ao_deque_take_half(&w->dq, &first, &last);
	if (n) {
		ao_inbox_push_list(&ex->q, first, last, n);
		__atomic_store_n(&w->overflowed, w->overflowed + n,
				 __ATOMIC_RELAXED);
		if (ao_deque_push(&w->dq, work))
			return true;
	}
	ao_inbox_push(&ex->q, work);
	OWN_INC(w->overflowed);
	return true;
}

/* Queue a worker's submission; true if the queue it went to was empty
 * (see submit()). */
static inline bool push_local(struct ao_worker *w, struct ao_work *work)
{
	int64_t size;

	if (w->ex->cfg.kind == AO_EXEC_SHARED)
		return ao_inbox_push(&w->ex->q, work);
	size = ao_deque_push_size(&w->dq, work);
	if (likely(size >= 0))
		return size == 0;
	return push_overflow(w, work);
}

/*
 * An external call may still be touching ex (a notify after its push, a
 * refusal's notify of the drainers) when its item has already run or its
 * refusal has let drain finish, so destroy must not free ex under it.  The
 * call's counting RMW on ext_word (accept_external(), or
 * ao__exec_push_forced()) is its entry, and ext_leave() counts it out:
 * destroy waits until the two counts are equal.  That is one RMW per call
 * where an in-progress counter would take two.
 */
static inline void ext_leave(struct ao_exec *ex)
{
	/* The last access to ex of this call.  RELEASE: every access
	 * before it comes first; pairs with the ACQUIRE load in
	 * ao_exec_destroy(). */
	__atomic_fetch_add(&ex->ext_left, 1, __ATOMIC_RELEASE);
}

static void refuse_external(struct ao_exec *ex)
{
	/* Counted finished after it was counted submitted (same thread). */
	__atomic_fetch_add(&ex->ext_refused, 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&ex->rejected, 1, __ATOMIC_RELAXED);
	notify_drainers(ex);
}

/* Bounded: count an external call in and take a slot with one CAS if the
 * budget holds one; false if it looked empty or the CAS lost a race. */
static inline bool ext_take_fast(struct ao_exec *ex)
{
	/* Relaxed: only the CAS's guess; the CAS is SEQ_CST. */
	uint64_t v = __atomic_load_n(&ex->ext_word, __ATOMIC_RELAXED);

	return budget_of(v) &&
	       __atomic_compare_exchange_n(&ex->ext_word, &v, v - 1 + EXT_ONE,
					   false, __ATOMIC_SEQ_CST,
					   __ATOMIC_RELAXED);
}

static int accept_external_slow(struct ao_exec *ex, bool blocking, bool slot);

/* Count an external submission in; 0, or why it is refused. */
static inline __attribute__((always_inline)) int
accept_external(struct ao_exec *ex, bool blocking)
{
	bool slot = true;

	/*
	 * The counting RMW (SEQ_CST) comes before the SEQ_CST load of
	 * stopping: pairs with the SEQ_CST store in ao_exec_shutdown() and
	 * the loads in exec_quiescent(): either we see stopping, or destroy
	 * sees us counted and waits for the item.  Bounded and not full,
	 * the same CAS takes the slot: one RMW, as unbounded.
	 */
	if (!ex->capacity) {
		__atomic_fetch_add(&ex->ext_word, EXT_ONE, __ATOMIC_SEQ_CST);
	} else if (!ext_take_fast(ex) && !room_take_count(ex, 1, true)) {
		/* Full: counted in without a slot. */
		__atomic_fetch_add(&ex->ext_word, EXT_ONE, __ATOMIC_SEQ_CST);
		slot = false;
	}
	if (likely(!__atomic_load_n(&ex->stopping, __ATOMIC_SEQ_CST) && slot))
		return 0;
	return accept_external_slow(ex, blocking, slot);
}

/* accept_external(): shutdown has started, or no slot was free. */
static __attribute__((noinline)) int
accept_external_slow(struct ao_exec *ex, bool blocking, bool slot)
{
	int r;

	if (__atomic_load_n(&ex->stopping, __ATOMIC_SEQ_CST)) {
		if (ex->capacity && slot)
			room_give(ex, 1);
		refuse_external(ex);
		return -ESHUTDOWN;
	}
	if (!slot) {
		r = room_wait(ex, blocking);
		if (r) {
			refuse_external(ex);
			return r;
		}
	}
	return 0;
}

enum { ACCEPT_QUEUE, ACCEPT_INLINE };

/* Count a worker's submission in: ACCEPT_QUEUE, ACCEPT_INLINE (full, run
 * it now), or -errno. */
static int accept_worker(struct ao_worker *w, bool blocking, bool can_inline)
{
	struct ao_exec *ex = w->ex;

	/* Relaxed is enough: we run inside an accepted item that destroy
	 * waits for, so a submit that misses a concurrent shutdown is
	 * still run (and one that follows our seeing it is refused). */
	if (unlikely(LOAD(ex->stopping))) {
		__atomic_fetch_add(&ex->rejected, 1, __ATOMIC_RELAXED);
		return -ESHUTDOWN;
	}
	if (ex->capacity && w->credit > 0) {
		/* A slot this worker holds. */
		w->credit--;
	} else if (ex->capacity) {
		int64_t n = room_take(ex, ex->credit_batch);

		if (n) {
			w->credit += n - 1;
		} else {
			if (!blocking) {
				__atomic_fetch_add(&ex->rejected, 1,
						   __ATOMIC_RELAXED);
				return -EAGAIN;
			}
			if (can_inline && w->depth < AO_EXEC_INLINE_MAX)
				return ACCEPT_INLINE;
			/* Too deep to run inline: exceed the bound. */
			room_borrow(ex);
		}
	}
	OWN_INC(w->sub);
	return ACCEPT_QUEUE;
}

/* exec_notify(), then 0: a tail call for submit(). */
static __attribute__((noinline)) int notify_ret(struct ao_exec *ex)
{
	exec_notify(ex);
	return 0;
}

/* A worker's submit past the common case: stopping, or bounded without
 * a slot in hand (see accept_worker()). */
static __attribute__((noinline)) int
submit_worker_slow(struct ao_worker *w, struct ao_work *work, bool blocking)
{
	int r = accept_worker(w, blocking, true);

	if (r < 0)
		return r;
	if (r == ACCEPT_INLINE) {
		w->depth++;
		OWN_INC(w->inlined);
		work->fn(work);
		w->depth--;
		return 0;
	}
	if (push_local(w, work))
		exec_notify(w->ex); /* see submit() */
	return 0;
}

/* A submit from outside ex's workers. */
static __attribute__((noinline)) int
submit_external(struct ao_exec *ex, struct ao_work *work, bool blocking)
{
	int r = accept_external(ex, blocking); /* counts the call in */

	if (!r && ao_inbox_push(&ex->q, work))
		exec_notify(ex); /* on an empty inbox only: see submit() */
	ext_leave(ex);
	return r;
}

static inline __attribute__((always_inline)) int
submit(struct ao_exec *ex, struct ao_work *work, bool try)
{
	struct ao_worker *w = worker_of(ex);
	bool blocking;

	/*
	 * One of ex's own workers, not stopping, unbounded or holding a
	 * slot: the common case, with nothing else on its path (no stack
	 * frame; the notify is a tail call).
	 *
	 * Only a push onto an empty queue needs a notify.  Whoever made the
	 * queue non-empty did one, which left some worker awake (woken,
	 * searching, or all of them busy), and an awake worker re-checks
	 * every queue before it parks, so while the queue stays non-empty
	 * one of them is bound to come to it and take this item too (the
	 * inbox is taken whole; a ring is stolen from or popped).  A stale
	 * size that hides an emptied queue is no hole either: whoever
	 * emptied it is awake.  This spares a producer that keeps a queue
	 * fed the fence and, above all, the futex wakes.
	 */
	if (likely(w && work && work->fn && !LOAD(ex->stopping) &&
		   (!ex->capacity || w->credit > 0))) {
		if (ex->capacity)
			w->credit--;
		OWN_INC(w->sub); /* before the push (see run_item()) */
		if (push_local(w, work))
			return notify_ret(ex);
		return 0;
	}
	if (unlikely(!ex || !work || !work->fn))
		return -EINVAL;
	blocking = !try && ex->cfg.policy == AO_EXEC_BLOCK;
	if (w)
		return submit_worker_slow(w, work, blocking);
	return submit_external(ex, work, blocking);
}

int ao_exec_submit(struct ao_exec *ex, struct ao_work *work)
{
	return submit(ex, work, false);
}

int ao_exec_try_submit(struct ao_exec *ex, struct ao_work *work)
{
	return submit(ex, work, true);
}

/* ---- calls (core/call.c), with the item taken inline ---- */

static __ao_always_inline int exec_call(struct ao_exec *ex, ao_call_fn fn,
					void *arg, bool try)
{
	struct ao__call_item *x;
	int r;

	if (unlikely(!fn))
		return -EINVAL;
	x = ao__call_item(fn, arg);
	if (unlikely(!x))
		return -ENOMEM;
	r = submit(ex, &x->work, try); /* -EINVAL for a NULL ex */
	/* Refused: neither queued nor run, so the item is still ours. */
	if (unlikely(r))
		ao__call_refused(x);
	return r;
}

int ao_exec_call(struct ao_exec *ex, ao_call_fn fn, void *arg)
{
	return exec_call(ex, fn, arg, false);
}

int ao_exec_try_call(struct ao_exec *ex, ao_call_fn fn, void *arg)
{
	return exec_call(ex, fn, arg, true);
}

bool ao_exec_run_one(struct ao_exec *ex)
{
	struct ao_worker *w = worker_of(ex);
	struct ao_work *x;

	if (!w)
		return false;
	x = find_work(w, false);
	if (!x)
		return false;
	run_item(w, x);
	return true;
}

/* ---- for strands and groups ---- */

int ao__exec_reserve(struct ao_exec *ex, bool blocking)
{
	struct ao_worker *w = worker_of(ex);
	int r;

	if (w) {
		r = accept_worker(w, blocking, false);
		return r < 0 ? r : 0;
	}
	r = accept_external(ex, blocking); /* counts the call in */
	ext_leave(ex);
	return r;
}

void ao__exec_push_forced(struct ao_exec *ex, struct ao_work *work)
{
	struct ao_worker *w = worker_of(ex);

	/* Beyond the bound (see the strands): a slot borrowed. */
	if (ex->capacity)
		room_borrow(ex);
	if (w) {
		OWN_INC(w->sub);
		push_local(w, work);
		exec_notify(ex);
		return;
	}
	/* SEQ_CST: as in accept_external(); counts the call in. */
	__atomic_fetch_add(&ex->ext_word, EXT_ONE, __ATOMIC_SEQ_CST);
	ao_inbox_push(&ex->q, work);
	exec_notify(ex);
	ext_leave(ex);
}

void ao__exec_started(struct ao_exec *ex)
{
	struct ao_worker *w = worker_of(ex);

	if (w) {
		item_started(w);
		return;
	}
	/* Off the pool (a held strand turn): its slot goes back now, as a
	 * worker's credit would. */
	if (ex->capacity)
		room_give(ex, 1);
}

bool ao__exec_finished(struct ao_exec *ex)
{
	struct ao_worker *w = worker_of(ex);

	/* Not a worker: the caller counts it (ao__exec_finished_off()). */
	if (!w)
		return false;
	/* RELEASE: as in run_item(). */
	__atomic_store_n(&w->done, w->done + 1, __ATOMIC_RELEASE);
	return true;
}

void ao__exec_finished_off(struct ao_exec *ex, unsigned int n)
{
	/*
	 * Once the drain that destroy makes sees our count, destroy may free
	 * ex, and we still have the drainers to notify: offpool keeps it.
	 * All SEQ_CST: our increment of offpool precedes our ext_done RMW,
	 * which precedes the drain's SEQ_CST load of ext_done
	 * (exec_quiescent()), which precedes destroy's SEQ_CST load of
	 * offpool, so destroy sees us in and waits for the RELEASE
	 * decrement, our last access to ex.  The items' effects come before
	 * the ext_done RMW, which pairs with exec_quiescent()'s load.
	 */
	if (!n)
		return;
	__atomic_fetch_add(&ex->offpool, 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&ex->ext_done, n, __ATOMIC_SEQ_CST);
	notify_drainers(ex);
	__atomic_fetch_sub(&ex->offpool, 1, __ATOMIC_RELEASE);
}

bool ao__exec_park_worker(struct ao_exec *ex, bool (*cond)(void *arg),
			  void *arg)
{
	struct ao_worker *w = worker_of(ex);
	struct ao_driver *d;

	if (!w)
		return false;
	flush_credit(w);
	/* A worker waiting for a group is still a worker: the driver's due
	 * work runs here, and it may park through the driver (park()). */
	d = ao__exec_driver(ex);
	if (d && d->ops->run(d, 0, true))
		return true; /* the caller re-checks its condition */
	/* cond() pairs with its own notifier, which calls
	 * ao__exec_wake_all() after making it true.  Woken, the worker does
	 * not search (it goes back to its condition), but it clears the
	 * flag as a searcher would, so later submits may wake another. */
	if (park(w, cond, arg) == PARK_SLEPT)
		__atomic_store_n(&ex->wake_pending, 0, __ATOMIC_SEQ_CST);
	else
		park_called_off(ex);
	return true;
}

/* ---- for drivers (core/driver.h) ---- */

int ao__exec_attach_driver(struct ao_exec *ex, struct ao_driver *d)
{
	struct ao_driver *none = NULL;

	/* RELEASE: the driver is set up before workers see it; pairs with
	 * the ACQUIRE in ao__exec_driver(). */
	if (!__atomic_compare_exchange_n(&ex->drv, &none, d, false,
					 __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return -EBUSY;
	return 0;
}

void ao__exec_detach_driver(struct ao_exec *ex, struct ao_driver *d)
{
	struct ao_driver *head;

	/* Workers may still hold d (a look that read ex->drv before this):
	 * it stays on drv_dead until exec_free() releases it. */
	__atomic_store_n(&ex->drv, NULL, __ATOMIC_RELEASE);
	head = __atomic_load_n(&ex->drv_dead, __ATOMIC_RELAXED);
	do {
		d->next = head;
	} while (!__atomic_compare_exchange_n(&ex->drv_dead, &head, d, true,
					      __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
}

struct ao_driver *ao__exec_driver(const struct ao_exec *ex)
{
	return __atomic_load_n(&ex->drv, __ATOMIC_ACQUIRE);
}

void ao__exec_unpark(struct ao_exec *ex)
{
	ao_ec_notify_one(&ex->idle_ec);
}

/* ---- drain and lifecycle ---- */

/* Has everything counted in finished, at some instant during the call? */
static bool exec_quiescent(struct ao_exec *ex)
{
	uint64_t done, sub, left;

	/* Finished counts first, then submitted (see "Drain" above).  The
	 * ACQUIREs pair with the RELEASE stores of done in run_item() and
	 * ao__exec_finished(); the SEQ_CST loads with the SEQ_CST RMWs in
	 * accept_external() and refuse_external() (and see ext_entered()). */
	done = __atomic_load_n(&ex->ext_refused, __ATOMIC_SEQ_CST);
	done += __atomic_load_n(&ex->ext_done, __ATOMIC_SEQ_CST);
	for (unsigned int i = 0; i < ex->nworkers; i++)
		done += __atomic_load_n(&ex->workers[i].done, __ATOMIC_ACQUIRE);
	sub = ext_entered(ex, &left);
	for (unsigned int i = 0; i < ex->nworkers; i++)
		sub += __atomic_load_n(&ex->workers[i].sub, __ATOMIC_ACQUIRE);
	return done == sub;
}

int ao_exec_drain(struct ao_exec *ex)
{
	if (!ex)
		return -EINVAL;
	if (worker_of(ex))
		return -EDEADLK;
	/* SEQ_CST RMW: pairs with the fence in notify_drainers().  It also
	 * counts this call in for destroy, which waits for drainers to fall
	 * to zero: a drain may still be leaving when destroy's own returns. */
	__atomic_fetch_add(&ex->drainers, 1, __ATOMIC_SEQ_CST);
	for (;;) {
		uint32_t key = ao_ec_prepare(&ex->drain_ec);

		if (exec_quiescent(ex)) {
			ao_ec_cancel(&ex->drain_ec);
			break;
		}
		ao_ec_wait(&ex->drain_ec, key, -1);
	}
	/* The last access to ex.  RELEASE: pairs with the ACQUIRE load in
	 * ao_exec_destroy(). */
	__atomic_fetch_sub(&ex->drainers, 1, __ATOMIC_RELEASE);
	return 0;
}

void ao_exec_shutdown(struct ao_exec *ex)
{
	if (!ex)
		return;
	/* SEQ_CST: pairs with the RMW-then-load in accept_external(). */
	__atomic_store_n(&ex->stopping, 1, __ATOMIC_SEQ_CST);
	/* Blocked submitters give up with -ESHUTDOWN. */
	ao_ec_notify_all(&ex->room_ec);
}

bool ao_exec_stopping(const struct ao_exec *ex)
{
	return __atomic_load_n(&ex->stopping, __ATOMIC_ACQUIRE) != 0;
}

static void exec_stop_workers(struct ao_exec *ex)
{
	/* SEQ_CST store, then the fence in ao_ec_notify_all(): pairs with
	 * the prepare and fence before park()'s load of exiting. */
	__atomic_store_n(&ex->exiting, 1, __ATOMIC_SEQ_CST);
	ao_ec_notify_all(&ex->idle_ec);
	for (unsigned int i = 0; i < ex->nworkers; i++)
		if (ex->workers[i].started)
			pthread_join(ex->workers[i].thread, NULL);
}

/* Free ex, once its workers have exited: its drivers are released,
 * detached or not (no worker calls them any more). */
static void exec_free(struct ao_exec *ex)
{
	struct ao_driver *d = ex->drv_dead, *next;

	if (ex->drv) {
		ex->drv->next = d;
		d = ex->drv;
	}
	for (; d; d = next) {
		next = d->next;
		d->ops->release(d);
	}
	free(ex->workers);
	free(ex);
}

int ao_exec_destroy(struct ao_exec *ex)
{
	if (!ex)
		return -EINVAL;
	if (worker_of(ex))
		return -EDEADLK;
	ao_exec_shutdown(ex);
	ao_exec_drain(ex);
	/* A submitter refused at shutdown, or another drain, may still be on
	 * its way out (see ext_leave()); it has nothing left to wait for, so
	 * this is a few instructions unless it was preempted. */
	for (;;) {
		uint64_t left;

		/* Equal counts: every call counted in has left.  ACQUIRE on
		 * drainers pairs with the RELEASE at the end of a drain; the
		 * load of offpool: see ao__exec_finished_off(). */
		if (ext_entered(ex, &left) == left &&
		    !__atomic_load_n(&ex->drainers, __ATOMIC_ACQUIRE) &&
		    !__atomic_load_n(&ex->offpool, __ATOMIC_SEQ_CST))
			break;
		sched_yield();
	}
	exec_stop_workers(ex);
	exec_free(ex);
	return 0;
}

int ao_exec_create(const struct ao_exec_config *cfg, struct ao_exec **out)
{
	struct ao_exec_config def = AO_EXEC_CONFIG_INIT;
	struct ao_exec *ex;
	void *mem;
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg)
		cfg = &def;
	if ((cfg->kind != AO_EXEC_SHARED && cfg->kind != AO_EXEC_STEAL) ||
	    (cfg->policy != AO_EXEC_BLOCK && cfg->policy != AO_EXEC_FAIL) ||
	    cfg->workers > AO_EXEC_MAX_WORKERS ||
	    cfg->capacity > AO_EXEC_CAPACITY_MAX)
		return -EINVAL;
	if (posix_memalign(&mem, AO_CACHELINE_SIZE, sizeof(*ex)))
		return -ENOMEM;
	ex = mem;
	memset(ex, 0, sizeof(*ex));
	ex->cfg = *cfg;
	ex->nworkers = cfg->workers ? cfg->workers : ao_cpu_count();
	if (ex->nworkers > AO_EXEC_MAX_WORKERS)
		ex->nworkers = AO_EXEC_MAX_WORKERS;
	ex->cfg.workers = ex->nworkers;
	ex->oversub = ex->nworkers + 1 > ao_cpu_count();
	if (!ex->cfg.spin_ns)
		ex->cfg.spin_ns = AO_EXEC_DEFAULT_SPIN_NS;
	ex->spin_cycles = ao_ns_to_cycles(ex->cfg.spin_ns);
	ex->relax_cycles = ao_ns_to_cycles(RELAX_NS);
	ex->inbox_age_cycles = ao_ns_to_cycles(INBOX_AGE_NS);
	ex->lent_cycles = ao_ns_to_cycles(LENT_NS);
	ex->lent_max_cycles = ao_ns_to_cycles(LENT_MAX_NS);
	ex->capacity = (int64_t)cfg->capacity;
	ex->room_resume = ex->capacity - ex->capacity / 2;
	ex->ext_word = (uint64_t)ex->capacity; /* the whole budget */
	ex->credit_batch = ex->capacity / (8 * (int64_t)ex->nworkers);
	if (ex->credit_batch < 1)
		ex->credit_batch = 1;
	if (ex->credit_batch > AO_EXEC_CREDIT_MAX)
		ex->credit_batch = AO_EXEC_CREDIT_MAX;
	snprintf(ex->name, sizeof(ex->name), "%s",
		 cfg->name ? cfg->name : AO_EXEC_NAME_DEFAULT);
	ex->cfg.name = ex->name;
	ao_inbox_init(&ex->q);
	ao_ec_init(&ex->idle_ec);
	ao_ec_init(&ex->room_ec);
	ao_ec_init(&ex->drain_ec);

	if (posix_memalign(&mem, AO_CACHELINE_SIZE,
			   ex->nworkers * sizeof(struct ao_worker))) {
		free(ex);
		return -ENOMEM;
	}
	ex->workers = mem;
	memset(ex->workers, 0, ex->nworkers * sizeof(struct ao_worker));
	for (unsigned int i = 0; i < ex->nworkers; i++) {
		struct ao_worker *w = &ex->workers[i];

		ao_deque_init(&w->dq);
		w->ex = ex;
		w->id = i;
		w->drv_count = w->drv_every = 1;
		w->rng = 0x9e3779b97f4a7c15ull * (i + 1);
	}
	for (unsigned int i = 0; i < ex->nworkers; i++) {
		struct ao_worker *w = &ex->workers[i];

		err = pthread_create(&w->thread, NULL, worker_main, w);
		if (err) {
			exec_stop_workers(ex);
			exec_free(ex);
			return -err;
		}
		w->started = true;
	}
	*out = ex;
	return 0;
}

/* ---- introspection ---- */

struct ao_exec *ao_exec_current(void)
{
	return cur_worker ? cur_worker->ex : NULL;
}

int ao_exec_worker_index(const struct ao_exec *ex)
{
	struct ao_worker *w = worker_of(ex);

	return w ? (int)w->id : -1;
}

unsigned int ao_exec_workers(const struct ao_exec *ex)
{
	return ex->nworkers;
}

void ao_exec_get_config(const struct ao_exec *ex, struct ao_exec_config *cfg)
{
	*cfg = ex->cfg;
}

int ao_exec_worker_stats(const struct ao_exec *ex, unsigned int i,
			 struct ao_exec_worker_stats *st)
{
	struct ao_worker *w;

	if (!ex || !st || i >= ex->nworkers)
		return -EINVAL;
	w = &ex->workers[i];
	st->inlined = LOAD(w->inlined);
	st->executed = LOAD(w->done) + st->inlined;
	st->stolen = LOAD(w->stolen);
	st->stolen_from = LOAD(w->stolen_from);
	st->overflowed = LOAD(w->overflowed);
	st->parks = LOAD(w->parks);
	st->wakeups = LOAD(w->wakeups);
	st->depth = ex->cfg.kind == AO_EXEC_STEAL ?
			    (uint64_t)ao_deque_size(&w->dq) :
			    0;
	return 0;
}

int ao_exec_stats(const struct ao_exec *ex, struct ao_exec_stats *st)
{
	uint64_t sub = 0, taken = 0, ext, left;

	if (!ex || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	for (unsigned int i = 0; i < ex->nworkers; i++) {
		struct ao_exec_worker_stats ws;

		ao_exec_worker_stats(ex, i, &ws);
		st->executed += ws.executed;
		st->inlined += ws.inlined;
		st->stolen += ws.stolen;
		st->overflowed += ws.overflowed;
		st->parks += ws.parks;
		st->wakeups += ws.wakeups;
		taken += LOAD(ex->workers[i].taken);
	}
	/* Submitted counts after started ones (an item is counted
	 * submitted before it can start), so the snapshot is rarely below
	 * zero; it is clamped for when it is. */
	for (unsigned int i = 0; i < ex->nworkers; i++)
		sub += LOAD(ex->workers[i].sub);
	ext = ext_entered(ex, &left) - LOAD(ex->ext_refused);
	st->submitted = sub + ext + st->inlined;
	st->rejected = LOAD(ex->rejected);
	st->notifies = LOAD(ex->notifies);
	/* Accepted, not started: rings, the queue and its inbox. */
	st->queued = sub + ext;
	taken += LOAD(ex->ext_done); /* started off the pool */
	st->queued = st->queued > taken ? st->queued - taken : 0;
	st->workers = ex->nworkers;
	return 0;
}
