/* SPDX-License-Identifier: MIT */
/*
 * Calls: run fn(arg) on an executor, a strand or a group without a work
 * item of the caller's own.
 *
 *	static void greet(void *arg) { ... }
 *	ao_exec_call(ex, greet, player);	(core/exec.h)
 *	ao_strand_call(&session->strand, on_packet, pkt);	(core/strand.h)
 *	ao_group_call(&g, child, range);	(core/group.h)
 *
 * The work item comes from a cache private to the calling thread and goes
 * back to it once fn has been called, wherever fn ran: a thread that calls
 * over and over allocates nothing once its cache is warm.  Intrusive items
 * (core/work.h) remain the cheapest form when the caller has a struct to
 * embed one in.
 *
 * Each call returns what the intrusive submit returns (0, -EAGAIN,
 * -ESHUTDOWN, -EINVAL), or -ENOMEM when the cache is empty and malloc()
 * fails.  A refused call does not run fn, then or later, and does not
 * touch arg: what arg points to is still the caller's (to free, or to try
 * again).  An accepted call runs fn(arg) exactly once; fn may call again
 * (a call tree, a chain), from the worker it runs on.
 *
 * Memory (see core/call.c): items are 32 bytes, carved from 2 KiB
 * slabs of AO_CALL_SLAB_ITEMS, each slab owned by the thread that
 * allocated it.  A thread keeps its wholly idle slabs for reuse and frees
 * those beyond AO_CALL_IDLE_SLABS that it went a second without using
 * (looking every 64 slab changes, some 4,000 calls); a slab with calls
 * out stays until they come back.  Slabs come from mappings of 8 to 256
 * KiB, as large as what the thread already holds; the pages of freed
 * slabs go back to the system.  Items run by another thread go home in
 * batches of at most AO_CALL_BATCH, and each thread holds at most one
 * batch meanwhile.  When a thread exits, its idle slabs are released, and
 * every other slab as soon as its last call has run; a thread that stops
 * calling keeps what it has until then.  The main thread's slabs are not
 * given back (no destructor runs for it).
 */
#ifndef AORTA_CORE_CALL_H
#define AORTA_CORE_CALL_H

#include <stdint.h>
#include <aorta/compiler.h>

/* What a call runs. */
typedef void (*ao_call_fn)(void *arg);

/* Items per slab (2 KiB: a 64-byte header and 62 items of 32 bytes). */
#define AO_CALL_SLAB_ITEMS 62u
/* Wholly idle slabs a thread keeps for good (the others it frees once
 * it goes a second without them). */
#define AO_CALL_IDLE_SLABS 16u
/* Items run on one thread for another that it holds at most before it
 * sends them home (items of one slab go together). */
#define AO_CALL_BATCH 32u

struct ao_call_stats {
	uint64_t slabs_allocated; /* slabs put in use so far, all threads */
	uint64_t slabs_released; /* slabs given up so far, all threads */
	uint64_t bytes; /* memory held now (mapped, less the pages given
			 * back, and the caches), all threads */
	uint64_t threads; /* thread caches alive (an exited thread's lives
			   * on while calls it made are out) */
	uint64_t cached; /* calling thread: its idle items, here or sent
			  * back (not those still held by others) */
	uint64_t held; /* calling thread: other threads' items it holds
			* until it sends them home */
};

/* Totals since start, and the calling thread's cache (racy snapshot). */
AO_API void ao_call_stats(struct ao_call_stats *st);

#endif /* AORTA_CORE_CALL_H */
