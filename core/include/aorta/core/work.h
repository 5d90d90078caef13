/* SPDX-License-Identifier: MIT */
/*
 * Intrusive work items.
 *
 * A struct ao_work is embedded in the caller's own struct and recovered in
 * the callback with container_of(), so submitting allocates nothing:
 *
 *	struct job { struct ao_work work; int n; };
 *	static void job_run(struct ao_work *w)
 *	{
 *		struct job *j = container_of(w, struct job, work);
 *		...
 *	}
 *	ao_work_init(&j->work, job_run);
 *	ao_exec_submit(exec, &j->work);
 *
 * While an item is queued the executor owns its link; once its function has
 * been called the item belongs to the caller again (the function may free
 * it or submit it again).
 */
#ifndef AORTA_CORE_WORK_H
#define AORTA_CORE_WORK_H

#include <stddef.h>
#include <aorta/compiler.h>

struct ao_work;

/* What a work item runs; it returns nothing (results are the caller's). */
typedef void (*ao_work_fn)(struct ao_work *work);

struct ao_work {
	struct ao_work *next; /* queue link, owned by the executor */
	ao_work_fn fn; /* called once per accepted submission */
};

#define AO_WORK_INIT(f)                 \
	{                               \
		.next = NULL, .fn = (f) \
	}

/* Initialise a work item to run fn (same as AO_WORK_INIT). */
static inline void ao_work_init(struct ao_work *work, ao_work_fn fn)
{
	work->next = NULL;
	work->fn = fn;
}

#endif /* AORTA_CORE_WORK_H */
