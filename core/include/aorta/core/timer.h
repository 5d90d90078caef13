/* SPDX-License-Identifier: MIT */
/*
 * Timers: one-shot and fixed-rate periodic timers whose callbacks run on an
 * executor's workers or on a strand.
 *
 *	struct room { struct ao_strand strand; struct ao_timer tick; ... };
 *
 *	static void room_tick(struct ao_timer *t, const struct ao_timer_event *ev)
 *	{
 *		struct room *r = container_of(t, struct room, tick);
 *		(on r's strand: serialised with r's packets, no lock)
 *	}
 *
 *	struct ao_timers_config cfg = AO_TIMERS_CONFIG_INIT;
 *	cfg.exec = ex;
 *	ao_timers_create(&cfg, &ts);
 *	ao_timer_init_strand(&r->tick, &r->strand, room_tick);
 *	ao_timer_arm_periodic(&r->tick, ao_timers_now(ts) + 50000000,
 *			      50000000, 0);		(20 Hz)
 *	...
 *	ao_timer_cancel_sync(&r->tick);
 *	ao_timers_destroy(ts, &pending);
 *
 * Intrusive, like struct ao_work: a timer is embedded in the caller's
 * struct, and arming allocates nothing.  Time is CLOCK_MONOTONIC in
 * nanoseconds (or the service's test clock).  A timer fires at or after its
 * deadline, never before; one that is due while every worker is busy runs
 * between two items of a worker, ahead of the queued ones.
 *
 * A periodic timer is fixed-rate: tick k is due at first + k * period,
 * computed, never accumulated, so it does not drift.  A tick that comes
 * more than a period late is skipped and counted (the callback is told how
 * many), not run twice in a row, unless AO_TIMER_CATCHUP is given.
 *
 * One timer service per executor.  See core/timer.c for the design.
 * Functions that can fail return 0 or a negative errno.
 */
#ifndef AORTA_CORE_TIMER_H
#define AORTA_CORE_TIMER_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/compiler.h>

struct ao_exec;
struct ao_strand;
struct ao_timer;
struct ao_timers;

/* What a callback is told about the run it is called for. */
struct ao_timer_event {
	uint64_t deadline; /* the deadline this run is for (ns) */
	uint64_t now; /* the service clock when the callback started */
	int64_t late_ns; /* now - deadline */
	uint64_t tick; /* periodic: the tick's number, deadline / period
			* (integer division), so one more than the last run's,
			* plus skipped; one-shot: 0 */
	uint64_t skipped; /* periodic: ticks skipped just before this one */
};

/* A timer's callback. */
typedef void (*ao_timer_fn)(struct ao_timer *t,
			    const struct ao_timer_event *ev);

/*
 * 48 bytes, all of it the timer's (nothing is allocated per timer).  The
 * fields are the service's: use the functions below.
 */
struct ao_timer {
	struct ao_timer *next; /* list link (wheel slot, strand queue) */
	struct ao_timer **pprev; /* back link; NULL while unlinked */
	uint64_t expires; /* next deadline, ns */
	uint64_t ctl; /* period (multiple of 8 ns) | state (3 bits) */
	ao_timer_fn fn;
	uintptr_t target; /* shard, or strand | 1; flag bits 1-2 */
};

/* Flags of ao_timer_arm_periodic(). */
#define AO_TIMER_CATCHUP 0x1u /* run late ticks back to back, none skipped */
#define AO_TIMER_PRECISE \
	0x2u /* sleep until shortly before each deadline,
			       * then spin to it (see the README) */

/* Periods are kept in multiples of this many nanoseconds (rounded to the
 * nearest; the effective period is then exact: no drift). */
#define AO_TIMER_PERIOD_UNIT 8u

struct ao_timers_config {
	struct ao_exec *exec; /* where callbacks run (required) */
	bool test_clock; /* time moves only with ao_timers_advance() */
	uint64_t test_start_ns; /* the test clock's first reading */
	uint32_t slack_ns; /* PR_SET_TIMERSLACK of a worker that sleeps
			    * until a deadline; 0: AO_TIMERS_DEFAULT_SLACK_NS */
	uint32_t precise_max_ns; /* the longest spin before a precise
				  * deadline; 0: AO_TIMERS_DEFAULT_PRECISE_NS */
};

#define AO_TIMERS_CONFIG_INIT                                          \
	{                                                              \
		.exec = NULL, .test_clock = false, .test_start_ns = 0, \
		.slack_ns = 0, .precise_max_ns = 0,                    \
	}

/* Timer slack of a worker sleeping until a deadline (the kernel's default
 * of 50 us is larger than the tick jitter aimed at). */
#define AO_TIMERS_DEFAULT_SLACK_NS 1000u
/* Precise mode: spin at most this long before a deadline. */
#define AO_TIMERS_DEFAULT_PRECISE_NS 250000u

/* Totals over the service (a racy snapshot). */
struct ao_timers_stats {
	uint64_t armed; /* successful arms (re-arms included) */
	uint64_t fired; /* callbacks started */
	uint64_t cancelled; /* cancels that stopped a pending timer */
	uint64_t pending; /* armed now, callback not started */
	uint64_t skipped; /* periodic ticks skipped for lateness */
	uint64_t late_p50_ns; /* lateness of the callbacks started */
	uint64_t late_p99_ns;
	uint64_t late_max_ns;
	uint64_t polls; /* expiry steps run */
	uint64_t step_max_ns; /* the longest expiry step (wheel work under
			       * the shard lock, not callbacks; wall time, so
			       * a preempted step counts its wait) */
	uint64_t sleeps; /* waits of a worker until a deadline */
	uint64_t spins; /* precise deadlines reached by spinning */
};

/* Create the timer service of cfg->exec; *out is set on success.
 * -EINVAL (no executor), -EBUSY (it has one already), -ENOMEM. */
AO_API int ao_timers_create(const struct ao_timers_config *cfg,
			    struct ao_timers **out);
/* Stop and free: pending timers are dropped, none fires, and *pending (if
 * not NULL) gets how many there were; waits for callbacks that are
 * running.  Call it before destroying the executor, never from a callback.
 * -EDEADLK from a callback of this service, -EINVAL. */
AO_API int ao_timers_destroy(struct ao_timers *ts, uint64_t *pending);
/* The timer service of an executor, or NULL. */
AO_API struct ao_timers *ao_timers_of(const struct ao_exec *ex);
/* The service clock: CLOCK_MONOTONIC ns, or the test clock. */
AO_API uint64_t ao_timers_now(const struct ao_timers *ts);
/* Test clock: move time forward by ns and fire what is due, on the calling
 * thread (executor timers' callbacks run there, in deadline order; strand
 * timers are queued on their strands).  -EINVAL without a test clock,
 * -EDEADLK from a callback. */
AO_API int ao_timers_advance(struct ao_timers *ts, uint64_t ns);
/* Statistics; -EINVAL. */
AO_API int ao_timers_stats(const struct ao_timers *ts,
			   struct ao_timers_stats *st);
/* Zero the counters, the lateness histogram and the longest step (armed,
 * fired, cancelled, skipped, polls, sleeps, spins; pending is a state,
 * not a counter, and stays).  -EINVAL. */
AO_API int ao_timers_stats_reset(struct ao_timers *ts);

/* A timer whose callback runs on one of ts's executor's workers.  Arming
 * from one thread and from many timers at once costs no shared lock: each
 * timer belongs to the shard of the thread that initialised it.  -EINVAL. */
AO_API int ao_timer_init(struct ao_timer *t, struct ao_timers *ts,
			 ao_timer_fn fn);
/* A timer whose callback runs on strand s (serialised with its items);
 * s's executor must have a timer service.  -EINVAL. */
AO_API int ao_timer_init_strand(struct ao_timer *t, struct ao_strand *s,
				ao_timer_fn fn);
/* One-shot, delay_ns from now; a pending timer is moved (re-armed).
 * -EINVAL (not initialised), -ESHUTDOWN (service being destroyed). */
AO_API int ao_timer_arm(struct ao_timer *t, uint64_t delay_ns);
/* One-shot at an absolute deadline (a past one fires at once). */
AO_API int ao_timer_arm_at(struct ao_timer *t, uint64_t deadline_ns);
/* Periodic: tick k at first_ns + k * period_ns (absolute first deadline).
 * flags: AO_TIMER_CATCHUP, AO_TIMER_PRECISE.  -EINVAL for a period
 * below AO_TIMER_PERIOD_UNIT or unknown flags. */
AO_API int ao_timer_arm_periodic(struct ao_timer *t, uint64_t first_ns,
				 uint64_t period_ns, unsigned int flags);
/* Stop it from any thread: true if it was pending and its callback had not
 * started (it will not run for that deadline); a periodic timer whose
 * callback is running is not re-armed after it. */
AO_API bool ao_timer_cancel(struct ao_timer *t);
/* The same, then wait for a callback of it that is running on another
 * thread to return.  From its own callback, or from the strand it runs on,
 * it does not wait (no deadlock).  Two callbacks must not wait for each
 * other. */
AO_API bool ao_timer_cancel_sync(struct ao_timer *t);
/* True if armed and its callback has not started (a snapshot). */
AO_API bool ao_timer_pending(const struct ao_timer *t);
/* True while its callback runs (a snapshot). */
AO_API bool ao_timer_running(const struct ao_timer *t);
/* The deadline it is armed for (meaningful while pending). */
AO_API uint64_t ao_timer_expires(const struct ao_timer *t);

#endif /* AORTA_CORE_TIMER_H */
