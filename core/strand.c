// SPDX-License-Identifier: MIT
/*
 * Strands: a serial queue over an executor, with no thread of its own.
 *
 * A strand is a locked FIFO of items plus one carrier item, s->run, which
 * is queued on the executor whenever the strand has items and no turn is
 * queued or running (scheduled).  A turn runs up to batch items in order,
 * then, if items remain, queues the carrier again at the back, so one busy
 * strand cannot hold a worker forever.  Only a turn pops items, and at
 * most one turn exists at a time (scheduled is set and cleared under the
 * lock), which gives both order and mutual exclusion; the lock also makes
 * every item's effects visible to the next item, wherever it runs.
 *
 * Accounting: each item is accepted by the executor on submission
 * (ao__exec_reserve(): counted, a capacity slot taken, -ESHUTDOWN after
 * shutdown) and counted finished when it has run; the carrier is queued
 * with ao__exec_push_forced(), which cannot be refused, because it only
 * ever carries items that were accepted, and destroy waits for those.  So
 * drain and destroy cover strand items too, and a submit is refused, never
 * dropped.
 */
#include <errno.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include "exec_priv.h"

static __thread struct ao_strand *cur_strand
	__attribute__((tls_model("initial-exec")));

static void strand_turn(struct ao_work *run);

void ao_strand_init(struct ao_strand *s, struct ao_exec *ex)
{
	ao_work_init(&s->run, strand_turn);
	s->exec = ex;
	ao_spin_init(&s->lock);
	s->head = s->tail = NULL;
	s->scheduled = false;
	s->batch = AO_STRAND_DEFAULT_BATCH;
	s->submitted = 0;
	s->executed = 0;
}

void ao_strand_set_batch(struct ao_strand *s, unsigned int batch)
{
	WRITE_ONCE(s->batch, batch ? batch : 1);
}

bool ao_strand_idle(struct ao_strand *s)
{
	bool idle;

	ao_spin_lock(&s->lock);
	idle = !s->scheduled;
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

/* Pop the oldest item; with none left, end the turn (scheduled = false). */
static struct ao_work *strand_pop(struct ao_strand *s)
{
	struct ao_work *w;

	ao_spin_lock(&s->lock);
	w = s->head;
	if (w) {
		s->head = w->next;
		if (!s->head)
			s->tail = NULL;
	} else {
		s->scheduled = false;
	}
	ao_spin_unlock(&s->lock);
	return w;
}

static void strand_turn(struct ao_work *run)
{
	struct ao_strand *s = container_of(run, struct ao_strand, run);
	struct ao_exec *ex = s->exec;
	struct ao_strand *outer = cur_strand;
	unsigned int batch = READ_ONCE(s->batch);
	bool more = false;

	cur_strand = s;
	for (unsigned int n = 0; n < batch; n++) {
		struct ao_work *w = strand_pop(s);

		if (!w)
			goto out;
		ao__exec_started(ex);
		w->fn(w);
		/* Only the turn writes executed, and turns are serial. */
		WRITE_ONCE(s->executed, s->executed + 1);
		ao__exec_finished(ex);
	}
	/* Batch used up: the rest waits its turn behind other work. */
	ao_spin_lock(&s->lock);
	more = s->head != NULL;
	if (!more)
		s->scheduled = false;
	ao_spin_unlock(&s->lock);
	if (more)
		ao__exec_push_forced(ex, &s->run);
out:
	cur_strand = outer;
}

static int strand_submit(struct ao_strand *s, struct ao_work *w, bool blocking)
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
	start = !s->scheduled;
	s->scheduled = true;
	ao_spin_unlock(&s->lock);
	if (start)
		ao__exec_push_forced(s->exec, &s->run);
	return 0;
}

int ao_strand_submit(struct ao_strand *s, struct ao_work *work)
{
	if (!s || !s->exec)
		return -EINVAL;
	return strand_submit(s, work, ao__exec_blocking(s->exec));
}

int ao_strand_try_submit(struct ao_strand *s, struct ao_work *work)
{
	return strand_submit(s, work, false);
}
