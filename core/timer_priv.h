/* SPDX-License-Identifier: MIT */
/*
 * What the strands and the timers (core/timer.c) share beyond the public
 * API: a strand keeps a list of its fired timers and runs them.  The
 * executor sees the timers only as a driver (core/driver.h).
 */
#ifndef AORTA_CORE_TIMER_PRIV_H
#define AORTA_CORE_TIMER_PRIV_H

#include <stdbool.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>

/* ---- strand.c -> timer.c ---- */

/* Run a timer just taken off its strand's list (no lock held). */
void ao__timer_run_queued(struct ao_timer *t);

/* ---- timer.c -> strand.c (the caller holds t's shard lock) ---- */

/* Queue a fired timer on its strand (its state says so already).  With
 * may_run, and the strand not running, the caller becomes its runner:
 * true is returned and it must call ao__strand_run_timers(). */
bool ao__strand_timer_add(struct ao_strand *s, struct ao_timer *t,
			  bool may_run);
/* Take a queued timer off its strand; false if a turn took it already. */
bool ao__strand_timer_del(struct ao_strand *s, struct ao_timer *t);
/* Run the strand's queued timers now, then end the run (no shard lock
 * held). */
void ao__strand_run_timers(struct ao_strand *s);

#endif /* AORTA_CORE_TIMER_PRIV_H */
