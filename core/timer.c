// SPDX-License-Identifier: MIT
/*
 * Timers: a hierarchical timing wheel per shard, expired by the executor's
 * own workers.
 *
 * Where expiry runs
 * -----------------
 * On the workers, as Tokio's driver is polled by a parking worker, not on a
 * timer thread of its own.  A dedicated thread would cost a second wake-up
 * per deadline (it wakes, then must wake a worker to run the callback, and
 * on a small VM a futex wake of an idle vCPU costs tens of microseconds),
 * and a busy pool would still have to give the due
 * callback priority over its queue, which only a worker can do.  The io
 * ring's multishot timeout is ruled out: each shot re-arms relative to the
 * moment it fired (it drifts, by its wake-up latency every tick) and its
 * cancel walks every pending timeout.  So:
 *  - a worker that parks with timers pending sleeps on the executor's
 *    event count with a timeout that ends at the earliest deadline (one
 *    timed waiter at a time, ts->sleep_until; the others sleep without a
 *    timeout), with its timer slack lowered (PR_SET_TIMERSLACK, default
 *    1 us instead of the kernel's 50 us).  It wakes, runs the expiry and
 *    the callbacks itself: one wake-up per deadline, no hop;
 *  - a busy worker looks at the clock between two items, every k items
 *    with k adapted so that it looks about every 10 us, and
 *    runs what is due before its next item: a due timer does not wait
 *    behind the queue;
 *  - an arm that moves the earliest deadline before the timed waiter's
 *    wake-up wakes one parked worker, which parks again with the earlier
 *    timeout (ao__exec_unpark());
 *  - precise timers (AO_TIMER_PRECISE): the waiter wakes a lead before
 *    the deadline and spins the rest on the clock.  The lead follows the
 *    wake-up errors it measures (a decaying maximum, plus a margin),
 *    capped at precise_max_ns.
 * An idle executor with no timer due sleeps in the kernel: nothing polls.
 * The executor sees all this only as a driver (core/driver.h): it calls
 * timers_run() between items and while idle, parks through timers_park(),
 * and calls timers_release() when it ends; the service calls back only
 * ao__exec_unpark().
 *
 * Shards
 * ------
 * One wheel per shard, each behind its own lock.  A timer belongs to one
 * shard for good: an executor timer to the shard of the thread that
 * initialised it (worker i has shard i; other threads share the rest by a
 * thread number), a strand timer to the one its strand hashes to.  So
 * threads that arm their own timers never share a lock or a cache line,
 * and a timer is found from its own fields (t->target) in O(1).  The lock
 * is sync/'s test-and-test-and-set lock, whose unlock is one release store
 * (the three-phase lock's is a CAS, a good part of an arm's cost): its
 * critical sections are a few dozen instructions, or a bounded expiry step
 * (POLL_BUDGET timers), so a waiter spins, then yields, and never sleeps.
 *
 * The wheel
 * ---------
 * LEVELS levels of SLOTS lists.  Level L's granule is 2^(GRAN_SHIFT + 6L)
 * ns (16.4 us, 1.05 ms, 67 ms, 4.3 s, 275 s, 4.9 h, 13 days, 2.3 years),
 * and a timer goes to the lowest level where its deadline is in the
 * current or the next granule of the level above (wheel_add()), relative
 * to sh->elapsed, the wheel's time.  So a level holds at most two granules
 * of the level above: SLOTS = 128 = 2 * 64, and slot i of level L holds
 * the deadlines of granule g with g % 128 = i.  Arm and cancel are O(1):
 * a shift loop over at most LEVELS levels, a list insert or unlink
 * (pprev, as the kernel's hlist), a bit in the level's 128-bit occupancy
 * map.  Nothing else is stored per timer: 48 bytes, its own struct.
 *
 * Expiry, in the order of time (wheel_advance()):
 *  - a level-0 slot is due at the earliest deadline it holds; its due
 *    timers, sorted by deadline (stable: equal deadlines in arm order), go
 *    to the shard's fire list, whose callbacks run after the step;
 *  - a slot g of level L >= 1 may be moved down (cascaded) once the level
 *    below covers all of it, at (g - 1) granules of level L, and must be
 *    by g.  A slot of at most LAZY_MAX timers is cascaded lazily: the
 *    wheel sleeps until the earliest deadline it holds, then moves the
 *    slot and fires in one step, so a lone periodic tick costs one
 *    wake-up per tick.  A bigger slot (a cascading wheel's worst case: a
 *    million timers spread over a minute put tens of thousands in one
 *    slot, whose reinsertion in one go would stall a worker for
 *    milliseconds) is moved in chunks of POLL_BUDGET from (g - 1) on,
 *    paced so that it is done by g (pace[]), between the level-0
 *    expiries.
 *  - every step does at most POLL_BUDGET timer moves under the lock: no
 *    step is long, whatever the number pending.
 * The earliest slot of each level is cached (struct tw_lvl: its granule,
 * a count and the earliest deadline seen), updated in O(1) by arms and
 * lazily by cancels (a cancel leaves a lower bound: at worst one early
 * wake-up, after which the level is scanned again).  sh->next is the
 * earliest moment the shard needs a look (next_enc()), published in
 * next_pub for the parking and checking workers.
 *
 * States
 * ------
 * A timer's state (TS_* below) is in the low bits of t->ctl, and only this
 * file writes it.  Every transition happens under the timer's shard lock,
 * so writers never race.  A strand's list of fired timers is the strand's
 * (core/strand.c), under the strand lock, taken inside the shard lock: a
 * strand runner takes a timer off it under the strand lock alone and
 * leaves it QUEUED until ao__timer_run_queued() marks it running, and a
 * cancel or an arm that finds it QUEUED asks the strand whether it is
 * still listed (ao__strand_timer_del()).  A callback that runs while its
 * timer fires again runs again after it returns (TS_RUN_DUE), never twice
 * at once; a strand timer's runs are serialised by the strand anyway.
 *
 * Orderings are commented where they are used, each with its pair.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <aorta/clock.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include <aorta/sync/eventcount.h>
#include "../sync/taslock.h"
#include "driver.h"
#include "timer_priv.h"

#define GRAN_SHIFT 14 /* level-0 granule: 16.4 us */
#define LVL_BITS 6 /* each level's granule is 64 times the one below */
#define SLOTS 128u /* two granules of the level above */
#define SLOT_MASK (SLOTS - 1)
#define LEVELS 8
/* A slot of at most this many timers is cascaded in one step when its
 * first deadline comes; a bigger one in paced chunks. */
#define LAZY_MAX 64u
/* Timer moves (fired or cascaded) per expiry step, under the lock. */
#define POLL_BUDGET 256u
/* Callbacks one check runs before the worker goes back to its items. */
#define RUN_BUDGET 256u
/* Shards: a power of two, at least twice the workers, at most this. */
#define MAX_SHARDS 64u
/* Precise mode: spin on the clock alone (no pause between looks) for
 * the last this many ns. */
#define TIGHT_NS 5000u
/* The lead's margin over the wake-up error measured. */
#define LEAD_MARGIN_NS 20000u
#define LEAD_MIN_NS 20000u

/*
 * A timer's state, the low three bits of t->ctl (see "States" above).
 * Written with release stores by holders of the lock that governs the
 * transition, read anywhere.
 */
enum {
	TS_IDLE = 0, /* not armed */
	TS_PENDING = 1, /* in its shard's wheel or fire list */
	TS_QUEUED = 2, /* fired, on its strand's timer list */
	TS_RUNNING = 3, /* callback running */
	TS_RUN_PENDING = 4, /* callback running, armed again */
	TS_RUN_QUEUED = 5, /* callback running, fired again (strand) */
	TS_RUN_STOP = 6, /* callback running, cancelled: no re-arm */
	TS_RUN_DUE = 7, /* callback running, due again: run it after */
};
#define TS_MASK 7ull

#define NO_TIME UINT64_MAX
#define NO_G UINT64_MAX

/* t->target: the shard (or the strand, bit 0 set), and the flags. */
#define TGT_STRAND 0x1u
#define TGT_CATCHUP 0x2u
#define TGT_PRECISE 0x4u
#define TGT_FLAGS 0x6u
#define TGT_PTR (~(uintptr_t)7)

/* Counters written under the shard lock and read racily. */
#define OWN_ADD(f, n) __atomic_store_n(&(f), (f) + (n), __ATOMIC_RELAXED)
#define OWN_INC(f) OWN_ADD(f, 1)
#define LOAD(f) __atomic_load_n(&(f), __ATOMIC_RELAXED)

/* Lateness histogram: 16 linear buckets, then 16 per power of two. */
#define HBUCKETS (16 + 60 * 16)

/* The earliest occupied slot of a level, as far as arms have told. */
struct tw_lvl {
	uint64_t g; /* its granule (NO_G: the level is empty) */
	uint64_t min; /* no deadline in it is earlier than this */
	uint32_t n; /* timers in it, at least (LAZY_MAX + 1: many) */
	bool valid; /* false: scan the level again */
	bool precise; /* the timer at min is precise */
};

struct tw_shard {
	struct ao_taslock lock;
	bool dead; /* the service is being destroyed: arms refused */
	unsigned int idx;
	struct ao_timers *ts;
	uint64_t elapsed; /* the wheel's time (ns) */
	uint64_t next; /* next_enc() of the next look needed */
	struct ao_timer *fire_head; /* due, callbacks not started */
	struct ao_timer **fire_tail;
	uint64_t npending; /* PENDING, RUN_PENDING, RUN_DUE */
	/* Written under the lock, read racily. */
	uint64_t armed, cancelled, polls, step_max_ns;
	struct tw_lvl lvl[LEVELS];
	uint64_t pace[LEVELS]; /* a big slot's next chunk, at or after */
	uint64_t occ[LEVELS][2]; /* occupied slots */
	struct ao_timer *slot[LEVELS][SLOTS];
	/* Levels 1 and up: timers put into each slot and not moved out yet
	 * (cancels do not know their slot: an upper bound, exact again when
	 * the slot empties).  Paces a big slot's chunks. */
	uint32_t cnt[LEVELS][SLOTS];

	/* Read by every worker that checks the clock: a line of its own. */
	uint64_t next_pub __ao_cacheline_aligned;

	/* Updated without the lock (strand runners). */
	uint64_t nqueued __ao_cacheline_aligned; /* QUEUED, RUN_QUEUED */
	uint64_t fired, skipped, late_max;
	uint64_t hist[HBUCKETS];
} __ao_cacheline_aligned;

struct ao_timers {
	struct ao_driver drv; /* what the executor sees of us */
	struct ao_exec *exec;
	unsigned int nshards;
	unsigned int nworkers;
	bool test_clock;
	uint32_t slack_ns;
	uint32_t precise_max_ns;
	struct tw_shard *shards;

	uint64_t test_now __ao_cacheline_aligned; /* the test clock */

	/* Parking (see "Where expiry runs"). */
	uint64_t sleep_until __ao_cacheline_aligned; /* NO_TIME: none */
	uint64_t lead_ns; /* precise mode's current lead */
	uint64_t wake_err_ns; /* decaying maximum of timed wake errors */
	uint64_t sleeps, spins;

	/* Destroy and cancel_sync. */
	uint32_t dying __ao_cacheline_aligned;
	uint32_t active; /* expiry steps in progress */
	uint64_t running; /* callbacks in progress */
	struct ao_eventcount done_ec; /* a callback ended, a drop happened */
};

/* The thread's number for the shard of the timers it initialises. */
static uint32_t thread_seq;
static __thread uint32_t thread_no;
/* The callback this thread is running, if any (cancel_sync, destroy). */
static __thread struct ao_timer *cur_timer;
static __thread struct ao_timers *cur_ts;
/* This thread is running an expiry step or its callbacks. */
static __thread bool in_expiry;
/* The timer slack this thread has set (0: the kernel's default). */
static __thread uint32_t thread_slack;

/* ---- small helpers ---- */

static inline unsigned int tm_state(const struct ao_timer *t)
{
	return (unsigned int)(__atomic_load_n(&t->ctl, __ATOMIC_ACQUIRE) &
			      TS_MASK);
}

static inline void tm_set_state(struct ao_timer *t, unsigned int s)
{
	uint64_t c = __atomic_load_n(&t->ctl, __ATOMIC_RELAXED);

	/* RELEASE: what the transition's holder wrote (links, expires)
	 * comes first; pairs with the ACQUIRE in tm_state(). */
	__atomic_store_n(&t->ctl, (c & ~TS_MASK) | s, __ATOMIC_RELEASE);
}

static inline unsigned int lvl_shift(unsigned int lvl)
{
	return GRAN_SHIFT + LVL_BITS * lvl;
}

static inline uint64_t umax(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static inline uint64_t umin(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* A moment the shard must be looked at, as one comparable word: earlier
 * first, and a precise deadline before a plain one at the same time. */
static inline uint64_t next_enc(uint64_t time, bool precise)
{
	if (time >= NO_TIME >> 1)
		return NO_TIME;
	return time << 1 | (precise ? 0 : 1);
}

static inline uint64_t ts_clock(const struct ao_timers *ts)
{
	if (ts->test_clock)
		return __atomic_load_n(&ts->test_now, __ATOMIC_ACQUIRE);
	return ao_now_ns();
}

static inline uintptr_t tgt(const struct ao_timer *t)
{
	return __atomic_load_n(&t->target, __ATOMIC_RELAXED);
}

static inline uint64_t period_of(const struct ao_timer *t)
{
	return __atomic_load_n(&t->ctl, __ATOMIC_RELAXED) & ~TS_MASK;
}

static inline uint64_t expires_of(const struct ao_timer *t)
{
	return __atomic_load_n(&t->expires, __ATOMIC_RELAXED);
}

static inline void set_expires(struct ao_timer *t, uint64_t x)
{
	__atomic_store_n(&t->expires, x, __ATOMIC_RELAXED);
}

static inline bool is_precise(const struct ao_timer *t)
{
	return tgt(t) & TGT_PRECISE;
}

static inline struct ao_strand *strand_of(const struct ao_timer *t)
{
	uintptr_t v = tgt(t);

	return v & TGT_STRAND ? (struct ao_strand *)(v & TGT_PTR) : NULL;
}

static unsigned int strand_shard(const struct ao_timers *ts,
				 const struct ao_strand *s)
{
	uint64_t h = (uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ull;

	return (unsigned int)(h >> 40) & (ts->nshards - 1);
}

/* The shard a timer belongs to; NULL if its strand's executor has no
 * timer service any more. */
static inline struct tw_shard *shard_of(const struct ao_timer *t)
{
	uintptr_t v = tgt(t);
	struct ao_strand *s;
	struct ao_timers *ts;

	if (likely(!(v & TGT_STRAND)))
		return (struct tw_shard *)(v & TGT_PTR);
	s = (struct ao_strand *)(v & TGT_PTR);
	ts = ao_timers_of(s->exec);
	return ts ? &ts->shards[strand_shard(ts, s)] : NULL;
}

static inline bool st_pending(unsigned int st)
{
	return st == TS_PENDING || st == TS_QUEUED || st == TS_RUN_PENDING ||
	       st == TS_RUN_QUEUED || st == TS_RUN_DUE;
}

static inline bool st_running(unsigned int st)
{
	return st >= TS_RUNNING;
}

/* ---- lists ---- */

static inline void list_add(struct ao_timer **head, struct ao_timer *t)
{
	struct ao_timer *f = *head;

	t->next = f;
	if (f)
		f->pprev = &t->next;
	*head = t;
	t->pprev = head;
}

/* Unlink t from its wheel slot or the fire list. */
static inline void list_del(struct tw_shard *sh, struct ao_timer *t)
{
	struct ao_timer *n = t->next;

	*t->pprev = n;
	if (n)
		n->pprev = t->pprev;
	else if (sh->fire_tail == &t->next)
		sh->fire_tail = t->pprev;
	t->next = NULL;
	t->pprev = NULL;
}

/* ---- the lateness histogram ---- */

static unsigned int hbucket(uint64_t v)
{
	unsigned int msb;

	if (v < 16)
		return (unsigned int)v;
	msb = 63u - (unsigned int)__builtin_clzll(v);
	return 16 + (msb - 4) * 16 + (unsigned int)((v >> (msb - 4)) & 15);
}

/* The largest value of bucket b. */
static uint64_t hbucket_top(unsigned int b)
{
	unsigned int msb, sub;

	if (b < 16)
		return b;
	msb = (b - 16) / 16 + 4;
	sub = (b - 16) % 16;
	return ((uint64_t)(17 + sub) << (msb - 4)) - 1;
}

static void record_late(struct tw_shard *sh, int64_t late)
{
	uint64_t v = late > 0 ? (uint64_t)late : 0;
	uint64_t m = __atomic_load_n(&sh->late_max, __ATOMIC_RELAXED);

	__atomic_fetch_add(&sh->hist[hbucket(v)], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&sh->fired, 1, __ATOMIC_RELAXED);
	while (v > m &&
	       !__atomic_compare_exchange_n(&sh->late_max, &m, v, true,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* ---- publishing the next look, waking a parked worker ---- */

static void publish_next(struct tw_shard *sh)
{
	/* SEQ_CST: pairs with the SEQ_CST loads of a parking worker
	 * (ts_next()), which reads them after its prepare (see
	 * timers_park()). */
	__atomic_store_n(&sh->next_pub, sh->next, __ATOMIC_SEQ_CST);
}

/* An arm made the shard's next look earlier: publish it and, if no
 * worker will be up by then, wake one to sleep again until it. */
static __attribute__((noinline)) void next_lowered(struct tw_shard *sh)
{
	struct ao_timers *ts = sh->ts;

	publish_next(sh);
	/* Inside the expiry path the worker looks at the deadlines again
	 * before it parks or runs its next items: no one to wake. */
	if (ts->test_clock || in_expiry)
		return;
	/* SEQ_CST fence: our store of next_pub comes before the load of
	 * sleep_until (StoreLoad); pairs with the CAS on sleep_until that
	 * a parking worker makes after reading next_pub.  Either it sees
	 * our deadline, or we see its later wake-up and wake it (its
	 * event count prepare came first, so the wake is not lost). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if ((sh->next >> 1) <
	    __atomic_load_n(&ts->sleep_until, __ATOMIC_SEQ_CST))
		ao__exec_unpark(ts->exec);
}

/* ---- the level caches ---- */

/* When level lvl's cached slot must be looked at: its order (the time
 * the wheel may not pass before it is handled) and its wake-up (when to
 * look, at the latest). */
static uint64_t lvl_order(const struct tw_shard *sh, unsigned int lvl)
{
	const struct tw_lvl *v = &sh->lvl[lvl];
	unsigned int s = lvl_shift(lvl);

	if (v->g == NO_G)
		return NO_TIME;
	if (!lvl)
		return v->min;
	if (v->n <= LAZY_MAX)
		return (v->g - 1) << s;
	return v->g << s; /* a big slot: must be moved by then */
}

static uint64_t lvl_wake(const struct tw_shard *sh, unsigned int lvl)
{
	const struct tw_lvl *v = &sh->lvl[lvl];
	unsigned int s = lvl_shift(lvl);
	uint64_t open;

	if (v->g == NO_G)
		return NO_TIME;
	if (!lvl)
		return v->min;
	open = (v->g - 1) << s;
	if (v->n <= LAZY_MAX)
		return umax(open, v->min);
	return umax(open, sh->pace[lvl]);
}

/* An arm put a timer with deadline x into granule g of level lvl. */
static inline void lvl_note(struct tw_shard *sh, unsigned int lvl, uint64_t g,
			    uint64_t x, bool precise)
{
	struct tw_lvl *v = &sh->lvl[lvl];
	uint64_t w, enc;

	if (likely(v->valid)) {
		if (g > v->g)
			return; /* behind the earliest: changes nothing */
		if (g < v->g) {
			v->g = g;
			v->n = 1;
			v->min = x;
			v->precise = precise;
		} else {
			if (v->n <= LAZY_MAX)
				v->n++;
			if (x >= v->min)
				return;
			v->min = x;
			v->precise = precise;
		}
		w = lvl_wake(sh, lvl);
		precise = v->precise;
	} else {
		/* Scanned at the next step; the wake-up must not be later
		 * than this timer needs. */
		w = lvl ? umax((g - 1) << lvl_shift(lvl), x) : x;
	}
	enc = next_enc(w, precise);
	if (enc < sh->next) {
		sh->next = enc;
		next_lowered(sh);
	}
}

/* The first occupied slot of level lvl at or after granule c: its distance
 * from c, or -1.  Clears the bits of slots found empty (cancels leave
 * them). */
static int occ_first(struct tw_shard *sh, unsigned int lvl, uint64_t c)
{
	uint64_t *m = sh->occ[lvl];

	for (;;) {
		unsigned int pos = (unsigned int)(c & SLOT_MASK);
		unsigned int w = pos >> 6, b = pos & 63;
		uint64_t bits = m[w] >> b;
		int d;

		if (bits) {
			d = __builtin_ctzll(bits);
		} else if (m[w ^ 1]) {
			d = 64 - (int)b + __builtin_ctzll(m[w ^ 1]);
		} else if (b && (m[w] << (64 - b))) {
			d = 128 - (int)b + __builtin_ctzll(m[w]);
		} else {
			return -1;
		}
		pos = (pos + (unsigned int)d) & SLOT_MASK;
		if (sh->slot[lvl][pos])
			return (int)((pos - (unsigned int)(c & SLOT_MASK)) &
				     SLOT_MASK);
		m[pos >> 6] &= ~(1ull << (pos & 63));
	}
}

/* Scan level lvl again: its earliest occupied slot, count and min. */
static void lvl_scan(struct tw_shard *sh, unsigned int lvl)
{
	struct tw_lvl *v = &sh->lvl[lvl];
	uint64_t c = sh->elapsed >> lvl_shift(lvl);
	int d = occ_first(sh, lvl, c);
	struct ao_timer *t;

	v->valid = true;
	v->g = NO_G;
	if (d < 0)
		return;
	v->g = c + (uint64_t)d;
	v->n = 0;
	v->min = NO_TIME;
	v->precise = false;
	for (t = sh->slot[lvl][v->g & SLOT_MASK]; t && v->n <= LAZY_MAX;
	     t = t->next) {
		uint64_t x = expires_of(t);

		v->n++;
		if (x < v->min) {
			v->min = x;
			v->precise = is_precise(t);
		}
	}
	if (t)
		v->min = 0; /* not all seen: no bound (a big slot) */
}

/* The shard's next look, from the level caches. */
static void shard_next(struct tw_shard *sh)
{
	uint64_t best = NO_TIME;

	for (unsigned int l = 0; l < LEVELS; l++) {
		uint64_t e;

		if (!sh->lvl[l].valid)
			lvl_scan(sh, l);
		e = next_enc(lvl_wake(sh, l), sh->lvl[l].precise);
		if (e < best)
			best = e;
	}
	if (sh->fire_head)
		best = 0; /* callbacks to run */
	sh->next = best;
	publish_next(sh);
}

/* ---- placing ---- */

static inline void wheel_add(struct tw_shard *sh, struct ao_timer *t)
{
	uint64_t x = expires_of(t), e = sh->elapsed, g, d;
	unsigned int lvl = 0, s;

	if (x < e)
		x = e;
	/*
	 * The lowest level whose window (the current and the next granule
	 * of the level above) holds x: the first lvl with d(lvl) <= 1,
	 * where d(lvl) = (x >> s(lvl + 1)) - (e >> s(lvl + 1)).  d(lvl) is
	 * d(0) >> 6 lvl, or one more (the floors): so with m the top bit
	 * of d(0) > 1, level m / 6 + 1 always fits and m / 6 may.
	 */
	d = (x >> (GRAN_SHIFT + LVL_BITS)) - (e >> (GRAN_SHIFT + LVL_BITS));
	if (d > 1) {
		lvl = (63u - (unsigned int)__builtin_clzll(d)) / LVL_BITS;
		s = lvl_shift(lvl) + LVL_BITS;
		if ((x >> s) - (e >> s) > 1)
			lvl++;
		if (lvl > LEVELS - 1)
			lvl = LEVELS - 1;
	}
	s = lvl_shift(lvl);
	g = x >> s;
	if (g - (e >> s) >= SLOTS) /* beyond the top level: its last slot */
		g = (e >> s) + SLOTS - 1;
	list_add(&sh->slot[lvl][g & SLOT_MASK], t);
	sh->occ[lvl][(g >> 6) & 1] |= 1ull << (g & 63);
	if (lvl)
		sh->cnt[lvl][g & SLOT_MASK]++;
	lvl_note(sh, lvl, g, expires_of(t), is_precise(t));
}

/* ---- expiry ---- */

/* Sort a NULL-terminated list by deadline, stably (bottom-up merge). */
static struct ao_timer *sort_by_expires(struct ao_timer *list)
{
	size_t k = 1;

	if (!list || !list->next)
		return list;
	for (;;) {
		struct ao_timer *p = list, *out = NULL, **tail = &out;
		size_t merges = 0;

		while (p) {
			struct ao_timer *q = p;
			size_t ps = 0, qs = k;

			merges++;
			while (ps < k && q) {
				ps++;
				q = q->next;
			}
			while (ps || (qs && q)) {
				struct ao_timer *e;

				if (!ps) {
					e = q;
					q = q->next;
					qs--;
				} else if (!qs || !q ||
					   expires_of(p) <= expires_of(q)) {
					e = p;
					p = p->next;
					ps--;
				} else {
					e = q;
					q = q->next;
					qs--;
				}
				*tail = e;
				tail = &e->next;
			}
			p = q;
		}
		*tail = NULL;
		list = out;
		if (merges <= 1)
			return list;
		k *= 2;
	}
}

/* Append a sorted NULL-terminated list to the fire list. */
static void fire_append(struct tw_shard *sh, struct ao_timer *list)
{
	while (list) {
		struct ao_timer *n = list->next;

		list->next = NULL;
		list->pprev = sh->fire_tail;
		*sh->fire_tail = list;
		sh->fire_tail = &list->next;
		list = n;
	}
}

/* Level 0's earliest slot: its due timers to the fire list. */
static unsigned int fire_slot(struct tw_shard *sh, uint64_t now,
			      unsigned int budget)
{
	struct tw_lvl *v = &sh->lvl[0];
	struct ao_timer **head = &sh->slot[0][v->g & SLOT_MASK];
	struct ao_timer *t = *head, *batch = NULL;
	uint64_t rest = NO_TIME;
	bool rest_precise = false;
	uint32_t n = 0;

	while (t && budget) {
		struct ao_timer *next = t->next;
		uint64_t x = expires_of(t);

		if (x <= now) {
			list_del(sh, t);
			/* Prepending turns the slot's newest-first order
			 * into arm order. */
			t->next = batch;
			batch = t;
			budget--;
		} else {
			n++;
			if (x < rest) {
				rest = x;
				rest_precise = is_precise(t);
			}
		}
		t = next;
	}
	if (t) {
		v->valid = false; /* budget spent: look again */
	} else if (!*head) {
		sh->occ[0][(v->g >> 6) & 1] &= ~(1ull << (v->g & 63));
		v->valid = false;
	} else {
		v->min = rest;
		v->n = n;
		v->precise = rest_precise;
	}
	fire_append(sh, sort_by_expires(batch));
	return budget;
}

/* Move (up to budget of) level lvl's earliest slot down. */
static unsigned int cascade_slot(struct tw_shard *sh, unsigned int lvl,
				 uint64_t now, unsigned int budget)
{
	struct tw_lvl *v = &sh->lvl[lvl];
	uint64_t g = v->g, due = g << lvl_shift(lvl);
	struct ao_timer **head = &sh->slot[lvl][g & SLOT_MASK];
	uint32_t *cnt = &sh->cnt[lvl][g & SLOT_MASK];
	struct ao_timer *chunk = NULL;
	bool lazy = v->n <= LAZY_MAX;

	/* Oldest first, so that equal deadlines keep their arm order. */
	while (*head && (lazy || budget)) {
		struct ao_timer *t = *head;

		list_del(sh, t);
		t->next = chunk;
		chunk = t;
		if (*cnt)
			(*cnt)--;
		if (budget)
			budget--;
	}
	v->valid = false; /* wheel_add() must not note into it */
	while (chunk) {
		struct ao_timer *t = chunk;

		chunk = t->next;
		wheel_add(sh, t);
	}
	if (!*head) {
		sh->occ[lvl][(g >> 6) & 1] &= ~(1ull << (g & 63));
		sh->pace[lvl] = 0;
		*cnt = 0;
	} else {
		/* A big slot: the chunks left spread evenly over the time
		 * left (cnt is at least the timers left), so that the slot
		 * is moved by its due time without a burst at the end. */
		uint64_t left = due > now ? due - now : 0;
		uint64_t chunks = *cnt / POLL_BUDGET + 1;

		sh->pace[lvl] = now + left / (chunks + 1);
	}
	return budget;
}

/*
 * One expiry step: handle what is due at now, in time order, with at most
 * POLL_BUDGET timer moves.  Due timers end up on the fire list.  Returns
 * true if the budget ran out with more due.
 */
static bool wheel_advance(struct tw_shard *sh, uint64_t now)
{
	unsigned int budget = POLL_BUDGET;
	bool more = false;

	for (;;) {
		uint64_t best = NO_TIME;
		unsigned int bl = 0;

		for (unsigned int l = 0; l < LEVELS; l++) {
			uint64_t o;

			if (!sh->lvl[l].valid)
				lvl_scan(sh, l);
			o = lvl_order(sh, l);
			if (o < best) {
				best = o;
				bl = l;
			}
		}
		if (best > now)
			break;
		if (!budget) {
			more = true;
			goto out;
		}
		/* Time moves to the event: windows follow it. */
		sh->elapsed = umax(sh->elapsed, best);
		if (!bl)
			budget = fire_slot(sh, now, budget);
		else
			budget = cascade_slot(sh, bl, now, budget);
	}
	/* Everything ordered at or before now is done. */
	sh->elapsed = umax(sh->elapsed, now);
	/* Big slots move in paced chunks once the level below covers them
	 * (a level-l slot g from (g - 1) granules on). */
	for (unsigned int l = 1; l < LEVELS && budget; l++) {
		struct tw_lvl *v = &sh->lvl[l];

		if (!v->valid)
			lvl_scan(sh, l);
		if (v->g == NO_G || v->n <= LAZY_MAX ||
		    ((v->g - 1) << lvl_shift(l)) > sh->elapsed ||
		    lvl_wake(sh, l) > now)
			continue;
		budget = cascade_slot(sh, l, now, budget);
		if (!budget)
			more = true;
	}
out:
	shard_next(sh);
	return more;
}

/* ---- callbacks ---- */

/*
 * A callback starts now (under the shard lock): skip the ticks it is more
 * than a period late for, unless catching up, count, fill ev.
 */
static void tm_begin(struct tw_shard *sh, struct ao_timer *t, uint64_t now,
		     struct ao_timer_event *ev)
{
	uint64_t d = expires_of(t), p = period_of(t), k = 0;

	if (p && !(tgt(t) & TGT_CATCHUP) && now >= d + p) {
		k = (now - d) / p;
		d += k * p;
		set_expires(t, d);
		__atomic_fetch_add(&sh->skipped, k, __ATOMIC_RELAXED);
	}
	ev->deadline = d;
	ev->now = now;
	ev->late_ns = (int64_t)(now - d);
	ev->tick = p ? d / p : 0;
	ev->skipped = k;
	record_late(sh, ev->late_ns);
}

/* Wake cancel_sync() and destroy() waiters. */
static void done_notify(struct ao_timers *ts)
{
	ao_ec_notify_all(&ts->done_ec);
}

/*
 * Call the callback, then settle the state: a periodic timer is re-armed
 * at its next tick unless it was cancelled or armed meanwhile; one that
 * fired again while running (TS_RUN_DUE) runs again at once.
 */
static void tm_call(struct tw_shard *sh, struct ao_timer *t,
		    struct ao_timer_event *ev)
{
	struct ao_timers *ts = sh->ts;
	struct ao_timer *outer = cur_timer;
	struct ao_timers *outer_ts = cur_ts;

	for (;;) {
		bool again = false;
		uint64_t p;

		cur_timer = t;
		cur_ts = ts;
		t->fn(t, ev);
		cur_timer = outer;
		cur_ts = outer_ts;

		ao_tas_lock(&sh->lock);
		switch (tm_state(t)) {
		case TS_RUNNING:
			p = period_of(t);
			if (p && !sh->dead) {
				set_expires(t, ev->deadline + p);
				tm_set_state(t, TS_PENDING);
				OWN_ADD(sh->npending, 1);
				wheel_add(sh, t);
			} else {
				tm_set_state(t, TS_IDLE);
			}
			break;
		case TS_RUN_PENDING:
			tm_set_state(t, TS_PENDING);
			break;
		case TS_RUN_QUEUED:
			tm_set_state(t, TS_QUEUED);
			break;
		case TS_RUN_DUE:
			OWN_ADD(sh->npending, -1);
			if (sh->dead) {
				tm_set_state(t, TS_IDLE);
				break;
			}
			tm_set_state(t, TS_RUNNING);
			tm_begin(sh, t, ts_clock(ts), ev);
			again = true;
			break;
		default: /* TS_RUN_STOP */
			tm_set_state(t, TS_IDLE);
			break;
		}
		ao_tas_unlock(&sh->lock);
		if (!again)
			break;
	}
	/* SEQ_CST RMW: our state store comes before a waiter's check of
	 * running (pairs with the prepare in ao_timer_cancel_sync()). */
	__atomic_fetch_sub(&ts->running, 1, __ATOMIC_SEQ_CST);
	done_notify(ts);
}

void ao__timer_run_queued(struct ao_timer *t)
{
	struct tw_shard *sh = shard_of(t);
	struct ao_timers *ts;
	struct ao_timer_event ev;

	if (!sh) /* cannot happen: destroy waits for queued timers */
		return;
	ts = sh->ts;
	ao_tas_lock(&sh->lock);
	__atomic_fetch_sub(&sh->nqueued, 1, __ATOMIC_RELAXED);
	if (sh->dead) {
		/* Dropped by destroy, which counted it. */
		tm_set_state(t, TS_IDLE);
		ao_tas_unlock(&sh->lock);
		done_notify(ts);
		return;
	}
	/* Taken off the strand as TS_QUEUED: it runs now.  A cancel since
	 * then found it off the list and asked for no re-arm (TS_RUN_STOP),
	 * an arm for one after it (TS_RUN_PENDING): either way it runs, and
	 * tm_call() settles the state after. */
	if (tm_state(t) == TS_QUEUED)
		tm_set_state(t, TS_RUNNING);
	__atomic_fetch_add(&ts->running, 1, __ATOMIC_RELAXED);
	tm_begin(sh, t, ts_clock(ts), &ev);
	ao_tas_unlock(&sh->lock);
	tm_call(sh, t, &ev);
}

/*
 * Run the callbacks on sh's fire list, at most max of them.  may_run: the
 * caller is one of the executor's workers and may run a strand timer's
 * strand itself.
 */
static unsigned int run_fired(struct tw_shard *sh, unsigned int max,
			      bool may_run)
{
	struct ao_timers *ts = sh->ts;
	unsigned int n = 0;

	while (n < max) {
		struct ao_timer *t;
		struct ao_strand *s;
		struct ao_timer_event ev;

		ao_tas_lock(&sh->lock);
		t = sh->fire_head;
		if (!t) {
			ao_tas_unlock(&sh->lock);
			break;
		}
		list_del(sh, t);
		n++;
		s = strand_of(t);
		if (s) {
			bool run;

			OWN_ADD(sh->npending, -1);
			__atomic_fetch_add(&sh->nqueued, 1, __ATOMIC_RELAXED);
			/* Before it is linked: a strand runner can take it
			 * only once it is on the list. */
			tm_set_state(t, tm_state(t) == TS_PENDING ?
						TS_QUEUED :
						TS_RUN_QUEUED);
			run = ao__strand_timer_add(s, t, may_run);
			ao_tas_unlock(&sh->lock);
			if (run)
				ao__strand_run_timers(s);
			continue;
		}
		if (tm_state(t) == TS_RUN_PENDING) {
			/* Its callback still runs elsewhere: it runs again
			 * when that one returns. */
			tm_set_state(t, TS_RUN_DUE);
			ao_tas_unlock(&sh->lock);
			continue;
		}
		OWN_ADD(sh->npending, -1);
		tm_set_state(t, TS_RUNNING);
		__atomic_fetch_add(&ts->running, 1, __ATOMIC_RELAXED);
		tm_begin(sh, t, ts_clock(ts), &ev);
		ao_tas_unlock(&sh->lock);
		tm_call(sh, t, &ev);
	}
	return n;
}

/* One step of shard sh at now, then its callbacks; true if more is due. */
static bool shard_poll(struct tw_shard *sh, uint64_t now, bool may_run)
{
	uint64_t c0, dt;
	bool more;

	ao_tas_lock(&sh->lock);
	if (sh->dead) {
		ao_tas_unlock(&sh->lock);
		return false;
	}
	c0 = ao_cycles();
	more = wheel_advance(sh, now);
	dt = ao_cycles_to_ns(ao_cycles() - c0);
	OWN_INC(sh->polls);
	if (dt > sh->step_max_ns)
		__atomic_store_n(&sh->step_max_ns, dt, __ATOMIC_RELAXED);
	ao_tas_unlock(&sh->lock);
	if (run_fired(sh, RUN_BUDGET, may_run) == RUN_BUDGET)
		return true;
	/* The step published "now" while the fire list was full: publish
	 * the real next look now that it is empty. */
	ao_tas_lock(&sh->lock);
	if (!sh->fire_head && !sh->dead)
		shard_next(sh);
	ao_tas_unlock(&sh->lock);
	return more;
}

/* The earliest next_enc() over the shards. */
static uint64_t ts_next(const struct ao_timers *ts)
{
	uint64_t best = NO_TIME;

	for (unsigned int i = 0; i < ts->nshards; i++) {
		/* SEQ_CST: see publish_next(). */
		uint64_t v = __atomic_load_n(&ts->shards[i].next_pub,
					     __ATOMIC_SEQ_CST);

		if (v < best)
			best = v;
	}
	return best;
}

/* Poll every shard due at now; may_run as in run_fired().  Returns true
 * if it found anything due. */
static bool ts_poll(struct ao_timers *ts, uint64_t now, bool may_run)
{
	bool any = false;

	/* SEQ_CST RMW, then the load of dying: pairs with destroy's store
	 * of dying and its wait for active to drain. */
	bool outer = in_expiry;

	__atomic_fetch_add(&ts->active, 1, __ATOMIC_SEQ_CST);
	in_expiry = true;
	if (!__atomic_load_n(&ts->dying, __ATOMIC_SEQ_CST)) {
		for (unsigned int i = 0; i < ts->nshards; i++) {
			struct tw_shard *sh = &ts->shards[i];

			if ((LOAD(sh->next_pub) >> 1) > now)
				continue;
			any = true;
			while (shard_poll(sh, now, may_run))
				;
		}
	}
	in_expiry = outer;
	__atomic_fetch_sub(&ts->active, 1, __ATOMIC_RELEASE);
	return any;
}

/* ---- the driver (core/driver.h) ---- */

static inline struct ao_timers *ts_of(struct ao_driver *d)
{
	return container_of(d, struct ao_timers, drv);
}

/* A busy worker between items: fire what is due at now. */
static bool ts_check(struct ao_timers *ts, uint64_t now)
{
	uint64_t n;

	if (ts->test_clock)
		return false;
	n = ts_next(ts);
	if ((n >> 1) > now)
		return false;
	return ts_poll(ts, now, true);
}

/* An idle worker: fire what is due, and spin to a precise deadline that
 * is closer than the lead; true if it fired any. */
static bool ts_idle(struct ao_timers *ts)
{
	uint64_t n, now, t;

	if (ts->test_clock || __atomic_load_n(&ts->dying, __ATOMIC_RELAXED))
		return false;
	n = ts_next(ts);
	if (n == NO_TIME)
		return false;
	now = ao_now_ns();
	t = n >> 1;
	if (t <= now)
		return ts_poll(ts, now, true);
	if ((n & 1) || t - now > LOAD(ts->lead_ns))
		return false;
	/* A precise deadline within the lead: spin to it. */
	__atomic_fetch_add(&ts->spins, 1, __ATOMIC_RELAXED);
	while ((now = ao_now_ns()) < t) {
		if (t - now > TIGHT_NS)
			for (int i = 0; i < 16; i++)
				cpu_relax();
		/* Re-read: an arm may have moved it earlier. */
		n = ts_next(ts);
		if ((n >> 1) < t)
			t = n >> 1;
	}
	return ts_poll(ts, now, true);
}

/* Lower this thread's timer slack to the service's, once. */
static void set_slack(const struct ao_timers *ts)
{
	if (thread_slack == ts->slack_ns)
		return;
	if (!prctl(PR_SET_TIMERSLACK, (unsigned long)ts->slack_ns, 0, 0, 0))
		thread_slack = ts->slack_ns;
}

/*
 * A worker is about to sleep: the timeout (ns) it must wake up after to
 * serve the next deadline, or -1 for none; 0 means do not sleep.  *token
 * goes to sleep_end() when it wakes.
 */
static int64_t sleep_begin(struct ao_timers *ts, uint64_t *token)
{
	uint64_t n, t, now, su;

	*token = 0;
	if (ts->test_clock || __atomic_load_n(&ts->dying, __ATOMIC_RELAXED))
		return -1;
	n = ts_next(ts);
	if (n == NO_TIME)
		return -1;
	t = n >> 1;
	if (!(n & 1)) {
		uint64_t lead = LOAD(ts->lead_ns);

		t = t > lead ? t - lead : 0;
	}
	now = ao_now_ns();
	if (t <= now)
		return 0;
	su = __atomic_load_n(&ts->sleep_until, __ATOMIC_SEQ_CST);
	while (t < su) {
		/* SEQ_CST: pairs with the fence in next_lowered(). */
		if (__atomic_compare_exchange_n(&ts->sleep_until, &su, t, false,
						__ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST)) {
			*token = t;
			set_slack(ts);
			__atomic_fetch_add(&ts->sleeps, 1, __ATOMIC_RELAXED);
			return (int64_t)(t - now);
		}
	}
	return -1; /* another worker wakes up earlier */
}

static void sleep_end(struct ao_timers *ts, uint64_t token)
{
	uint64_t now, err, est, t = token;

	if (!token)
		return;
	__atomic_compare_exchange_n(&ts->sleep_until, &t, NO_TIME, false,
				    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
	now = ao_now_ns();
	if (now < token)
		return; /* woken early, not by the timeout */
	/* A decaying maximum of how late timed wake-ups come: the lead
	 * of precise timers follows it. */
	err = now - token;
	est = LOAD(ts->wake_err_ns);
	est = err > est ? err : est - est / 16;
	__atomic_store_n(&ts->wake_err_ns, est, __ATOMIC_RELAXED);
	__atomic_store_n(&ts->lead_ns,
			 umin(umax(est + LEAD_MARGIN_NS, LEAD_MIN_NS),
			      ts->precise_max_ns),
			 __ATOMIC_RELAXED);
}

static bool timers_run(struct ao_driver *d, uint64_t now, bool idle)
{
	struct ao_timers *ts = ts_of(d);

	return idle ? ts_idle(ts) : ts_check(ts, now);
}

/* One worker at a time sleeps until the next deadline (sleep_until); the
 * others sleep until woken.  Called after the worker's prepare: see
 * next_lowered() for the pairing. */
static void timers_park(struct ao_driver *d, struct ao_park *p)
{
	struct ao_timers *ts = ts_of(d);
	uint64_t token;
	int64_t timeout = sleep_begin(ts, &token);

	if (!timeout)
		return; /* a deadline is (nearly) due: do not sleep */
	p->wait(p, timeout);
	sleep_end(ts, token);
}

/* The service's memory is its own: the executor lets go of it here, once
 * no worker can call into it (core/driver.h). */
static void timers_release(struct ao_driver *d)
{
	struct ao_timers *ts = ts_of(d);

	free(ts->shards);
	free(ts);
}

static const struct ao_driver_ops timers_ops = {
	.run = timers_run,
	.park = timers_park,
	.release = timers_release,
};

/* ---- the timer API ---- */

static uint32_t thread_number(void)
{
	if (!thread_no)
		thread_no =
			__atomic_add_fetch(&thread_seq, 1, __ATOMIC_RELAXED);
	return thread_no;
}

int ao_timer_init(struct ao_timer *t, struct ao_timers *ts, ao_timer_fn fn)
{
	unsigned int idx, rest;
	int w;

	if (!t || !ts || !fn)
		return -EINVAL;
	w = ao_exec_worker_index(ts->exec);
	rest = ts->nshards > ts->nworkers ? ts->nshards - ts->nworkers : 0;
	if (w >= 0)
		idx = (unsigned int)w & (ts->nshards - 1);
	else if (rest)
		idx = ts->nworkers + thread_number() % rest;
	else
		idx = thread_number() & (ts->nshards - 1);
	memset(t, 0, sizeof(*t));
	t->fn = fn;
	t->target = (uintptr_t)&ts->shards[idx];
	return 0;
}

int ao_timer_init_strand(struct ao_timer *t, struct ao_strand *s,
			 ao_timer_fn fn)
{
	if (!t || !s || !fn || !s->exec || !ao_timers_of(s->exec))
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	t->fn = fn;
	t->target = (uintptr_t)s | TGT_STRAND;
	return 0;
}

/*
 * Arm t, which is in state st, at x (under the shard lock): out of the
 * common case (idle or pending).
 */
static __attribute__((noinline)) int
arm_slow(struct tw_shard *sh, struct ao_timer *t, unsigned int st)
{
	struct ao_strand *s;

	switch (st) {
	case TS_RUNNING:
	case TS_RUN_STOP:
		OWN_ADD(sh->npending, 1);
		break;
	case TS_RUN_PENDING:
		list_del(sh, t);
		break;
	case TS_RUN_DUE:
		break;
	case TS_QUEUED:
	case TS_RUN_QUEUED:
		s = strand_of(t);
		if (ao__strand_timer_del(s, t)) {
			__atomic_fetch_sub(&sh->nqueued, 1, __ATOMIC_RELAXED);
			OWN_ADD(sh->npending, 1);
			return st == TS_QUEUED ? TS_PENDING : TS_RUN_PENDING;
		}
		/* A turn took it: it is running now. */
		OWN_ADD(sh->npending, 1);
		break;
	}
	return TS_RUN_PENDING;
}

static inline int arm(struct ao_timer *t, uint64_t x, uint64_t period,
		      uintptr_t flags)
{
	struct tw_shard *sh;
	unsigned int st, to = TS_PENDING;
	uintptr_t v;

	if (unlikely(!t || !t->fn))
		return -EINVAL;
	sh = shard_of(t);
	if (unlikely(!sh))
		return -ESHUTDOWN;
	ao_tas_lock(&sh->lock);
	if (unlikely(sh->dead)) {
		ao_tas_unlock(&sh->lock);
		return -ESHUTDOWN;
	}
	st = tm_state(t);
	if (likely(st == TS_PENDING))
		list_del(sh, t);
	else if (likely(st == TS_IDLE))
		OWN_ADD(sh->npending, 1);
	else
		to = (unsigned int)arm_slow(sh, t, st);
	v = tgt(t);
	if (unlikely((v & TGT_FLAGS) != flags))
		__atomic_store_n(&t->target,
				 (v & ~(uintptr_t)TGT_FLAGS) | flags,
				 __ATOMIC_RELAXED);
	set_expires(t, x);
	/* RELEASE, as tm_set_state(). */
	__atomic_store_n(&t->ctl, period | to, __ATOMIC_RELEASE);
	wheel_add(sh, t);
	OWN_INC(sh->armed);
	ao_tas_unlock(&sh->lock);
	return 0;
}

int ao_timer_arm_at(struct ao_timer *t, uint64_t deadline_ns)
{
	return arm(t, deadline_ns, 0, 0);
}

int ao_timer_arm(struct ao_timer *t, uint64_t delay_ns)
{
	struct tw_shard *sh;
	uint64_t now;

	if (!t || !t->fn)
		return -EINVAL;
	sh = shard_of(t);
	if (!sh)
		return -ESHUTDOWN;
	now = ts_clock(sh->ts);
	return arm(t, now + delay_ns < now ? NO_TIME >> 2 : now + delay_ns, 0,
		   0);
}

int ao_timer_arm_periodic(struct ao_timer *t, uint64_t first_ns,
			  uint64_t period_ns, unsigned int flags)
{
	uint64_t p;
	uintptr_t f = 0;

	if (flags & ~(AO_TIMER_CATCHUP | AO_TIMER_PRECISE))
		return -EINVAL;
	p = (period_ns + AO_TIMER_PERIOD_UNIT / 2) & ~TS_MASK;
	if (!p || period_ns > (NO_TIME >> 2))
		return -EINVAL;
	if (flags & AO_TIMER_CATCHUP)
		f |= TGT_CATCHUP;
	if (flags & AO_TIMER_PRECISE)
		f |= TGT_PRECISE;
	return arm(t, first_ns, p, f);
}

/* Cancel under the shard lock; true if it stopped a pending run. */
static bool cancel_locked(struct tw_shard *sh, struct ao_timer *t)
{
	unsigned int st = tm_state(t);
	struct ao_strand *s;

	switch (st) {
	case TS_PENDING:
		list_del(sh, t);
		tm_set_state(t, TS_IDLE);
		break;
	case TS_RUN_PENDING:
		list_del(sh, t);
		tm_set_state(t, TS_RUN_STOP);
		break;
	case TS_RUN_DUE:
		tm_set_state(t, TS_RUN_STOP);
		break;
	case TS_QUEUED:
	case TS_RUN_QUEUED:
		s = strand_of(t);
		if (!ao__strand_timer_del(s, t)) {
			/* A turn took it and runs it: no re-arm after. */
			tm_set_state(t, TS_RUN_STOP);
			return false;
		}
		__atomic_fetch_sub(&sh->nqueued, 1, __ATOMIC_RELAXED);
		tm_set_state(t, st == TS_QUEUED ? TS_IDLE : TS_RUN_STOP);
		OWN_INC(sh->cancelled);
		return true;
	case TS_RUNNING:
		tm_set_state(t, TS_RUN_STOP);
		return false;
	default: /* idle, or already stopped */
		return false;
	}
	OWN_ADD(sh->npending, -1);
	OWN_INC(sh->cancelled);
	return true;
}

bool ao_timer_cancel(struct ao_timer *t)
{
	struct tw_shard *sh;
	bool r;

	if (!t)
		return false;
	/* Not armed: nothing to take (a racy look, but an arm that races
	 * with this cancel may win either way). */
	if (tm_state(t) == TS_IDLE)
		return false;
	sh = shard_of(t);
	if (!sh)
		return false;
	ao_tas_lock(&sh->lock);
	r = cancel_locked(sh, t);
	ao_tas_unlock(&sh->lock);
	return r;
}

bool ao_timer_cancel_sync(struct ao_timer *t)
{
	struct tw_shard *sh;
	struct ao_timers *ts;
	struct ao_strand *s;
	bool r;

	if (!t)
		return false;
	sh = shard_of(t);
	if (!sh)
		return false;
	ts = sh->ts;
	ao_tas_lock(&sh->lock);
	r = cancel_locked(sh, t);
	ao_tas_unlock(&sh->lock);
	/* Its own callback, or its strand, cannot wait for itself. */
	if (cur_timer == t)
		return r;
	s = strand_of(t);
	if (s && ao_strand_current() == s)
		return r;
	for (;;) {
		uint32_t key = ao_ec_prepare(&ts->done_ec);

		/* After the SEQ_CST prepare: either we see the callback's
		 * end, or its notify sees us. */
		if (!st_running(tm_state(t))) {
			ao_ec_cancel(&ts->done_ec);
			break;
		}
		ao_ec_wait(&ts->done_ec, key, -1);
	}
	return r;
}

bool ao_timer_pending(const struct ao_timer *t)
{
	return t && st_pending(tm_state(t));
}

bool ao_timer_running(const struct ao_timer *t)
{
	return t && st_running(tm_state(t));
}

uint64_t ao_timer_expires(const struct ao_timer *t)
{
	return t ? expires_of(t) : 0;
}

/* ---- the service ---- */

int ao_timers_create(const struct ao_timers_config *cfg, struct ao_timers **out)
{
	struct ao_timers *ts;
	unsigned int n = 4;
	uint64_t now;
	void *mem;
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg || !cfg->exec)
		return -EINVAL;
	if (posix_memalign(&mem, AO_CACHELINE_SIZE, sizeof(*ts)))
		return -ENOMEM;
	ts = mem;
	memset(ts, 0, sizeof(*ts));
	ts->exec = cfg->exec;
	ts->nworkers = ao_exec_workers(cfg->exec);
	while (n < 2 * ts->nworkers && n < MAX_SHARDS)
		n *= 2;
	ts->nshards = n;
	ts->test_clock = cfg->test_clock;
	ts->test_now = cfg->test_start_ns;
	ts->slack_ns = cfg->slack_ns ? cfg->slack_ns :
				       AO_TIMERS_DEFAULT_SLACK_NS;
	ts->precise_max_ns = cfg->precise_max_ns ? cfg->precise_max_ns :
						   AO_TIMERS_DEFAULT_PRECISE_NS;
	ts->lead_ns = umin(4 * LEAD_MIN_NS, ts->precise_max_ns);
	ts->sleep_until = NO_TIME;
	ts->drv.ops = &timers_ops;
	ao_ec_init(&ts->done_ec);
	if (posix_memalign(&mem, AO_CACHELINE_SIZE,
			   n * sizeof(struct tw_shard))) {
		free(ts);
		return -ENOMEM;
	}
	ts->shards = mem;
	memset(ts->shards, 0, n * sizeof(struct tw_shard));
	now = ts_clock(ts);
	for (unsigned int i = 0; i < n; i++) {
		struct tw_shard *sh = &ts->shards[i];

		sh->idx = i;
		sh->ts = ts;
		sh->elapsed = now;
		sh->next = NO_TIME;
		sh->next_pub = NO_TIME;
		sh->fire_tail = &sh->fire_head;
		for (unsigned int l = 0; l < LEVELS; l++) {
			sh->lvl[l].valid = true;
			sh->lvl[l].g = NO_G;
		}
	}
	err = ao__exec_attach_driver(cfg->exec, &ts->drv);
	if (err) {
		timers_release(&ts->drv);
		return err;
	}
	*out = ts;
	return 0;
}

struct ao_timers *ao_timers_of(const struct ao_exec *ex)
{
	struct ao_driver *d = ex ? ao__exec_driver(ex) : NULL;

	return d && d->ops == &timers_ops ? ts_of(d) : NULL;
}

uint64_t ao_timers_now(const struct ao_timers *ts)
{
	return ts ? ts_clock(ts) : ao_now_ns();
}

/* Drop every timer of sh's wheel and fire list; how many were pending. */
static uint64_t shard_drop(struct tw_shard *sh)
{
	uint64_t n;

	ao_tas_lock(&sh->lock);
	sh->dead = true;
	n = sh->npending;
	for (unsigned int l = 0; l < LEVELS; l++) {
		for (unsigned int i = 0; i < SLOTS; i++) {
			struct ao_timer *t;

			while ((t = sh->slot[l][i])) {
				list_del(sh, t);
				tm_set_state(t, tm_state(t) == TS_RUN_PENDING ?
							TS_RUN_STOP :
							TS_IDLE);
			}
			sh->cnt[l][i] = 0;
		}
		sh->occ[l][0] = sh->occ[l][1] = 0;
	}
	while (sh->fire_head) {
		struct ao_timer *t = sh->fire_head;

		list_del(sh, t);
		tm_set_state(t, tm_state(t) == TS_RUN_PENDING ? TS_RUN_STOP :
								TS_IDLE);
	}
	/* TS_RUN_DUE timers are on no list: tm_call() sees dead. */
	__atomic_store_n(&sh->npending, 0, __ATOMIC_RELAXED);
	sh->next = NO_TIME;
	publish_next(sh);
	ao_tas_unlock(&sh->lock);
	return n;
}

static uint64_t queued_total(const struct ao_timers *ts)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < ts->nshards; i++)
		n += __atomic_load_n(&ts->shards[i].nqueued, __ATOMIC_SEQ_CST);
	return n;
}

int ao_timers_destroy(struct ao_timers *ts, uint64_t *pending)
{
	uint64_t n = 0;

	if (pending)
		*pending = 0;
	if (!ts)
		return -EINVAL;
	if (cur_ts == ts || ao_exec_worker_index(ts->exec) >= 0)
		return -EDEADLK;
	/* SEQ_CST: pairs with the RMW-then-load in ts_poll(): either a
	 * step sees dying, or we see it counted in active and wait. */
	__atomic_store_n(&ts->dying, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&ts->active, __ATOMIC_ACQUIRE))
		sched_yield();
	for (unsigned int i = 0; i < ts->nshards; i++)
		n += shard_drop(&ts->shards[i]);
	/* Timers queued on strands are dropped by the strands' runners
	 * (ao__timer_run_queued() sees dead); running callbacks end. */
	n += queued_total(ts);
	for (;;) {
		uint32_t key = ao_ec_prepare(&ts->done_ec);

		if (!queued_total(ts) &&
		    !__atomic_load_n(&ts->running, __ATOMIC_SEQ_CST)) {
			ao_ec_cancel(&ts->done_ec);
			break;
		}
		ao_ec_wait(&ts->done_ec, key, 100000000);
	}
	ao__exec_detach_driver(ts->exec, &ts->drv);
	if (pending)
		*pending = n;
	return 0;
}

int ao_timers_advance(struct ao_timers *ts, uint64_t ns)
{
	uint64_t now;

	if (!ts || !ts->test_clock)
		return -EINVAL;
	if (cur_ts == ts)
		return -EDEADLK;
	/* RELEASE: pairs with the ACQUIRE in ts_clock(). */
	now = __atomic_add_fetch(&ts->test_now, ns, __ATOMIC_RELEASE);
	while (ts_poll(ts, now, false))
		;
	return 0;
}

int ao_timers_stats_reset(struct ao_timers *ts)
{
	if (!ts)
		return -EINVAL;
	for (unsigned int i = 0; i < ts->nshards; i++) {
		struct tw_shard *sh = &ts->shards[i];

		/* The shard lock orders us with the counters written under
		 * it; the others are atomic. */
		ao_tas_lock(&sh->lock);
		__atomic_store_n(&sh->armed, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->cancelled, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->polls, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->step_max_ns, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->fired, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->skipped, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->late_max, 0, __ATOMIC_RELAXED);
		for (unsigned int b = 0; b < HBUCKETS; b++)
			__atomic_store_n(&sh->hist[b], 0, __ATOMIC_RELAXED);
		ao_tas_unlock(&sh->lock);
	}
	__atomic_store_n(&ts->sleeps, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ts->spins, 0, __ATOMIC_RELAXED);
	return 0;
}

int ao_timers_stats(const struct ao_timers *ts, struct ao_timers_stats *st)
{
	uint64_t hist[HBUCKETS] = { 0 };
	uint64_t total = 0;

	if (!ts || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	for (unsigned int i = 0; i < ts->nshards; i++) {
		const struct tw_shard *sh = &ts->shards[i];

		st->armed += LOAD(sh->armed);
		st->cancelled += LOAD(sh->cancelled);
		st->pending += LOAD(sh->npending) + LOAD(sh->nqueued);
		st->fired += LOAD(sh->fired);
		st->skipped += LOAD(sh->skipped);
		st->polls += LOAD(sh->polls);
		st->step_max_ns = umax(st->step_max_ns, LOAD(sh->step_max_ns));
		st->late_max_ns = umax(st->late_max_ns, LOAD(sh->late_max));
		for (unsigned int b = 0; b < HBUCKETS; b++) {
			uint64_t v = LOAD(sh->hist[b]);

			hist[b] += v;
			total += v;
		}
	}
	if (total) {
		uint64_t seen = 0, p50 = (total + 1) / 2;
		uint64_t p99 = total - total / 100;
		bool half = false;

		for (unsigned int b = 0; b < HBUCKETS; b++) {
			seen += hist[b];
			if (!half && seen >= p50) {
				st->late_p50_ns = hbucket_top(b);
				half = true;
			}
			if (seen >= p99) {
				st->late_p99_ns = hbucket_top(b);
				break;
			}
		}
		st->late_p50_ns = umin(st->late_p50_ns, st->late_max_ns);
		st->late_p99_ns = umin(st->late_p99_ns, st->late_max_ns);
	}
	st->sleeps = LOAD(ts->sleeps);
	st->spins = LOAD(ts->spins);
	return 0;
}
