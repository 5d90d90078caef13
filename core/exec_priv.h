/* SPDX-License-Identifier: MIT */
/*
 * What strands and groups need from the executor beyond the public API:
 * accepting an item without queueing it (a strand keeps its own queue),
 * queueing a carrier item that may not be refused, and accounting for the
 * items a carrier runs.  What drivers (the timers) see: core/driver.h.
 */
#ifndef AORTA_CORE_EXEC_PRIV_H
#define AORTA_CORE_EXEC_PRIV_H

#include <stdbool.h>
#include <aorta/core/exec.h>

/* Accept one item that the caller queues itself: counts it as submitted
 * and takes a capacity slot.  blocking: wait for room (external callers)
 * or exceed the bound (workers); otherwise -EAGAIN when full.
 * -ESHUTDOWN once shutdown started. */
int ao__exec_reserve(struct ao_exec *ex, bool blocking);
/* Queue w, which may not be refused: allowed while some accepted item is
 * still pending (so the executor cannot have finished shutting down). */
void ao__exec_push_forced(struct ao_exec *ex, struct ao_work *w);
/* An item accepted with ao__exec_reserve() starts now (on a worker, or
 * off the pool: a held strand turn). */
void ao__exec_started(struct ao_exec *ex);
/* An item accepted with ao__exec_reserve() has run: counted and true on a
 * worker; false off the pool, where the caller counts such items with
 * ao__exec_finished_off() once it has run them (n at a time). */
bool ao__exec_finished(struct ao_exec *ex);
void ao__exec_finished_off(struct ao_exec *ex, unsigned int n);
/* On a worker of ex, run the driver's due work or park until woken or
 * cond(arg) holds; false if the caller is not one of ex's workers. */
bool ao__exec_park_worker(struct ao_exec *ex, bool (*cond)(void *arg),
			  void *arg);
/* True if ex's policy is AO_EXEC_BLOCK. */
bool ao__exec_blocking(const struct ao_exec *ex);
/* Wake every parked worker of ex (they re-check their conditions). */
void ao__exec_wake_all(struct ao_exec *ex);

#endif /* AORTA_CORE_EXEC_PRIV_H */
