/* SPDX-License-Identifier: MIT */
/*
 * Promela model of the executor's queues and idle/wake protocol
 * (core/exec.c, core/deque.h): the edge notify of submit(), the injector
 * (lock-free inbox + inbox_set + locked head list), the per-worker rings
 * (AO_EXEC_STEAL) or private batches (AO_EXEC_SHARED), and worker_idle():
 * the search spin, start_searching()/stop_searching(), park() with
 * park_prepare()'s two re-checks, the driver's choice not to sleep
 * (core/driver.h), park_finish(), park_called_off(), and exec_notify()
 * with nsleeping / nsearching / wake_pending.  The inbox is core/inbox.h.
 *
 * Scenarios (-DSCEN=):
 *  1 "gates" (test_gate_per_worker): one external producer submits NW
 *    gate items; a worker that takes a gate blocks until all NW gates
 *    were taken (so each needs a worker of its own), then stops.  A
 *    state where a gate is still queued and the other workers sleep is
 *    an invalid end state (the gate holders are not at an end label).
 *  2 "xo" (test_xo_*): NPROD external producers submit ITEMS items each;
 *    running any item may submit children from its worker (push_local(),
 *    edge notify) while the CHILDREN budget lasts.  Once the producers
 *    are done and nothing runs, every item must have been taken: the
 *    monitor final() waits for that, so "items queued, every worker
 *    asleep for good" is an invalid end state (a lost wake-up).  Workers
 *    asleep in the futex are at an end label: a pool asleep with nothing
 *    left to do is a valid end.
 *
 * -DSTEAL=1 (default) models AO_EXEC_STEAL, -DSTEAL=0 AO_EXEC_SHARED.
 *
 * Steps: every access of the C code to memory another thread reads or
 * writes is one Promela step (loads, stores, and each atomic RMW/CAS/
 * exchange, a successful CAS loop being one RMW); memory is sequentially
 * consistent.  Loads and stores only their own thread sees (the owner's
 * read of its ring's bottom, len/tail under the lock) are merged into the
 * neighbouring step, and so are the lock's acquire with the first locked
 * read of head and its release with the last locked write of head (only
 * workers take the lock; a thread waiting for it does nothing else).
 * Loads whose value the C code never uses (the full-ring check of the
 * pushes in inject_grab(), which cannot fail there) and RMWs that no
 * modelled thread reads (the event count's waiter half: exec_notify()
 * looks at nsleeping, not at it; the statistics counters) are left out.
 *
 * The event count (see eventcount.pml): prepare returns the epoch, the
 * wait loops "load epoch; leave if != key; futex_wait(key)", a wake bumps
 * the epoch and dequeues one futex sleeper.  No spurious futex returns.
 *
 * Free choices (over-approximations): how long a spin lasts (each look is
 * followed by a choice to look again or to park: budgets, spin_fails,
 * pauses and yields only decide that), whether a look starts at the
 * injector (the GLOBAL_INTERVAL tick), the thieves' random start, which
 * futex sleeper a wake dequeues, how many children an item submits,
 * whether a patient take (worker_main()'s and the spin's find_work(w,
 * true)) finds the inbox too young to detach (-DPATIENT=0: never), and
 * whether a searcher's spin yields its CPU away and stops searching
 * (spin_lent(); -DLENT=0: never), and whether the driver, once a park
 * has passed both re-checks, declines to sleep because something of its
 * own is due (park(): the timers' next deadline; -DDRIVER=0: never).
 *
 * Not modelled: capacity/credit (capacity 0), shutdown/exiting/drain,
 * strands and group waits (ao__exec_park_worker), ring overflow and
 * ao_inbox_push_list() (rings hold AO_EXEC_DEQUE_SIZE >> items here, so room never
 * limits a batch, and SHARED_BATCH_MAX 16 never does either).
 *
 * The refill window, and its fix, the default.  ao__inbox_refill()
 * clears inbox_set, exchanges the inbox with NULL and only then stores
 * head: in between, a peeker sees head == NULL and inbox_set == 0 while
 * the items are in the refiller's hands.  A worker whose second re-check
 * of park_prepare() falls in that window sleeps; the refiller takes
 * len / div + 1 of the items and leaves the rest in head without a
 * notify (inject_grab() notifies only when it rings some, shared_find()
 * never); if it then runs an item that blocks until another one runs (a
 * gate), the rest wait for ever.  The submitters' edge notify does not
 * help: the first found the parking worker not yet counted, the others
 * found the inbox non-empty.  The model of the code as it was before the
 * fix (-DCURRENT=1) ends in that state with AO_EXEC_SHARED and 2 workers, and
 * with AO_EXEC_STEAL and 3 (k = 2 / 3 + 1 = 1 leaves one in head; with 2
 * workers, k = len / 2 + 1 takes every item of a 2- or 3-item inbox and
 * inject_grab() notifies).  The default model has the fix:
 * ao_inbox_take() reports that it refilled head and left items there, and
 * its caller (shared_find(), inject_grab() when it rang none) calls
 * exec_notify() for them, as a submit would (publish_hidden()).
 *
 * Deliberately broken variants (verify.sh checks that spin finds each):
 *  -DBUG=2  stop_searching() never re-notifies (gates: a searcher's
 *           own notifies are skipped while it counts itself searching);
 *  -DBUG=3  submits never notify (the edge test always false);
 *  -DBUG=4  inject_grab() does not notify after ringing its batch;
 *  -DBUG=5  ao__inbox_refill() clears inbox_set after the exchange, not
 *           before (a push in between leaves the inbox hidden for good);
 *  -DBUG=6  park_prepare() makes one re-check, before nsleeping++;
 *  -DBUG=1  park_called_off() does nothing: NOT found in these
 *           scenarios (2 workers, gates and xo): a wake that a called-off
 *           park swallowed leaves wake_pending set only until the next
 *           park_prepare() or start_searching() clears it.
 *
 * Other options: -DNW=2|3 workers; -DNPROD, -DITEMS (per producer),
 * -DCHILDREN (scenario 2); -DTICK=0 drops the injector-first look;
 * -DLOOKS=n bounds a spin to n looks (0: unbounded, the default; the
 * repeated looks add next to no states).
 *
 * Map of the model to the C code: see tests/model/README.
 */

#ifndef NW
#define NW 2
#endif
/* -DCURRENT=1 is the code before the refill fix, which had neither. */
#ifndef PATIENT
#define PATIENT !CURRENT
#endif
#ifndef LENT
#define LENT !CURRENT
#endif
#ifndef STEAL
#define STEAL 1
#endif
#ifndef DRIVER
#define DRIVER 1
#endif
#ifndef SCEN
#define SCEN 1
#endif
#if SCEN == 1
#undef NPROD
#define NPROD 1
#undef ITEMS
#define ITEMS NW
#undef CHILDREN
#define CHILDREN 0
#endif
#ifndef NPROD
#define NPROD 1
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef CHILDREN
#define CHILDREN 1
#endif
#ifndef TICK
#define TICK 1
#endif
#ifndef LOOKS
#define LOOKS 0
#endif
#ifndef BUG
#define BUG 0
#endif
#ifndef CURRENT
#define CURRENT 0
#endif
#define STEAL_RETRIES 4

#define CALLED_OFF 1
#define SLEPT 2

/* struct ao_queue ex->q */
byte inbox = 0;			/* items on the lock-free inbox */
bit inbox_set = 0;		/* q->inbox_set */
byte qlen = 0;			/* head..tail: head != NULL iff qlen > 0 */
bit qlock = 0;			/* q->lock */
/* struct ao_deque of each worker (AO_EXEC_STEAL) */
short top[3];
short bot[3];
/* wake state */
byte nsearching = 0;
byte nsleeping = 0;
bit wake_pending = 0;
/* ex->idle_ec: the epoch half, and the futex queue by worker */
byte epoch = 0;
bit inq[3];
/* the scenario's bookkeeping (not protocol state) */
byte submitted = 0;		/* pushed, all producers and workers */
byte taken = 0;			/* items taken by workers */
byte running = 0;		/* items running */
byte budget = CHILDREN;		/* children left to submit */
byte proddone = 0;		/* producers that returned */

/* ao_futex_wake(epoch_word, 1) */
inline futex_wake()
{
	atomic {
		if
		:: inq[0] -> inq[0] = 0
		:: inq[1] -> inq[1] = 0
		:: inq[2] -> inq[2] = 0
		:: else -> skip
		fi
	}
}

/* exec_notify(), core/exec.c: fence; load nsleeping, nsearching,
 * wake_pending (one step each, in that order, each may return); exchange
 * wake_pending; ao__ec_wake(): fetch_add epoch, futex_wake(1). */
inline exec_notify()
{
	if
	:: nsleeping == 0 -> skip
	:: else ->
		if
		:: nsearching != 0 -> skip
		:: else ->
			if
			:: wake_pending -> skip
			:: else ->
				atomic { tmp = wake_pending; wake_pending = 1 };
				if
				:: tmp -> tmp = 0
				:: else ->
					epoch++;
					futex_wake()
				fi
			fi
		fi
	fi
}

/* ao_inbox_push() (CAS loop = one RMW; edge = the inbox was empty), then
 * the store of inbox_set when it was; submitted++ is bookkeeping. */
inline ao_inbox_push()
{
	atomic { edge = (inbox == 0); inbox++; submitted++ };
	if
	:: edge -> inbox_set = 1
	:: else
	fi
}

/* ao_inbox_peek(): READ_ONCE(head) || READ_ONCE(inbox_set) */
inline ao_inbox_peek()
{
	if
	:: qlen > 0 -> vis = 1
	:: else ->
		if
		:: inbox_set -> vis = 1
		:: else -> vis = 0
		fi
	fi
}

/* work_visible(): ao_inbox_peek(), then (STEAL) ao_deque_size() of every
 * ring in order: load top, load bottom. */
inline work_visible()
{
	ao_inbox_peek();
#if STEAL
	i = 0;
	do
	:: vis || i == NW -> break
	:: else ->
		t1 = top[i];
		if
		:: bot[i] > t1 -> vis = 1
		:: else
		fi;
		i++
	od;
	i = 0;
	t1 = 0;
#endif
}

/* ao_inbox_take(q, div, ...): k items taken (0: NULL).  max never binds.
 * hid: the take refilled head from the inbox and left items there (the
 * fix publishes them; see HIDDEN below).  Its first look is ao_inbox_peek()'s
 * two loads; with patience (pat: find_work(w, true)) an inbox seen set
 * behind an empty head may be left alone (younger than INBOX_AGE_NS: a
 * free choice). */
inline ao_inbox_take(div)
{
	k = 0;
	hid = 0;
	if
	:: qlen > 0 -> vis = 1
	:: else ->
		if
		:: inbox_set ->
			vis = 1;
#if PATIENT
			if
			:: pat -> vis = 0	/* young: leave it for now */
			:: skip
			fi
#endif
		:: else -> vis = 0
		fi
	fi;
	if
	:: vis ->
		vis = 0;
		/* ao_spin_lock; if (!q->head) */
		atomic { qlock == 0 -> qlock = 1; n = qlen };
		if
		:: n == 0 ->
			/* ao__inbox_refill(): ACQUIRE load of inbox_set */
			if
			:: inbox_set ->
#if BUG == 5
				atomic { n = inbox; inbox = 0 };
				inbox_set = 0;
#else
				inbox_set = 0;
				atomic { n = inbox; inbox = 0 };
#endif
				if
				:: n > 0 -> qlen = n; hid = 1	/* WRITE_ONCE(head) */
				:: else
				fi
			:: else
			fi
		:: else
		fi;
		/* first = q->head (a locked read: only lock holders write) */
		if
		:: qlen == 0 -> qlock = 0; hid = 0	/* unlock, NULL */
		:: else ->
			k = qlen / (div) + 1;
			if
			:: k > qlen -> k = qlen
			:: else
			fi;
			/* WRITE_ONCE(head, last->next); len -= k; unlock */
			atomic { qlen = qlen - k; hid = hid && qlen > 0; qlock = 0 }
		fi;
		n = 0
	:: else
	fi
}

/* The fix: a take that refilled head from the inbox and left
 * items there publishes them as a submit would.  -DCURRENT=1: the code
 * before it (no such notify). */
inline publish_hidden()
{
#if CURRENT
	skip
#else
	if
	:: hid -> hid = 0; exec_notify()
	:: else
	fi
#endif
}

#if STEAL
/* ao_deque_pop() of the own ring: got = 1 if it returned an item. */
inline ring_pop()
{
	atomic { b1 = bot[me] - 1; bot[me] = b1 };	/* store bottom */
	t1 = top[me];					/* fence; load top */
	if
	:: t1 > b1 -> bot[me] = b1 + 1			/* empty: undo */
	:: t1 == b1 ->
		/* the last item: CAS top, then restore bottom */
		atomic {
			if
			:: top[me] == t1 -> top[me] = t1 + 1; got = 1
			:: else
			fi
		};
		bot[me] = b1 + 1
	:: t1 < b1 -> got = 1
	fi;
	t1 = 0;
	b1 = 0
}

/* ao_deque_steal(&workers[v].dq): r = 0 empty, 1 ok, 2 retry. */
inline ring_steal(v)
{
	t1 = top[v];					/* load top */
	if
	:: bot[v] <= t1 -> r = 0			/* fence; load bottom */
	:: else ->
		atomic {				/* CAS top */
			if
			:: top[v] == t1 -> top[v] = t1 + 1; r = 1
			:: else -> r = 2
			fi
		}
	fi;
	t1 = 0
}

/* steal_any() */
inline steal_one(v)
{
	tries = 0;
	do
	:: got || tries == STEAL_RETRIES -> break
	:: else ->
		ring_steal(v);
		if
		:: r == 1 -> got = 1
		:: r == 0 -> tries = STEAL_RETRIES - 1
		:: else
		fi;
		r = 0;
		tries++
	od;
	tries = 0
}

inline steal_any()
{
#if NW == 2
	steal_one(1 - me);
#else
	/* random start: the first victim, then the other */
	if
	:: v = (me + 1) % NW
	:: v = (me + 2) % NW
	fi;
	steal_one(v);
	if
	:: !got ->
		v = (v == (me + 1) % NW -> (me + 2) % NW : (me + 1) % NW);
		steal_one(v)
	:: else
	fi;
	v = 0;
#endif
}

/* inject_grab(): take len / NW + 1 from the injector, run the first, push
 * the rest onto the own ring (bottom stores), then exec_notify(). */
inline inject_grab()
{
	ao_inbox_take(NW);
	if
	:: k > 0 ->
		got = 1;
		k--;
		if
		:: k > 0 ->
			do
			:: k > 0 -> bot[me]++; k--
			:: else -> break
			od;
#if BUG != 4
			exec_notify()
#endif
		:: else
			publish_hidden()
		fi
	:: else
	fi;
	k = 0;
	hid = 0
}

/* find_work() = steal_find() */
inline find_work()
{
	got = 0;
#if TICK
	if
	:: skip -> inject_grab()	/* ++tick % GLOBAL_INTERVAL == 0 */
	:: skip
	fi;
#endif
	if
	:: !got -> ring_pop()
	:: else
	fi;
	if
	:: !got -> inject_grab()
	:: else
	fi;
	if
	:: !got -> steal_any()
	:: else
	fi
}

/* push_local(): ao_deque_push_size(): load top (own bottom merged), store
 * bottom; edge = the size before the push was 0. */
inline push_local()
{
	atomic { t1 = top[me]; edge = (bot[me] == t1); submitted++ };
	bot[me]++;
	t1 = 0
}
#else /* AO_EXEC_SHARED */
/* find_work() = shared_find(): the private batch first, else a batch of
 * len / (2 * NW) + 1 from the queue, the rest kept in w->local. */
inline find_work()
{
	got = 0;
	if
	:: lbatch > 0 -> lbatch--; got = 1
	:: else ->
		ao_inbox_take(2 * NW);
		if
		:: k > 0 -> got = 1; lbatch = k - 1; publish_hidden()
		:: else
		fi;
		k = 0;
		hid = 0
	fi
}

inline push_local()
{
	ao_inbox_push()
}
#endif

/* start_searching(): fetch_add nsearching; store wake_pending = 0 */
inline start_searching()
{
	nsearching++;
	searching = 1;
	wake_pending = 0
}

/* stop_searching(): fetch_sub nsearching; the last one re-notifies if
 * work is visible. */
inline stop_searching()
{
	searching = 0;
	atomic { tmp = nsearching; nsearching-- };
#if BUG != 2
	if
	:: tmp == 1 ->
		tmp = 0;
		work_visible();
		if
		:: vis -> vis = 0; exec_notify()
		:: else
		fi
	:: else
	fi;
#endif
	tmp = 0
}

/* park_called_off() */
inline park_called_off()
{
#if BUG != 1
	wake_pending = 0;
	work_visible();
	if
	:: vis -> vis = 0; exec_notify()
	:: else
	fi
#else
	skip
#endif
}

/* submit(): push, and exec_notify() if the push found its queue empty */
inline submit_notify()
{
#if BUG == 3
	edge = 0
#else
	if
	:: edge -> edge = 0; exec_notify()
	:: else
	fi
#endif
}

active [NW] proctype worker()
{
	byte me, searching, key, r, vis, i, tmp, k, n, v, tries, lbatch, looks;
	bit got, edge, hid, pat;
	short t1, b1;

	me = _pid;
main_loop:
	/* worker_main(): find_work(w, true), else worker_idle() */
	pat = 1;
	find_work();
	pat = 0;
	if
	:: got -> goto run_item
	:: else
	fi;
	/* worker_idle(); flush_credit/notify_drainers: not modelled */
idle_loop:
	if
	:: !searching ->
		if
		:: 2 * nsearching < NW -> start_searching()
		:: else
		fi
	:: else
	fi;
	/* the spin: look, then spin on or give up (a free choice) */
	do
	:: work_visible();
		if
		:: vis ->
			vis = 0;
			pat = 1;
			find_work();	/* find_work(w, true) */
			pat = 0;
			if
			:: got ->
				if
				:: searching -> stop_searching()
				:: else
				fi;
				goto run_item
			:: else
			fi
		:: else
		fi;
#if LENT
		/* spin_lent(): a yield gave the CPU away; a searcher stops
		 * searching and spins on (a free choice) */
		if
		:: searching -> stop_searching()
		:: skip
		fi;
#endif
#if LOOKS
		looks++;
		if
		:: looks < LOOKS -> skip
		:: else -> looks = 0; break
		fi
#else
		if
		:: skip
		:: break
		fi
#endif
	od;
	/* park(): park_prepare() */
	key = epoch;				/* ao_ec_prepare() */
	if
	:: searching -> searching = 0; nsearching--
	:: else
	fi;
	wake_pending = 0;
#if BUG == 6
	work_visible();
	nsleeping++;
	if
	:: vis -> vis = 0; nsleeping--; r = CALLED_OFF
	:: else
	fi;
#else
	work_visible();				/* pass 0 */
	if
	:: vis -> vis = 0; r = CALLED_OFF		/* ao_ec_cancel() */
	:: else ->
		nsleeping++;			/* pass 1 */
		work_visible();
		if
		:: vis -> vis = 0; nsleeping--; r = CALLED_OFF
		:: else
		fi
	fi;
#endif
#if DRIVER
	/* park() with a driver: it may decline to sleep (something due):
	 * nsleeping--, ao_ec_cancel(), PARK_CALLED_OFF */
	if
	:: r == 0 ->
		if
		:: skip
		:: nsleeping--; r = CALLED_OFF
		fi
	:: else
	fi;
#endif
	if
	:: r == 0 ->
		/* park_finish(): ao_ec_wait(key) */
		do
		:: epoch != key -> break
		:: else ->
			atomic {		/* futex_wait(key) */
				if
				:: epoch == key -> inq[me] = 1
				:: else
				fi
			};
end_sleep:
			(inq[me] == 0)
		od;
		nsleeping--;
		r = SLEPT;
		start_searching()		/* worker_idle(): PARK_SLEPT */
	:: else
	fi;
	key = 0;
	/* worker_idle() after park() */
	find_work();
	if
	:: got ->
		if
		:: searching -> stop_searching()
		:: else ->
			if
			:: r == CALLED_OFF -> park_called_off()
			:: else
			fi
		fi;
		r = 0;
		goto run_item
	:: else -> r = 0; goto idle_loop
	fi;
run_item:
	got = 0;
#if SCEN == 1
	/* gate_fn(): block until every gate has been taken */
	atomic { taken++; assert(taken <= submitted) };
	(taken == ITEMS * NPROD)
	/* the gates open: every worker holds one; the worker stops here */
#else
	/* xo_fn(): run, submitting children while the budget lasts */
	atomic { taken++; running++; assert(taken <= submitted) };
	do
	:: atomic { budget > 0 -> budget-- };	/* the test's slot allocator */
		push_local();
		submit_notify()
	:: break
	od;
	running--;
	goto main_loop
#endif
}

active [NPROD] proctype producer()
{
	byte i, tmp;
	bit edge;

	do
	:: i < ITEMS ->
		/* submit() from outside: accept_external() (not modelled),
		 * ao_inbox_push(), exec_notify() on an empty inbox */
		ao_inbox_push();
		submit_notify();
		i++
	:: else -> break
	od;
	proddone++
}

/* Everything submitted is taken once the producers are done and no item
 * runs (so none can submit more). */
active proctype final()
{
	(proddone == NPROD && running == 0 &&
	 taken == ITEMS * NPROD + CHILDREN - budget) ->
	assert(taken == submitted)
}
