// SPDX-License-Identifier: MIT
/*
 * timers: one-shot timers and a fixed-rate tick.
 *
 *	timers [TICKS [PERIOD_MS]]	(default 50 ticks of 10 ms)
 *
 * Three one-shot timers fire 5, 15 and 25 ms from now on the executor's
 * workers.  A room ticks at a fixed rate on its strand: tick k is due at
 * first + k * period, computed, so the tick does not drift however late
 * one callback runs; a tick more than a period late is skipped and
 * counted rather than run twice in a row.  After TICKS ticks the callback
 * cancels its own timer.
 *
 * The timers belong to the executor's timer service: no thread of its
 * own, the workers run what is due between their items, and a parked
 * worker sleeps until the next deadline.  main waits with a group used
 * as a wait group: one count per one-shot and one for the tick.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/core/exec.h>
#include <aorta/core/group.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>

#define MS 1000000ull

struct shot {
	struct ao_timer timer;
	unsigned int n;
	int64_t late_ns; /* how late it ran; -1 until it has */
};

struct room {
	struct ao_strand strand;
	struct ao_timer tick;
	uint64_t ticks, skipped, want;
	uint64_t last; /* the last tick number seen */
	int bad; /* ticks out of order, or early */
};

static struct ao_group done;

static void shot_fired(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct shot *s = container_of(t, struct shot, timer);

	s->late_ns = ev->late_ns;
	ao_group_done(&done);
}

/* On the room's strand: no lock needed for the room's fields. */
static void room_tick(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct room *r = container_of(t, struct room, tick);

	if (ev->late_ns < 0 ||
	    (r->ticks && ev->tick != r->last + 1 + ev->skipped))
		r->bad++;
	r->last = ev->tick;
	r->ticks++;
	r->skipped += ev->skipped;
	if (r->ticks + r->skipped >= r->want) {
		ao_timer_cancel(t); /* from its own callback: no re-arm */
		ao_group_done(&done);
	}
}

int main(int argc, char **argv)
{
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;
	struct shot shots[3];
	struct room room = { .want = 50 };
	struct ao_timers_stats st;
	struct ao_timers *ts;
	struct ao_exec *ex;
	uint64_t period = 10 * MS, t0;
	int err, bad = 0;

	if (argc > 1)
		room.want = strtoull(argv[1], NULL, 10);
	if (argc > 2)
		period = strtoull(argv[2], NULL, 10) * MS;
	if (!room.want || !period)
		return 2;
	ec.workers = 2;
	err = ao_exec_create(&ec, &ex);
	if (err)
		goto fail;
	tc.exec = ex;
	err = ao_timers_create(&tc, &ts);
	if (err)
		goto fail;

	ao_group_init(&done, ex);
	ao_group_add(&done, 4); /* three shots and the tick */
	t0 = ao_timers_now(ts);
	for (unsigned int i = 0; i < 3; i++) {
		shots[i].n = i;
		shots[i].late_ns = -1;
		ao_timer_init(&shots[i].timer, ts, shot_fired);
		err = ao_timer_arm(&shots[i].timer, (5 + 10 * i) * MS);
		if (err)
			goto fail;
	}
	ao_strand_init(&room.strand, ex);
	ao_timer_init_strand(&room.tick, &room.strand, room_tick);
	err = ao_timer_arm_periodic(&room.tick, t0 + period, period, 0);
	if (err)
		goto fail;

	ao_group_wait(&done);
	ao_timer_cancel_sync(&room.tick); /* done already; harmless */

	for (unsigned int i = 0; i < 3; i++) {
		printf("timers: shot %u at +%llu ms ran %.1f us late\n", i,
		       (5 + 10ull * i), (double)shots[i].late_ns / 1e3);
		bad += shots[i].late_ns < 0;
	}
	printf("timers: %llu ticks of %.1f ms, %llu skipped; all done %.1f ms "
	       "after the start\n",
	       (unsigned long long)room.ticks, (double)period / MS,
	       (unsigned long long)room.skipped,
	       (double)(ao_timers_now(ts) - t0) / MS);
	ao_timers_stats(ts, &st);
	printf("timers: %llu callbacks, lateness p50 %.1f us, p99 %.1f us, "
	       "max %.1f us\n",
	       (unsigned long long)st.fired, (double)st.late_p50_ns / 1e3,
	       (double)st.late_p99_ns / 1e3, (double)st.late_max_ns / 1e3);
	bad += room.bad;
	err = ao_timers_destroy(ts, NULL);
	if (err)
		goto fail;
	ao_strand_destroy(&room.strand);
	ao_exec_destroy(ex);
	if (bad)
		fprintf(stderr, "timers: %d runs early or out of order\n", bad);
	return bad ? 1 : 0;
fail:
	fprintf(stderr, "timers: %s\n", strerror(-err));
	return 1;
}
