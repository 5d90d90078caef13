/* SPDX-License-Identifier: MIT */
/*
 * What the executor and the strands share with the timers (core/timer.c)
 * beyond the public API.
 */
#ifndef AORTA_CORE_TIMER_PRIV_H
#define AORTA_CORE_TIMER_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>

/*
 * A timer's state, the low three bits of t->ctl (see "States" in
 * core/timer.c).  Written with relaxed atomic stores by holders of the
 * lock that governs the transition, read anywhere.
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

/* ---- exec.c -> timer.c ---- */

/* A worker between items, or idle: fire what is due at now (ns). */
void ao__timers_check(struct ao_timers *ts, uint64_t now);
/*
 * A worker is about to sleep: the timeout (ns) it must wake up after to
 * serve the next deadline, or -1 for none; 0 means do not sleep.  *token
 * is passed to ao__timers_sleep_end() when it wakes.
 */
int64_t ao__timers_sleep_begin(struct ao_timers *ts, uint64_t *token);
void ao__timers_sleep_end(struct ao_timers *ts, uint64_t token);
/* An idle worker before it parks: fire what is due, and spin to a
 * precise deadline that is closer than the lead; true if it did any. */
bool ao__timers_idle(struct ao_timers *ts);
/* Free a destroyed service (the executor keeps it until its own end). */
void ao__timers_free(struct ao_timers *ts);
/* The link of the executor's list of destroyed services. */
struct ao_timers **ao__timers_dead_link(struct ao_timers *ts);

/* ---- strand.c -> timer.c ---- */

/* Run a timer just taken off its strand's list (state now TS_RUNNING). */
void ao__timer_run_queued(struct ao_timer *t);

/* ---- timer.c -> strand.c (the caller holds t's shard lock) ---- */

/* Queue a fired timer on its strand (state TS_QUEUED or TS_RUN_QUEUED).
 * With may_run, and the strand not running, the caller becomes its
 * runner: true is returned and it must call ao__strand_run_timers(). */
bool ao__strand_timer_add(struct ao_strand *s, struct ao_timer *t,
			  bool may_run);
/* Take a queued timer off its strand; false if a turn took it already. */
bool ao__strand_timer_del(struct ao_strand *s, struct ao_timer *t);
/* Run the strand's queued timers now, then end the run (no shard lock
 * held). */
void ao__strand_run_timers(struct ao_strand *s);

#endif /* AORTA_CORE_TIMER_PRIV_H */
