// SPDX-License-Identifier: MIT
/*
 * The ring thread: its loop, and the services it gives the connections
 * it owns: the mailbox through which other threads reach it, the strand
 * turns it holds and runs itself (AO_SERVER_RING_ASSIST), the kick list
 * (sends queued on its own thread), and the reaping of the connections
 * whose last reference went.  The design is at the top of io/server.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/sync/futex.h>
#include "io_priv.h"

static __thread struct io_ring *tls_ring;

struct io_ring *io_current_ring(void)
{
	return tls_ring;
}

void io_ring_set_current(struct io_ring *r)
{
	tls_ring = r;
}

void io_ring_wake(struct io_ring *r)
{
	uint64_t one = 1;

	/* EAGAIN means the counter is huge: the ring is surely awake. */
	if (write(r->efd, &one, sizeof(one)) < 0)
		return;
}

/* ---- the mailbox, and reaping ---- */

void io_ring_reap_add(struct io_ring *r, struct ao_conn *c)
{
	c->reap_next = r->reap;
	r->reap = c;
}

/* Ask the ring thread to look at c.  The caller holds a reference, except
 * for MB_FREE, which is posted after the last one went. */
void io_conn_post(struct ao_conn *c, uint32_t bits)
{
	struct io_ring *r = c->ring;
	struct ao_conn *head;
	uint32_t old;

	/* ACQ_REL: what the caller did before posting (queued a buffer,
	 * finished a packet) is visible to the ring once it reads the bits
	 * with its exchange; pairs with the xchg in drain_one(). */
	old = __atomic_fetch_or(&c->mb_flags, bits | MB_QUEUED,
				__ATOMIC_ACQ_REL);
	if (old & MB_QUEUED)
		return; /* already on the stack: the ring will see bits */
	if (!(bits & MB_FREE))
		ao_conn_get(c); /* the stack's reference */
	head = __atomic_load_n(&r->mb_head, __ATOMIC_RELAXED);
	do {
		c->mb_next = head;
		/* SEQ_CST: the push is ordered before the load of sleeping
		 * below (StoreLoad); pairs with the SEQ_CST store of sleeping
		 * and load of mb_head in the ring's wait.  It also releases
		 * c->mb_next to the ring's acquire exchange. */
	} while (!__atomic_compare_exchange_n(&r->mb_head, &head, c, true,
					      __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	/* The ring posting to itself (a ring handler) is awake: it drains
	 * the mailbox before it next blocks (see io_ring_main()). */
	if (!head && io_current_ring() != r &&
	    __atomic_load_n(&r->sleeping, __ATOMIC_SEQ_CST))
		io_ring_wake(r);
}

static void drain_one(struct io_ring *r, struct ao_conn *c, uint32_t bits)
{
	if (bits & MB_FREE) {
		io_ring_reap_add(r, c);
		return;
	}
	if (c->state < CONN_CLOSING) {
		if (bits & MB_SLOW)
			io_conn_close_abort(c, AO_CLOSE_SLOW);
		if (bits & MB_PROTO)
			io_conn_close_input(c, AO_CLOSE_PROTOCOL);
	}
	if (bits & MB_CLOSE)
		io_conn_close_graceful(
			c, c->ws ? io_wsc_local_reason(c) : AO_CLOSE_LOCAL,
			io_linger_deadline(c));
	if ((bits & MB_SEND) && c->state < CONN_CLOSING)
		r->be->send_kick(r, c);
	if (bits & MB_TIMER)
		io_conn_timer(c);
	if (bits & MB_RESUME) {
		uint32_t n = __atomic_load_n(&c->backlog, __ATOMIC_SEQ_CST);

		if (c->bp_paused && n <= r->srv->low_water) {
			c->bp_paused = false;
			if (c->state == CONN_OPEN)
				__atomic_store_n(&c->rx_paused, 0,
						 __ATOMIC_RELAXED);
			r->be->rx_update(r, c);
		}
		io_conn_check_drained(c);
	}
	ao_conn_put(c); /* the stack's reference */
}

void io_ring_drain_mailbox(struct io_ring *r)
{
	struct ao_conn *c;

	/* Acquire: pairs with the pushers' CAS, so each c->mb_next and what
	 * the pusher wrote before is visible. */
	while ((c = __atomic_exchange_n(&r->mb_head, NULL, __ATOMIC_ACQUIRE))) {
		while (c) {
			struct ao_conn *next = c->mb_next;
			/* Clear MB_QUEUED first: a post from now on pushes
			 * c again (and may rewrite mb_next, read above). */
			uint32_t bits = __atomic_exchange_n(&c->mb_flags, 0,
							    __ATOMIC_ACQ_REL);

			drain_one(r, c, bits);
			c = next;
		}
	}
}

void io_ring_reap(struct io_ring *r)
{
	struct ao_conn **pp = &r->reap;

	while (*pp) {
		struct ao_conn *c = *pp;

		/* The last put may have come from an item on c's strand,
		 * whose turn is still finishing: wait for it to be idle. */
		if (ao_strand_destroy(&c->strand) == 0) {
			*pp = c->reap_next;
			io_conn_free(c);
		} else {
			pp = &c->reap_next;
		}
	}
}

/* ---- strand turns the ring holds ---- */

/*
 * Queue w on c's strand.  AO_SERVER_RING_ASSIST: if nobody has the
 * strand, the ring takes its turn (ao_strand_submit_hold()) and runs it
 * after this batch of events (io_ring_run_turns()), instead of waking a
 * worker for it.  Ring thread only.
 */
int io_ring_submit(struct ao_conn *c, struct ao_work *w)
{
	struct io_ring *r = c->ring;
	int err;

	if (!r->assist || c->no_assist)
		return ao_strand_submit(&c->strand, w);
	err = ao_strand_submit_hold(&c->strand, w);
	if (err <= 0)
		return err;
	/* No reference: the items queued hold theirs, and the strand is not
	 * idle (so not freed) until the turn is run or given up. */
	c->turn_next = NULL;
	*r->turns_tail = c;
	r->turns_tail = &c->turn_next;
	return 0;
}

void io_ring_run_turns(struct io_ring *r)
{
	uint64_t start = 0, now = 0;
	struct ao_conn *c;

	if (!r->turns)
		return;
	start = now = ao_cycles();
	/* A handler may make more (a close that queues on_close). */
	while ((c = r->turns)) {
		uint64_t t0 = now;

		r->turns = c->turn_next;
		if (!r->turns)
			r->turns_tail = &r->turns;
		c->turn_next = NULL;
		if (now - start >= r->assist_budget) {
			/* Over the budget: the workers get the rest (the
			 * strand queues its turn as a submit would have). */
			ao_strand_run_held(&c->strand, 0);
			continue;
		}
		/* c stays allocated: only this thread frees, in reap. */
		IO_STAT_ADD(r, assisted,
			    ao_strand_run_held(&c->strand,
					       READ_ONCE(c->strand.batch)));
		now = ao_cycles();
		if (now - t0 > r->assist_slow)
			c->no_assist = true;
	}
}

/* ---- the kick list ---- */

/* A send queued on the ring's own thread: start it after the current
 * batch, without the mailbox (ring thread only, so no atomics).  No
 * reference: the ring flushes the list before it reaps. */
void io_ring_kick(struct ao_conn *c)
{
	struct io_ring *r = c->ring;

	if (c->kick_queued)
		return;
	c->kick_queued = true;
	c->kick_next = r->kicks;
	r->kicks = c;
}

void io_ring_flush_kicks(struct io_ring *r)
{
	struct ao_conn *c;

	/* A kick may close a conn (epoll: a failed send), whose on_close
	 * may send on another: the list may grow while it is walked. */
	while ((c = r->kicks)) {
		r->kicks = c->kick_next;
		c->kick_next = NULL;
		c->kick_queued = false;
		if (c->state < CONN_CLOSING)
			r->be->send_kick(r, c);
	}
}

void io_ring_drop_kicks(struct io_ring *r)
{
	struct ao_conn *c;

	while ((c = r->kicks)) {
		r->kicks = c->kick_next;
		c->kick_next = NULL;
		c->kick_queued = false;
	}
}

/* ---- the loop ---- */

static void ring_begin_stop(struct io_ring *r, uint64_t now)
{
	uint64_t deadline = now + r->srv->cfg.drain_timeout_ms * 1000000ull;
	struct ao_conn *c, *next;

	r->stop_seen = true;
	r->stop_deadline_ns = deadline;
	if (r->accepting) {
		r->accepting = false;
		r->be->accept_stop(r);
	}
	/* The ring's own exit is on the real clock (above); the conns'
	 * deadlines on their timers' (io_deadline_now()). */
	deadline = io_deadline_now(r->srv) +
		   r->srv->cfg.drain_timeout_ms * 1000000ull;
	for (c = r->conns; c; c = next) {
		next = c->next;
		io_conn_close_graceful(c, AO_CLOSE_SHUTDOWN, deadline);
	}
}

static void ring_retry_starved(struct io_ring *r)
{
	struct ao_conn *c, *next;

	r->be->refill(r);
	if (!r->nheld)
		return;
	for (c = r->conns; c && r->nheld; c = next) {
		next = c->next;
		if (c->held)
			io_conn_retry_held(c);
	}
}

void *io_ring_main(void *arg)
{
	struct io_ring *r = arg;
	struct ao_server *srv = r->srv;
	char name[16];
	int err;

	tls_ring = r;
	snprintf(name, sizeof(name), "ao-io%u", r->index);
	pthread_setname_np(pthread_self(), name);
	err = r->be->init(r);
	/* Release: the setup is visible to the starter; pairs with the
	 * acquire load in ao_server_start(). */
	__atomic_store_n(&r->ready, err ? (uint32_t)err : 1u, __ATOMIC_RELEASE);
	ao_futex_wake(&r->ready, 1);
	if (err)
		return NULL;
	r->accepting = true;
	r->be->accept_start(r);
	r->assist = srv->ring_assist;
	for (;;) {
		uint64_t now = ao_now_ns();
		int64_t timeout = -1;

		r->now_ns = io_deadline_now(srv);

		io_ring_drain_mailbox(r);
		if (!r->stop_seen &&
		    __atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE))
			ring_begin_stop(r, now);
		if (r->nheld || r->nnobufs)
			ring_retry_starved(r);
		if (r->accept_retry_ns && now >= r->accept_retry_ns) {
			r->accept_retry_ns = 0;
			if (r->accepting)
				r->be->accept_start(r);
		}
		/* Every turn held is run or handed over before the wait (and
		 * before the kicks: their handlers send). */
		io_ring_run_turns(r);
		/* Before reaping: a conn on the kick list is not freed. */
		io_ring_flush_kicks(r);
		io_ring_reap(r);
		if (r->stop_seen) {
			if (!r->conns && !r->nalive)
				break;
			if (now >= r->stop_deadline_ns + IO_STOP_GRACE_NS)
				break;
		}
		/* Idle and drain deadlines come through the mailbox (the
		 * conns' timers): a wait with nothing due on the ring itself
		 * has no timeout (arming a kernel timer on every wait that
		 * sleeps was a measurable share of a request). */
		if (r->stop_seen)
			timeout = (int64_t)(r->stop_deadline_ns +
					    IO_STOP_GRACE_NS - now);
		if (r->nheld || r->nnobufs || r->reap)
			timeout = IO_STARVED_POLL_NS;
		if (r->accept_retry_ns && r->accept_retry_ns > now &&
		    (timeout < 0 ||
		     (int64_t)(r->accept_retry_ns - now) < timeout))
			timeout = (int64_t)(r->accept_retry_ns - now);
		/* SEQ_CST store, then SEQ_CST load of the mailbox: pairs
		 * with the SEQ_CST push and load of sleeping in
		 * io_conn_post(), so a push either is seen here or writes
		 * the eventfd. */
		__atomic_store_n(&r->sleeping, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&r->mb_head, __ATOMIC_SEQ_CST))
			timeout = 0;
		r->be->wait(r, timeout);
		__atomic_store_n(&r->sleeping, 0, __ATOMIC_RELAXED);
	}
	/* From here conns close without the loop: no more held turns. */
	r->assist = false;
	io_ring_drop_kicks(r);
	r->be->fini(r);
	/* Out of time: no operation can complete now, so finish by hand
	 * what is left (handlers still running will put theirs later;
	 * ao_server_destroy() waits for that). */
	while (r->conns)
		io_conn_abandon(r->conns);
	tls_ring = NULL;
	return NULL;
}
