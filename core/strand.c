// SPDX-License-Identifier: MIT
/*
 * Strands: a serial queue over an executor, with no thread of its own.
 *
 * A strand is a locked FIFO of items, a list of fired timers, and one
 * carrier item, s->run, queued on the executor (queued) whenever the
 * strand has work and nobody runs it.  Whoever runs the strand's work sets
 * running, under the lock, and is the only one who pops: that gives both
 * order and mutual exclusion, and the lock makes every item's effects
 * visible to the next one, wherever it runs.  A turn (the carrier run by a
 * worker) runs up to batch items, fired timers first, then queues the
 * carrier again at the back if work remains, so one busy strand cannot
 * hold a worker forever.
 *
 * Timers.  A timer that fires for a strand goes on tm_head..tm_tail, a
 * list doubly linked through the timer's own links, so that a cancel
 * takes it off in O(1) (ao__strand_timer_del(), under the timer's shard
 * lock, then this lock).  If nobody runs the strand at that moment, the
 * worker that fired the timer becomes the runner and runs it at once
 * (ao__strand_run_timers()), even if the carrier is queued: a room's tick
 * does not wait behind the executor's queue.  The carrier, when it comes,
 * finds running set or nothing to do and leaves; the runner re-queues it
 * on its way out if work arrived meanwhile.  Timers are not items: they
 * take no capacity slot and are not counted by drain.
 *
 * Held turns.  ao_strand_submit_hold() queues an item as a submit does,
 * but when nobody has the strand it does not queue the carrier: it sets
 * running and hands the turn to the caller, who runs it later on its own
 * thread with ao_strand_run_held() (the io layer's ring, so that a
 * packet's handler runs without waking a worker: see io/server.c).  Until
 * then the strand is as if a worker ran it: other submits only append, a
 * fired timer waits for the holder, the carrier is not queued, the strand
 * is not idle.  ao_strand_run_held() runs up to max items (fired timers
 * first, as a turn does; max 0 runs nothing) and ends as a turn ends:
 * work left queues the carrier, so giving a turn up costs what the submit
 * would have.  The holder may be any thread; items it runs off the pool
 * are counted as started and finished all the same (ao__exec_started()).
 *
 * Accounting: each item is accepted by the executor on submission
 * (ao__exec_reserve(): counted, a capacity slot taken, -ESHUTDOWN after
 * shutdown) and counted finished when it has run; the carrier is queued
 * with ao__exec_push_forced(), which cannot be refused, because it only
 * ever carries items that were accepted (or timers), and destroy waits for
 * those.  So drain and destroy cover strand items too, and a submit is
 * refused, never dropped.
 */
#include <errno.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include "exec_priv.h"
#include "timer_priv.h"

static __thread struct ao_strand *cur_strand
	__attribute__((tls_model("initial-exec")));

static void strand_turn(struct ao_work *run);

void ao_strand_init(struct ao_strand *s, struct ao_exec *ex)
{
	ao_work_init(&s->run, strand_turn);
	s->exec = ex;
	ao_spin_init(&s->lock);
	s->head = s->tail = NULL;
	s->tm_head = NULL;
	s->tm_tail = &s->tm_head;
	s->queued = false;
	s->running = false;
	s->batch = AO_STRAND_DEFAULT_BATCH;
	s->submitted = 0;
	s->executed = 0;
}

void ao_strand_set_batch(struct ao_strand *s, unsigned int batch)
{
	WRITE_ONCE(s->batch, batch ? batch : 1);
}

static bool has_work(const struct ao_strand *s)
{
	return s->head || s->tm_head;
}

bool ao_strand_idle(struct ao_strand *s)
{
	bool idle;

	ao_spin_lock(&s->lock);
	idle = !s->queued && !s->running && !has_work(s);
	ao_spin_unlock(&s->lock);
	return idle;
}

int ao_strand_destroy(struct ao_strand *s)
{
	return ao_strand_idle(s) ? 0 : -EBUSY;
}

struct ao_strand *ao_strand_current(void)
{
	return cur_strand;
}

/* Under the lock: take the first fired timer off the list, or NULL. */
static struct ao_timer *timer_pop(struct ao_strand *s)
{
	struct ao_timer *t = s->tm_head;

	if (!t)
		return NULL;
	s->tm_head = t->next;
	if (t->next)
		t->next->pprev = &s->tm_head;
	else
		s->tm_tail = &s->tm_head;
	/* Unlinked under this lock, as the cancel that would take it off
	 * (ao__strand_timer_del()) does: the two cannot both have it. */
	t->next = NULL;
	t->pprev = NULL;
	return t;
}

/*
 * End a run: clear running and, if work is left and the carrier is not
 * queued, queue it.  Called with the lock held; drops it.
 */
static void run_end(struct ao_strand *s)
{
	bool push = false;

	s->running = false;
	if (has_work(s) && !s->queued) {
		s->queued = true;
		push = true;
	}
	ao_spin_unlock(&s->lock);
	if (push)
		ao__exec_push_forced(s->exec, &s->run);
}

/*
 * Under the lock, as the runner: run up to max items, fired timers first
 * (they do not count).  Returns with the lock held, and the items run;
 * *off gets those of them that ran off the pool, for the caller to count
 * finished (ao__exec_finished_off()).
 */
static unsigned int run_items(struct ao_strand *s, unsigned int max,
			      unsigned int *off)
{
	struct ao_exec *ex = s->exec;
	unsigned int n = 0;

	while (n < max) {
		struct ao_timer *t = timer_pop(s);
		struct ao_work *w;

		if (t) {
			ao_spin_unlock(&s->lock);
			ao__timer_run_queued(t);
			ao_spin_lock(&s->lock);
			continue;
		}
		w = s->head;
		if (!w)
			break;
		s->head = w->next;
		if (!s->head)
			s->tail = NULL;
		ao_spin_unlock(&s->lock);
		ao__exec_started(ex);
		w->fn(w);
		/* Only the runner writes executed, and runs are serial. */
		WRITE_ONCE(s->executed, s->executed + 1);
		if (!ao__exec_finished(ex))
			(*off)++;
		n++;
		ao_spin_lock(&s->lock);
	}
	return n;
}

static void strand_turn(struct ao_work *run)
{
	struct ao_strand *s = container_of(run, struct ao_strand, run);
	struct ao_strand *outer = cur_strand;
	unsigned int off = 0; /* on a worker: stays 0 */

	ao_spin_lock(&s->lock);
	s->queued = false;
	if (s->running) {
		/* A timer's runner or a held turn has the strand; it
		 * re-queues us on its way out if work is left. */
		ao_spin_unlock(&s->lock);
		return;
	}
	s->running = true;
	cur_strand = s;
	run_items(s, READ_ONCE(s->batch), &off);
	/* Batch used up (or nothing left): the rest waits its turn behind
	 * other work. */
	cur_strand = outer;
	run_end(s);
}

/*
 * Queue w.  If nobody has the strand, the turn is queued on the executor,
 * or, with hold, taken by the caller instead (returns 1: see "Held
 * turns" above).
 */
static int strand_submit(struct ao_strand *s, struct ao_work *w, bool blocking,
			 bool hold)
{
	bool start;
	int r;

	if (!s || !w || !w->fn || !s->exec)
		return -EINVAL;
	r = ao__exec_reserve(s->exec, blocking);
	if (r)
		return r;
	w->next = NULL;
	ao_spin_lock(&s->lock);
	if (s->tail)
		s->tail->next = w;
	else
		s->head = w;
	s->tail = w;
	WRITE_ONCE(s->submitted, s->submitted + 1);
	start = !s->queued && !s->running;
	if (start && hold) {
		s->running = true;
		ao_spin_unlock(&s->lock);
		return 1;
	}
	if (start)
		s->queued = true;
	ao_spin_unlock(&s->lock);
	if (start)
		ao__exec_push_forced(s->exec, &s->run);
	return 0;
}

int ao_strand_submit(struct ao_strand *s, struct ao_work *work)
{
	if (!s || !s->exec)
		return -EINVAL;
	return strand_submit(s, work, ao__exec_blocking(s->exec), false);
}

int ao_strand_try_submit(struct ao_strand *s, struct ao_work *work)
{
	return strand_submit(s, work, false, false);
}

int ao_strand_submit_hold(struct ao_strand *s, struct ao_work *work)
{
	if (!s || !s->exec)
		return -EINVAL;
	return strand_submit(s, work, ao__exec_blocking(s->exec), true);
}

unsigned int ao_strand_run_held(struct ao_strand *s, unsigned int max)
{
	struct ao_strand *outer = cur_strand;
	struct ao_exec *ex = s->exec;
	unsigned int n, off = 0;

	ao_spin_lock(&s->lock);
	cur_strand = s;
	n = run_items(s, max, &off);
	cur_strand = outer;
	run_end(s);
	/* Off the pool: counted finished once per run, not per item (three
	 * atomic operations and a fence).  After run_end(): s may be reused
	 * by now, but ex is kept until they are counted (drain waits). */
	ao__exec_finished_off(ex, off);
	return n;
}

/* ---- timers (core/timer.c) ---- */

bool ao__strand_timer_add(struct ao_strand *s, struct ao_timer *t, bool may_run)
{
	bool run = false;

	ao_spin_lock(&s->lock);
	t->next = NULL;
	t->pprev = s->tm_tail;
	*s->tm_tail = t;
	s->tm_tail = &t->next;
	if (s->running) {
		/* The runner takes it before its next item. */
	} else if (may_run) {
		s->running = true;
		run = true;
	} else if (!s->queued) {
		s->queued = true;
		ao_spin_unlock(&s->lock);
		ao__exec_push_forced(s->exec, &s->run);
		return false;
	}
	ao_spin_unlock(&s->lock);
	return run;
}

bool ao__strand_timer_del(struct ao_strand *s, struct ao_timer *t)
{
	bool queued;

	ao_spin_lock(&s->lock);
	/* Queued and linked are the same thing under this lock. */
	queued = t->pprev != NULL;
	if (queued) {
		*t->pprev = t->next;
		if (t->next)
			t->next->pprev = t->pprev;
		else
			s->tm_tail = t->pprev;
		t->next = NULL;
		t->pprev = NULL;
	}
	ao_spin_unlock(&s->lock);
	return queued;
}

void ao__strand_run_timers(struct ao_strand *s)
{
	struct ao_strand *outer = cur_strand;
	struct ao_timer *t;

	cur_strand = s;
	ao_spin_lock(&s->lock);
	while ((t = timer_pop(s))) {
		ao_spin_unlock(&s->lock);
		ao__timer_run_queued(t);
		ao_spin_lock(&s->lock);
	}
	cur_strand = outer;
	run_end(s);
}
