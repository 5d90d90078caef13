// SPDX-License-Identifier: MIT
/*
 * Timers: expiry order (deadline order, FIFO for equal deadlines) over the
 * test clock; cancel before and during the callback; periodic ticks (tick
 * numbers, skips, catch-up, no drift); re-arm from the callback; strand
 * timers serialised with the strand's items; cancel-versus-fire races,
 * exactly once (many threads, many timers, the real clock); cancel_sync
 * waits for a running callback, and does not wait for itself or its own
 * strand; a million pending timers armed and cancelled, memory checked;
 * destroy with timers pending; a due timer runs ahead of a queue of items;
 * the service's errors and statistics.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/clock.h>
#include <aorta/core/exec.h>
#include <aorta/core/group.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include "helpers.h"

#define MS 1000000ull
#define US 1000ull

static struct ao_timers *t_timers(struct ao_exec *ex, bool test_clock)
{
	struct ao_timers_config cfg = AO_TIMERS_CONFIG_INIT;
	struct ao_timers *ts;

	cfg.exec = ex;
	cfg.test_clock = test_clock;
	cfg.test_start_ns = test_clock ? 1000 * MS : 0;
	assert_int_equal(ao_timers_create(&cfg, &ts), 0);
	assert_ptr_equal(ao_timers_of(ex), ts);
	return ts;
}

static void t_timers_destroy(struct ao_timers *ts, uint64_t expect_pending)
{
	uint64_t pending = 99;

	assert_int_equal(ao_timers_destroy(ts, &pending), 0);
	assert_int_equal(pending, expect_pending);
}

/* ---- order over the test clock ---- */

#define NORDER 64

struct rec {
	struct ao_timer t;
	int id;
	int *log;
	int *nlog;
	struct ao_timer_event ev;
	int runs;
};

static void rec_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct rec *r = container_of(t, struct rec, t);

	r->log[(*r->nlog)++] = r->id;
	r->ev = *ev;
	r->runs++;
}

static void test_order(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, true);
	uint64_t t0 = ao_timers_now(ts);
	struct rec r[NORDER];
	int log[NORDER], nlog = 0;
	uint64_t step;

	(void)state;
	for (int k = 0; k < NORDER; k++) {
		assert_int_equal(ao_timer_init(&r[k].t, ts, rec_fn), 0);
		r[k].id = k;
		r[k].log = log;
		r[k].nlog = &nlog;
		r[k].runs = 0;
	}
	/* Deadlines spread over every level (100 ns to hours), four of each:
	 * the groups armed latest first, each group in id order. */
	for (int j = NORDER / 4 - 1; j >= 0; j--)
		for (int q = 0; q < 4; q++) {
			int k = j * 4 + q;
			uint64_t d = t0 + 100 + ((uint64_t)j << (j + 4));

			assert_int_equal(ao_timer_arm_at(&r[k].t, d), 0);
			assert_true(ao_timer_pending(&r[k].t));
			assert_int_equal(ao_timer_expires(&r[k].t), d);
		}
	/* Nothing fires before its time. */
	assert_int_equal(ao_timers_advance(ts, 99), 0);
	assert_int_equal(nlog, 0);
	/* Step through time in uneven strides: each timer fires once, at
	 * or after its deadline. */
	/* (A while loop: nlog grows in the callbacks each advance runs.) */
	step = 1;
	while (nlog < NORDER) {
		assert_int_equal(ao_timers_advance(ts, step), 0);
		for (int i = 0; i < nlog; i++) {
			struct rec *x = &r[log[i]];

			assert_true(x->ev.late_ns >= 0);
			assert_true(x->ev.deadline <= ao_timers_now(ts));
		}
		step = step * 3 + 7;
	}
	assert_int_equal(nlog, NORDER);
	for (int i = 0; i < NORDER; i++) {
		assert_int_equal(log[i], i); /* deadline order, then FIFO */
		assert_int_equal(r[i].runs, 1);
		assert_false(ao_timer_pending(&r[i].t));
	}
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* Many equal and near deadlines in one level-0 granule, armed out of
 * order: fired sorted by deadline, FIFO among equals. */
static void test_order_within_granule(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, true);
	uint64_t t0 = ao_timers_now(ts);
	struct rec r[NORDER];
	int log[NORDER], nlog = 0;

	(void)state;
	for (int k = 0; k < NORDER; k++) {
		assert_int_equal(ao_timer_init(&r[k].t, ts, rec_fn), 0);
		r[k].id = k;
		r[k].log = log;
		r[k].nlog = &nlog;
	}
	/* id k has deadline t0 + 1000 * (k / 8): arm the groups backwards,
	 * and inside a group in id order. */
	for (int g = NORDER / 8 - 1; g >= 0; g--)
		for (int q = 0; q < 8; q++)
			assert_int_equal(ao_timer_arm_at(&r[g * 8 + q].t,
							 t0 + 1000 * g),
					 0);
	assert_int_equal(ao_timers_advance(ts, 100 * US), 0);
	assert_int_equal(nlog, NORDER);
	for (int i = 0; i < NORDER; i++)
		assert_int_equal(log[i], i);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- cancel, re-arm, states ---- */

static void test_cancel_and_rearm(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, true);
	struct ao_timers_stats st;
	struct rec a, b;
	int log[8], nlog = 0;

	(void)state;
	assert_int_equal(ao_timer_init(&a.t, ts, rec_fn), 0);
	assert_int_equal(ao_timer_init(&b.t, ts, rec_fn), 0);
	a.id = 1, b.id = 2;
	a.log = b.log = log;
	a.nlog = b.nlog = &nlog;
	a.runs = b.runs = 0;
	assert_false(ao_timer_cancel(&a.t)); /* not armed */
	assert_int_equal(ao_timer_arm(&a.t, 10 * MS), 0);
	assert_int_equal(ao_timer_arm(&b.t, 20 * MS), 0);
	assert_true(ao_timer_cancel(&a.t));
	assert_false(ao_timer_cancel(&a.t));
	assert_false(ao_timer_pending(&a.t));
	/* Re-arm a pending timer: it moves. */
	assert_int_equal(ao_timer_arm(&b.t, 5 * MS), 0);
	assert_int_equal(ao_timers_advance(ts, 5 * MS), 0);
	assert_int_equal(nlog, 1);
	assert_int_equal(log[0], 2);
	assert_int_equal(b.ev.late_ns, 0);
	assert_false(ao_timer_cancel(&b.t)); /* already ran */
	assert_int_equal(ao_timers_advance(ts, 50 * MS), 0);
	assert_int_equal(nlog, 1);
	/* A past deadline fires at the next look. */
	assert_int_equal(ao_timer_arm_at(&a.t, 1), 0);
	assert_int_equal(ao_timers_advance(ts, 0), 0);
	assert_int_equal(nlog, 2);
	assert_int_equal(a.ev.deadline, 1);
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_int_equal(st.armed, 4);
	assert_int_equal(st.fired, 2);
	assert_int_equal(st.cancelled, 1);
	assert_int_equal(st.pending, 0);
	assert_true(st.polls > 0);
	/* A window: the counters start again, the pending count stays. */
	assert_int_equal(ao_timer_arm(&b.t, 1 * MS), 0);
	assert_int_equal(ao_timers_stats_reset(ts), 0);
	assert_int_equal(ao_timers_stats_reset(NULL), -EINVAL);
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_int_equal(st.armed, 0);
	assert_int_equal(st.fired, 0);
	assert_int_equal(st.cancelled, 0);
	assert_int_equal(st.polls, 0);
	assert_int_equal(st.late_max_ns, 0);
	assert_int_equal(st.pending, 1);
	assert_int_equal(ao_timers_advance(ts, 2 * MS), 0);
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_int_equal(st.fired, 1);
	assert_int_equal(st.late_max_ns, 1 * MS);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

struct chain {
	struct ao_timer t;
	int left;
	int runs;
};

static void chain_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct chain *c = container_of(t, struct chain, t);

	(void)ev;
	c->runs++;
	assert_true(ao_timer_running(t));
	assert_false(ao_timer_pending(t));
	if (--c->left > 0)
		assert_int_equal(ao_timer_arm(t, 1 * MS), 0);
}

static void test_rearm_in_callback(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, true);
	struct chain c = { .left = 10 };

	(void)state;
	assert_int_equal(ao_timer_init(&c.t, ts, chain_fn), 0);
	assert_int_equal(ao_timer_arm(&c.t, 1 * MS), 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(ao_timers_advance(ts, 1 * MS), 0);
	assert_int_equal(c.runs, 10);
	assert_false(ao_timer_pending(&c.t));
	assert_false(ao_timer_running(&c.t));
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- periodic ---- */

struct tick {
	struct ao_timer t;
	uint64_t ticks[64];
	uint64_t deadlines[64];
	uint64_t skipped[64];
	int n;
	int stop_at;
};

static void tick_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct tick *k = container_of(t, struct tick, t);

	if (k->n < 64) {
		k->ticks[k->n] = ev->tick;
		k->deadlines[k->n] = ev->deadline;
		k->skipped[k->n] = ev->skipped;
	}
	/* Atomic: the real-clock test reads it while ticks run. */
	__atomic_store_n(&k->n, k->n + 1, __ATOMIC_RELAXED);
	if (k->n == k->stop_at)
		ao_timer_cancel(t);
}

static void test_periodic(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, true);
	uint64_t t0 = ao_timers_now(ts);
	/* 60 Hz: 16,666,666.67 ns, kept as 16,666,664 (a multiple of 8). */
	uint64_t p = 1000000000ull / 60, pe = 16666664;
	uint64_t first = t0 + pe;
	struct tick k = { .stop_at = 0 };
	struct ao_timers_stats st;

	(void)state;
	assert_int_equal(ao_timer_init(&k.t, ts, tick_fn), 0);
	assert_int_equal(ao_timer_arm_periodic(&k.t, first, 0, 0), -EINVAL);
	assert_int_equal(ao_timer_arm_periodic(&k.t, first, p, 0x80), -EINVAL);
	assert_int_equal(ao_timer_arm_periodic(&k.t, first, p, 0), 0);
	/* One tick per period, no drift: deadline k = first + k * period. */
	for (int i = 0; i < 10; i++)
		assert_int_equal(ao_timers_advance(ts, pe), 0);
	assert_int_equal(k.n, 10);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(k.deadlines[i], first + (uint64_t)i * pe);
		assert_int_equal(k.ticks[i], k.ticks[0] + (uint64_t)i);
		assert_int_equal(k.skipped[i], 0);
	}
	/* 3.5 periods at once: the three late ticks are skipped, one runs
	 * (the latest due), and says so. */
	assert_int_equal(ao_timers_advance(ts, 3 * pe + pe / 2), 0);
	assert_int_equal(k.n, 11);
	assert_int_equal(k.skipped[10], 2);
	assert_int_equal(k.ticks[10], k.ticks[9] + 3);
	assert_int_equal(k.deadlines[10], first + 12 * pe);
	assert_int_equal(ao_timers_advance(ts, pe / 2), 0);
	assert_int_equal(k.n, 12);
	assert_int_equal(k.deadlines[11], first + 13 * pe);
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_int_equal(st.skipped, 2);
	assert_true(ao_timer_pending(&k.t));
	/* Cancel stops it for good. */
	assert_true(ao_timer_cancel(&k.t));
	assert_int_equal(ao_timers_advance(ts, 10 * pe), 0);
	assert_int_equal(k.n, 12);

	/* Catch-up: every late tick runs, back to back. */
	memset(&k, 0, sizeof(k));
	assert_int_equal(ao_timer_init(&k.t, ts, tick_fn), 0);
	first = ao_timers_now(ts) + pe;
	assert_int_equal(
		ao_timer_arm_periodic(&k.t, first, p, AO_TIMER_CATCHUP), 0);
	assert_int_equal(ao_timers_advance(ts, 5 * pe), 0);
	assert_int_equal(k.n, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(k.deadlines[i], first + (uint64_t)i * pe);
		assert_int_equal(k.skipped[i], 0);
	}
	/* Cancel from its own callback: the tick that runs is the last. */
	k.stop_at = 7;
	assert_int_equal(ao_timers_advance(ts, 5 * pe), 0);
	assert_int_equal(k.n, 7);
	assert_false(ao_timer_pending(&k.t));
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- strands ---- */

struct room {
	struct ao_strand strand;
	struct ao_timer tick;
	int inside;
	int bad;
	long items;
	long ticks;
	long items_at_tick; /* plain: the strand serialises */
};

struct rpkt {
	struct ao_work work;
	struct room *r;
};

static void room_enter(struct room *r)
{
	if (__atomic_fetch_add(&r->inside, 1, __ATOMIC_RELAXED) != 0)
		r->bad = 1;
	if (ao_strand_current() != &r->strand)
		r->bad = 2;
}

static void room_leave(struct room *r)
{
	__atomic_fetch_sub(&r->inside, 1, __ATOMIC_RELAXED);
}

static void rpkt_fn(struct ao_work *w)
{
	struct rpkt *p = container_of(w, struct rpkt, work);

	room_enter(p->r);
	p->r->items++;
	t_spin_ns(2000);
	room_leave(p->r);
}

static void room_tick(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct room *r = container_of(t, struct room, tick);

	(void)ev;
	room_enter(r);
	/* Atomic: the test reads the count while the timer still runs. */
	__atomic_fetch_add(&r->ticks, 1, __ATOMIC_RELAXED);
	r->items_at_tick = r->items;
	t_spin_ns(2000);
	room_leave(r);
}

static void test_strand_serialised(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, false);
	long n = t_scaled(20000, 2000);
	struct rpkt *pk = calloc((size_t)n, sizeof(*pk));
	struct room r;
	long ticks;

	(void)state;
	assert_non_null(pk);
	memset(&r, 0, sizeof(r));
	ao_strand_init(&r.strand, ex);
	assert_int_equal(ao_timer_init_strand(&r.tick, &r.strand, room_tick),
			 0);
	assert_int_equal(ao_timer_arm_periodic(&r.tick, ao_now_ns() + 200 * US,
					       200 * US, 0),
			 0);
	t_watchdog_arm(60, "strand timers");
	for (long i = 0; i < n; i++) {
		pk[i].r = &r;
		ao_work_init(&pk[i].work, rpkt_fn);
		assert_int_equal(ao_strand_submit(&r.strand, &pk[i].work), 0);
		if (i % 64 == 0)
			t_spin_ns(20000);
	}
	assert_int_equal(ao_exec_drain(ex), 0);
	ticks = __atomic_load_n(&r.ticks, __ATOMIC_RELAXED);
	assert_true(ticks > 0);
	assert_true(ao_timer_cancel_sync(&r.tick));
	/* Nothing runs after a cancel_sync that stopped it. */
	ticks = __atomic_load_n(&r.ticks, __ATOMIC_RELAXED);
	t_sleep_ns(2 * MS);
	assert_int_equal(__atomic_load_n(&r.ticks, __ATOMIC_RELAXED), ticks);
	t_watchdog_disarm();
	assert_int_equal(r.bad, 0);
	assert_int_equal(r.items, n);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ao_strand_destroy(&r.strand), 0);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	free(pk);
}

/* A strand item cancels the strand's own timer synchronously while it is
 * queued behind it: no deadlock, and it never runs. */
struct self_room {
	struct ao_strand strand;
	struct ao_timer t;
	struct ao_work w;
	int timer_runs;
	int cancelled;
	int block; /* the item spins while set */
};

static void self_timer(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct self_room *r = container_of(t, struct self_room, t);

	(void)ev;
	r->timer_runs++;
}

static void self_item(struct ao_work *w)
{
	struct self_room *r = container_of(w, struct self_room, w);

	while (__atomic_load_n(&r->block, __ATOMIC_ACQUIRE))
		t_spin_ns(1000);
	/* The timer fired meanwhile and is queued on this strand. */
	r->cancelled = ao_timer_cancel_sync(&r->t);
}

static void test_strand_cancel_sync_from_strand(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, false);
	struct self_room r;

	(void)state;
	memset(&r, 0, sizeof(r));
	ao_strand_init(&r.strand, ex);
	assert_int_equal(ao_timer_init_strand(&r.t, &r.strand, self_timer), 0);
	ao_work_init(&r.w, self_item);
	r.block = 1;
	t_watchdog_arm(30, "cancel_sync from the strand");
	assert_int_equal(ao_strand_submit(&r.strand, &r.w), 0);
	assert_int_equal(ao_timer_arm(&r.t, 1 * MS), 0);
	/* Wait until it has fired and sits on the strand. */
	while (ao_timer_pending(&r.t) &&
	       ao_timers_now(ts) < ao_timer_expires(&r.t) + 5 * MS)
		t_sleep_ns(100 * US);
	t_sleep_ns(5 * MS);
	__atomic_store_n(&r.block, 0, __ATOMIC_RELEASE);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(r.cancelled, 1);
	assert_int_equal(r.timer_runs, 0);
	assert_int_equal(ao_strand_destroy(&r.strand), 0);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- cancel_sync waits for a running callback ---- */

struct slow {
	struct ao_timer t;
	int started;
	int release;
	int finished;
	int self_cancel;
};

static void slow_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct slow *s = container_of(t, struct slow, t);

	(void)ev;
	__atomic_store_n(&s->started, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&s->release, __ATOMIC_ACQUIRE))
		t_spin_ns(1000);
	if (s->self_cancel)
		ao_timer_cancel_sync(t); /* must not wait for itself */
	__atomic_store_n(&s->finished, 1, __ATOMIC_RELEASE);
}

static void *releaser(void *arg)
{
	struct slow *s = arg;

	t_sleep_ns(20 * MS);
	__atomic_store_n(&s->release, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_cancel_sync_waits(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, false);
	struct slow s;
	pthread_t th;

	(void)state;
	memset(&s, 0, sizeof(s));
	s.self_cancel = 1;
	assert_int_equal(ao_timer_init(&s.t, ts, slow_fn), 0);
	t_watchdog_arm(30, "cancel_sync");
	assert_int_equal(ao_timer_arm(&s.t, 1 * MS), 0);
	while (!__atomic_load_n(&s.started, __ATOMIC_ACQUIRE))
		t_sleep_ns(100 * US);
	assert_true(ao_timer_running(&s.t));
	assert_int_equal(pthread_create(&th, NULL, releaser, &s), 0);
	/* Started already: not stopped, but waited for. */
	assert_false(ao_timer_cancel_sync(&s.t));
	assert_int_equal(__atomic_load_n(&s.finished, __ATOMIC_ACQUIRE), 1);
	assert_false(ao_timer_running(&s.t));
	pthread_join(th, NULL);
	t_watchdog_disarm();
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- cancel versus fire, exactly once ---- */

struct race {
	struct ao_timer t;
	int runs; /* atomic */
};

static void race_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct race *r = container_of(t, struct race, t);

	assert_true(ev->late_ns >= 0);
	__atomic_fetch_add(&r->runs, 1, __ATOMIC_RELAXED);
}

#define RACE_THREADS 4

struct racer {
	struct ao_timers *ts;
	struct race *r;
	long n;
	long cancelled_ok;
	long armed;
};

static void *racer_fn(void *arg)
{
	struct racer *x = arg;
	uint64_t seed = (uint64_t)(uintptr_t)x * 0x9e3779b97f4a7c15ull;

	for (long i = 0; i < x->n; i++) {
		struct race *r = &x->r[i];
		uint64_t d;

		assert_int_equal(ao_timer_init(&r->t, x->ts, race_fn), 0);
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		d = seed % (200 * US);
		assert_int_equal(ao_timer_arm(&r->t, d), 0);
		x->armed++;
		/* Cancel some right away, some after a moment (around
		 * their deadline), leave the rest to fire. */
		if (i % 3 == 0) {
			x->cancelled_ok += ao_timer_cancel(&r->t);
		} else if (i % 3 == 1) {
			t_spin_ns(seed % (200 * US));
			x->cancelled_ok += ao_timer_cancel_sync(&r->t);
		}
	}
	return NULL;
}

static void test_cancel_fire_race(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, false);
	long per = t_scaled(3000, 300);
	struct racer x[RACE_THREADS];
	struct ao_timers_stats st;
	long armed = 0, cancelled = 0, runs = 0;
	pthread_t th[RACE_THREADS];

	(void)state;
	t_watchdog_arm(120, "cancel versus fire");
	for (int i = 0; i < RACE_THREADS; i++) {
		x[i] = (struct racer){ .ts = ts, .n = per };
		x[i].r = calloc((size_t)per, sizeof(struct race));
		assert_non_null(x[i].r);
		assert_int_equal(pthread_create(&th[i], NULL, racer_fn, &x[i]),
				 0);
	}
	for (int i = 0; i < RACE_THREADS; i++)
		pthread_join(th[i], NULL);
	/* Let everything armed fire. */
	for (int i = 0; i < 2000; i++) {
		assert_int_equal(ao_timers_stats(ts, &st), 0);
		if (!st.pending)
			break;
		t_sleep_ns(1 * MS);
	}
	assert_int_equal(st.pending, 0);
	for (int i = 0; i < RACE_THREADS; i++) {
		armed += x[i].armed;
		cancelled += x[i].cancelled_ok;
		for (long j = 0; j < per; j++) {
			/* cancel_sync returned, or it ran: never both. */
			struct race *r = &x[i].r[j];
			int n = __atomic_load_n(&r->runs, __ATOMIC_RELAXED);

			assert_true(n == 0 || n == 1);
			assert_false(ao_timer_cancel_sync(&r->t));
			runs += n;
		}
	}
	/* Again, now that every callback has returned (the cancel_sync
	 * calls waited for them): the one taken when pending reached 0 can
	 * miss a timer counted in runs but not yet in fired (the fields are
	 * read one by one; once under TSan in CI, 833 fired of 834 runs). */
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	for (int i = 0; i < RACE_THREADS; i++)
		free(x[i].r);
	t_watchdog_disarm();
	/* Every armed timer either ran once or was stopped once. */
	assert_int_equal(runs + cancelled, armed);
	assert_int_equal(st.fired, runs);
	assert_int_equal(st.cancelled, cancelled);
}

/* ---- a million pending ---- */

static void nop_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	(void)t;
	(void)ev;
}

static void test_million_pending(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, true);
	long n = t_scaled(1000000, 50000);
	struct ao_timer *t;
	struct ao_timers_stats st;
	uint64_t t0 = ao_timers_now(ts), seed = 42;
	long before, after;

	(void)state;
	assert_int_equal(sizeof(struct ao_timer), 48);
	t = malloc((size_t)n * sizeof(*t));
	assert_non_null(t);
	memset(t, 0, (size_t)n * sizeof(*t)); /* touch it: RSS counts it */
	before = t_rss_kib();
	for (long i = 0; i < n; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		assert_int_equal(ao_timer_init(&t[i], ts, nop_fn), 0);
		/* Deadlines from now to a day away. */
		assert_int_equal(
			ao_timer_arm_at(&t[i],
					t0 + seed % (86400ull * 1000 * MS)),
			0);
	}
	after = t_rss_kib();
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_int_equal(st.pending, (uint64_t)n);
	/* Nothing beyond the timers themselves: the wheel is fixed. */
	print_message("rss +%ld KiB for %ld pending timers\n", after - before,
		      n);
	if (t_scale() >= 1) /* a sanitizer's shadow memory grows too */
		assert_true(after - before < 1024);
	/* Re-arm a random tenth, then cancel all. */
	for (long i = 0; i < n / 10; i++) {
		long k = (long)((uint64_t)i * 2654435761u % (uint64_t)n);

		assert_int_equal(ao_timer_arm_at(&t[k], t0 + (uint64_t)i), 0);
	}
	for (long i = 0; i < n; i++)
		assert_true(ao_timer_cancel(&t[i]));
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.cancelled, (uint64_t)n);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	free(t);
}

/* ---- destroy ---- */

static int destroy_runs;

static void count_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	(void)t;
	(void)ev;
	__atomic_fetch_add(&destroy_runs, 1, __ATOMIC_RELAXED);
}

static void test_destroy_pending(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, false);
	struct ao_timers *ts2;
	struct ao_timers_config cfg = AO_TIMERS_CONFIG_INIT;
	struct ao_strand s;
	struct ao_timer t[100], st[10];
	uint64_t pending;

	(void)state;
	destroy_runs = 0;
	ao_strand_init(&s, ex);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(ao_timer_init(&t[i], ts, count_fn), 0);
		assert_int_equal(
			ao_timer_arm(&t[i], (uint64_t)(i + 1) * 1000 * MS), 0);
	}
	for (int i = 0; i < 10; i++) {
		assert_int_equal(ao_timer_init_strand(&st[i], &s, count_fn), 0);
		assert_int_equal(ao_timer_arm_periodic(&st[i],
						       ao_now_ns() + 1000 * MS,
						       MS, 0),
				 0);
	}
	/* A second service on the same executor is refused. */
	cfg.exec = ex;
	assert_int_equal(ao_timers_create(&cfg, &ts2), -EBUSY);
	assert_int_equal(ao_timers_destroy(ts, &pending), 0);
	assert_int_equal(pending, 110);
	assert_null(ao_timers_of(ex));
	for (int i = 0; i < 100; i++)
		assert_false(ao_timer_pending(&t[i]));
	assert_int_equal(ao_timer_arm(&t[0], MS), -ESHUTDOWN);
	assert_int_equal(ao_timer_arm(&st[0], MS), -ESHUTDOWN);
	assert_false(ao_timer_cancel(&t[1]));
	/* A new service may follow. */
	assert_int_equal(ao_timers_create(&cfg, &ts2), 0);
	assert_int_equal(ao_timer_init_strand(&st[0], &s, count_fn), 0);
	assert_int_equal(ao_timer_arm(&st[0], 1 * MS), 0);
	t_sleep_ns(50 * MS);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(__atomic_load_n(&destroy_runs, __ATOMIC_RELAXED), 1);
	t_timers_destroy(ts2, 0);
	assert_int_equal(ao_strand_destroy(&s), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/*
 * The service's memory is its own, released by the executor when it ends:
 * destroyed services (several, one after another) and one still attached
 * with timers pending are all freed by ao_exec_destroy() (a leak fails the
 * ASan build), and the parked workers that slept through the service (the
 * driver's park) exit.
 */
static void test_exec_releases_services(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 2, 0, AO_EXEC_BLOCK);
	struct ao_timer t[3];

	(void)state;
	for (int i = 0; i < 3; i++) {
		struct ao_timers *ts = t_timers(ex, false);

		assert_int_equal(ao_timer_init(&t[i], ts, count_fn), 0);
		assert_int_equal(ao_timer_arm(&t[i], 1000 * MS), 0);
		t_sleep_ns(2 * MS); /* a worker parks until the deadline */
		if (i < 2) {
			t_timers_destroy(ts, 1);
			assert_null(ao_timers_of(ex));
			/* Kept until the executor ends: still answers. */
			assert_int_equal(ao_timer_arm(&t[i], MS), -ESHUTDOWN);
		}
	}
	assert_true(ao_timer_pending(&t[2]));
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- errors ---- */

struct dl {
	struct ao_timer t;
	struct ao_timers *ts;
	int advance_err;
	int destroy_err;
};

static void dl_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct dl *d = container_of(t, struct dl, t);

	(void)ev;
	d->advance_err = ao_timers_advance(d->ts, 1);
	d->destroy_err = ao_timers_destroy(d->ts, NULL);
}

static void test_errors(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 0, AO_EXEC_BLOCK);
	struct ao_timers_config cfg = AO_TIMERS_CONFIG_INIT;
	struct ao_timers *ts, *real;
	struct ao_strand s;
	struct ao_timer t;
	struct dl d;

	(void)state;
	assert_int_equal(ao_timers_create(NULL, &ts), -EINVAL);
	assert_int_equal(ao_timers_create(&cfg, &ts), -EINVAL);
	assert_int_equal(ao_timers_create(&cfg, NULL), -EINVAL);
	assert_int_equal(ao_timers_destroy(NULL, NULL), -EINVAL);
	assert_int_equal(ao_timers_stats(NULL, NULL), -EINVAL);
	assert_int_equal(ao_timers_advance(NULL, 1), -EINVAL);
	assert_null(ao_timers_of(NULL));
	assert_null(ao_timers_of(ex));
	ao_strand_init(&s, ex);
	/* A strand timer needs its executor's service. */
	assert_int_equal(ao_timer_init_strand(&t, &s, nop_fn), -EINVAL);
	assert_int_equal(ao_timer_init(&t, NULL, nop_fn), -EINVAL);
	ts = t_timers(ex, true);
	assert_int_equal(ao_timer_init(&t, ts, NULL), -EINVAL);
	assert_int_equal(ao_timer_init_strand(&t, &s, nop_fn), 0);
	assert_int_equal(ao_timer_arm(NULL, 1), -EINVAL);
	assert_false(ao_timer_cancel(NULL));
	assert_false(ao_timer_cancel_sync(NULL));
	assert_false(ao_timer_pending(NULL));
	/* From a callback: no advance, no destroy. */
	memset(&d, 0, sizeof(d));
	d.ts = ts;
	assert_int_equal(ao_timer_init(&d.t, ts, dl_fn), 0);
	assert_int_equal(ao_timer_arm(&d.t, 0), 0);
	assert_int_equal(ao_timers_advance(ts, 1), 0);
	assert_int_equal(d.advance_err, -EDEADLK);
	assert_int_equal(d.destroy_err, -EDEADLK);
	t_timers_destroy(ts, 0);
	/* advance needs the test clock. */
	real = t_timers(ex, false);
	assert_int_equal(ao_timers_advance(real, 1), -EINVAL);
	t_timers_destroy(real, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- the real clock ---- */

struct late {
	struct ao_timer t;
	uint64_t deadline;
	uint64_t ran_at;
	int ran;
};

static void late_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct late *l = container_of(t, struct late, t);

	l->ran_at = ao_now_ns();
	l->deadline = ev->deadline;
	__atomic_store_n(&l->ran, 1, __ATOMIC_RELEASE);
}

/* Timers on an idle executor fire, never early, with no busy polling in
 * between (a handful of expiry steps for a handful of deadlines). */
static void test_real_clock_idle(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, false);
	struct late l[5];
	struct ao_timers_stats st;

	(void)state;
	t_watchdog_arm(30, "real clock");
	memset(l, 0, sizeof(l));
	for (int i = 0; i < 5; i++) {
		assert_int_equal(ao_timer_init(&l[i].t, ts, late_fn), 0);
		assert_int_equal(
			ao_timer_arm(&l[i].t, (uint64_t)(i + 1) * 20 * MS), 0);
	}
	for (int i = 0; i < 5; i++) {
		while (!__atomic_load_n(&l[i].ran, __ATOMIC_ACQUIRE))
			t_sleep_ns(1 * MS);
		assert_true(l[i].ran_at >= l[i].deadline);
	}
	t_watchdog_disarm();
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_int_equal(st.fired, 5);
	/* One look per deadline, give or take (spurious early looks after
	 * an arm); an executor polling on a timer would show thousands. */
	print_message("polls %llu sleeps %llu\n", (unsigned long long)st.polls,
		      (unsigned long long)st.sleeps);
	assert_true(st.polls <= 40);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* A due timer runs between two items, ahead of the queued ones. */
static int busy_done;

static void busy_item(struct ao_work *w)
{
	(void)w;
	t_spin_ns(500 * US);
	__atomic_fetch_add(&busy_done, 1, __ATOMIC_RELAXED);
}

static int busy_seen = -1;
static int busy_gate; /* the first item holds the worker until set */

static void busy_hold(struct ao_work *w)
{
	(void)w;
	while (!__atomic_load_n(&busy_gate, __ATOMIC_ACQUIRE))
		t_sleep_ns(100 * US);
}

static void busy_timer(struct ao_timer *t, const struct ao_timer_event *ev)
{
	(void)t;
	(void)ev;
	__atomic_store_n(&busy_seen,
			 __atomic_load_n(&busy_done, __ATOMIC_RELAXED),
			 __ATOMIC_RELEASE);
}

static void test_busy_pool_fires_first(void **state)
{
	int kinds[] = { AO_EXEC_SHARED, AO_EXEC_STEAL };

	(void)state;
	for (int k = 0; k < 2; k++) {
		struct ao_exec *ex =
			t_exec_create(kinds[k], 1, 0, AO_EXEC_BLOCK);
		struct ao_timers *ts = t_timers(ex, false);
		struct ao_work hold, w[100];
		struct ao_timer t;

		busy_done = 0;
		busy_seen = -1;
		busy_gate = 0;
		t_watchdog_arm(60, "busy pool");
		/* The worker is held while the queue fills and the timer
		 * comes due (a wait on the timers' clock, not a sleep: this
		 * thread may be held up too), so the timer is due before the
		 * first of the 100 items runs. */
		ao_work_init(&hold, busy_hold);
		assert_int_equal(ao_exec_submit(ex, &hold), 0);
		for (int i = 0; i < 100; i++) {
			ao_work_init(&w[i], busy_item);
			assert_int_equal(ao_exec_submit(ex, &w[i]), 0);
		}
		assert_int_equal(ao_timer_init(&t, ts, busy_timer), 0);
		assert_int_equal(ao_timer_arm(&t, 5 * MS), 0);
		while (ao_timers_now(ts) < ao_timer_expires(&t))
			t_sleep_ns(1 * MS);
		__atomic_store_n(&busy_gate, 1, __ATOMIC_RELEASE);
		assert_int_equal(ao_exec_drain(ex), 0);
		while (__atomic_load_n(&busy_seen, __ATOMIC_ACQUIRE) < 0)
			t_sleep_ns(1 * MS);
		t_watchdog_disarm();
		/* 100 items of 0.5 ms behind it: the due timer came well
		 * before the end of the queue. */
		assert_true(busy_seen < 90);
		t_timers_destroy(ts, 0);
		assert_int_equal(ao_exec_destroy(ex), 0);
	}
}

/* Precise ticks on the real clock run, on time or late, never early. */
static void test_precise_periodic(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_timers *ts = t_timers(ex, false);
	struct tick k;
	struct ao_timers_stats st;
	uint64_t p = 2 * MS;

	(void)state;
	memset(&k, 0, sizeof(k));
	assert_int_equal(ao_timer_init(&k.t, ts, tick_fn), 0);
	t_watchdog_arm(30, "precise ticks");
	assert_int_equal(ao_timer_arm_periodic(&k.t, ao_now_ns() + p, p,
					       AO_TIMER_PRECISE),
			 0);
	while (__atomic_load_n(&k.n, __ATOMIC_RELAXED) < 20)
		t_sleep_ns(1 * MS);
	assert_true(ao_timer_cancel_sync(&k.t) || !ao_timer_pending(&k.t));
	t_watchdog_disarm();
	for (int i = 1; i < 20 && i < 64; i++)
		assert_true(k.ticks[i] > k.ticks[i - 1]);
	assert_int_equal(ao_timers_stats(ts, &st), 0);
	assert_true(st.fired >= 20);
	t_timers_destroy(ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* The only worker waits for a group that only a timer can finish: the
 * wait itself must fire it. */
struct gw {
	struct ao_work w;
	struct ao_group g;
	struct ao_timer t;
	struct ao_timers *ts;
	int done;
};

static void gw_timer(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct gw *x = container_of(t, struct gw, t);

	(void)ev;
	ao_group_done(&x->g);
}

static void gw_item(struct ao_work *w)
{
	struct gw *x = container_of(w, struct gw, w);

	ao_group_init(&x->g, ao_exec_current());
	ao_group_add(&x->g, 1);
	assert_int_equal(ao_timer_init(&x->t, x->ts, gw_timer), 0);
	assert_int_equal(ao_timer_arm(&x->t, 5 * MS), 0);
	assert_int_equal(ao_group_wait(&x->g), 0);
	__atomic_store_n(&x->done, 1, __ATOMIC_RELEASE);
}

static void test_group_wait_fires_timers(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 1, 0, AO_EXEC_BLOCK);
	struct gw x;

	(void)state;
	memset(&x, 0, sizeof(x));
	x.ts = t_timers(ex, false);
	t_watchdog_arm(30, "a group wait that only a timer ends");
	ao_work_init(&x.w, gw_item);
	assert_int_equal(ao_exec_submit(ex, &x.w), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(x.done, 1);
	t_timers_destroy(x.ts, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_order_within_granule),
		cmocka_unit_test(test_cancel_and_rearm),
		cmocka_unit_test(test_rearm_in_callback),
		cmocka_unit_test(test_periodic),
		cmocka_unit_test(test_strand_serialised),
		cmocka_unit_test(test_strand_cancel_sync_from_strand),
		cmocka_unit_test(test_cancel_sync_waits),
		cmocka_unit_test(test_cancel_fire_race),
		cmocka_unit_test(test_million_pending),
		cmocka_unit_test(test_destroy_pending),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_real_clock_idle),
		cmocka_unit_test(test_busy_pool_fires_first),
		cmocka_unit_test(test_precise_periodic),
		cmocka_unit_test(test_group_wait_fires_timers),
		cmocka_unit_test(test_exec_releases_services),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
