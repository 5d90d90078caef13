/* SPDX-License-Identifier: MIT */
/*
 * Strands: a serial queue on top of any executor.  Items submitted to one
 * strand run in submission order and never two at once, on the executor's
 * workers; the strand has no thread of its own.  Different strands run in
 * parallel.  This keeps one game session's packets in order while the
 * sessions share the workers.
 *
 * Timers may run on a strand (ao_timer_init_strand()): a fired timer goes
 * ahead of the items queued, and when the strand is idle the worker that
 * fires it runs it at once, ahead of the executor's queue.
 *
 * Each strand item counts against the executor's capacity until it starts,
 * so a bounded executor also bounds the strands' backlogs.  A strand item
 * submitted from a worker of a full executor (block policy) is accepted
 * beyond the bound rather than run inline, which would break the order.
 */
#ifndef AORTA_CORE_STRAND_H
#define AORTA_CORE_STRAND_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/core/call.h>
#include <aorta/core/work.h>
#include <aorta/sync/spinlock.h>

struct ao_exec;
struct ao_timer;

/* Items one turn runs before the strand goes to the back of the queue. */
#define AO_STRAND_DEFAULT_BATCH 64u

struct ao_strand {
	struct ao_work run; /* the turn, queued on the executor */
	struct ao_exec *exec;
	struct ao_spinlock lock; /* guards the lists and the flags */
	struct ao_work *head, *tail; /* items waiting, oldest first */
	struct ao_timer *tm_head; /* fired timers waiting (they go first) */
	struct ao_timer **tm_tail;
	bool queued; /* the turn is queued on the executor */
	bool running; /* a thread is running the strand's work */
	unsigned int batch; /* items per turn */
	uint64_t submitted; /* accepted (written under lock) */
	uint64_t executed; /* run (written by the turn) */
};

/* Initialise a strand over ex. */
AO_API void ao_strand_init(struct ao_strand *s, struct ao_exec *ex);
/* Check that a strand is idle before its memory is reused: 0, or -EBUSY
 * while items are queued or running. */
AO_API int ao_strand_destroy(struct ao_strand *s);
/* Queue an item on the strand; the executor's policy applies when full. */
AO_API int ao_strand_submit(struct ao_strand *s, struct ao_work *work);
/* Queue an item if the executor has room now; never blocks. */
AO_API int ao_strand_try_submit(struct ao_strand *s, struct ao_work *work);
/* Queue an item as ao_strand_submit() does; but if nobody runs the strand
 * and its turn is not queued, take the turn instead of queueing it on the
 * executor: returns 1, and the caller must then end the turn with
 * ao_strand_run_held() (until then other submits only append).  0 when
 * the strand was queued or running already (its runner takes the item),
 * or -errno as ao_strand_submit(). */
AO_API int ao_strand_submit_hold(struct ao_strand *s, struct ao_work *work);
/* End a turn taken by ao_strand_submit_hold(): run up to max of its items
 * on the calling thread, in order (fired timers first), then give the turn
 * up; work left is queued on the executor.  Returns the items run. */
AO_API unsigned int ao_strand_run_held(struct ao_strand *s, unsigned int max);
/* Queue fn(arg) on the strand, in order with its items (core/call.h).
 * Refused: fn is not run and arg not touched. */
AO_API int ao_strand_call(struct ao_strand *s, ao_call_fn fn, void *arg);
/* Same, but never blocks. */
AO_API int ao_strand_try_call(struct ao_strand *s, ao_call_fn fn, void *arg);
/* Items per turn (at least 1) before other work gets the worker. */
AO_API void ao_strand_set_batch(struct ao_strand *s, unsigned int batch);
/* True if nothing is queued on or running in the strand (a snapshot). */
AO_API bool ao_strand_idle(struct ao_strand *s);
/* The strand whose item the calling thread is running, or NULL. */
AO_API struct ao_strand *ao_strand_current(void);

#endif /* AORTA_CORE_STRAND_H */
