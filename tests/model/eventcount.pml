/* SPDX-License-Identifier: MIT */
/*
 * Promela model of the event count (sync/eventcount.c,
 * sync/include/aorta/sync/eventcount.h) in the use its header documents:
 *
 *	consumer:				producer:
 *	  for (;;) {				  publish an item;
 *		if (take an item) break;	  ao_ec_notify_one(ec);
 *		key = ao_ec_prepare(ec);
 *		if (take an item) {
 *			ao_ec_cancel(ec);
 *			break;
 *		}
 *		ao_ec_wait(ec, key, -1);
 *	  }
 *
 * NPROD producers publish ITEMS items each; NCONS consumers take
 * NPROD * ITEMS / NCONS items each.  Three threads by default: one producer
 * of two items and two consumers of one.  The run ends only when every
 * item was taken, so a consumer left asleep with an item it should have
 * been woken for is an invalid end state: that is the lost wake-up.  With
 * -DNP, pan also looks for cycles that never take an item (progress_took).
 *
 * The 64-bit word is two variables, epoch (high half) and waiters (low
 * half), and every atomic access of the C code to the word (the
 * fetch_adds, fetch_subs and loads) reads or writes both in one atomic
 * step.  The futex sleeps on the epoch half only:
 *  - futex_wait(key): if epoch != key, return at once (EAGAIN); otherwise
 *    queue and block in the same step, until a wake dequeues the thread;
 *  - futex_wake(n): dequeue any n queued threads (fewer if fewer sleep).
 * Spurious returns are not modelled (ao_ec_wait loops on any return, and a
 * thread that could always wake itself would hide lost wake-ups).
 * Memory is sequentially consistent, which is what the SEQ_CST RMW in
 * prepare and the SEQ_CST fence in notify provide for the one StoreLoad
 * pair that matters (item store / waiters load against waiters RMW / item
 * load); -DBUG=2 shows what happens without it.  The 32-bit epoch wrapping
 * after 2^32 notifies during one prepare..wait window is not modelled.
 *
 * -DNOTIFY_ALL uses ao_ec_notify_all() instead of ao_ec_notify_one().
 *
 * Deliberately broken variants (verify.sh checks that spin finds each):
 *  -DBUG=1  the consumer does not re-check for an item between prepare
 *           and wait: an item published before the prepare, whose notify
 *           saw no waiter, is slept through;
 *  -DBUG=2  the producer loads the waiter count before it publishes the
 *           item (the StoreLoad reordering the fences forbid);
 *  -DBUG=3  ao_ec_wait sleeps on the epoch it reads now instead of the key
 *           from prepare, so a notify between prepare and wait is lost.
 *
 * Map of the model to the C code: see tests/model/README.
 */

#ifndef NPROD
#define NPROD 1
#endif
#ifndef NCONS
#define NCONS 2
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef BUG
#define BUG 0
#endif
#define TAKE (NPROD * ITEMS / NCONS)

byte epoch = 0;			/* word >> 32 */
byte waiters = 0;		/* word & AO__EC_WAITERS */
byte items = 0;			/* published, not yet taken */
byte taken = 0;			/* taken, all consumers */
bit inq[4];			/* futex queue of the epoch half, by _pid */

/* ao_futex_wait(epoch_word(ec), key, -1) */
inline futex_wait(key)
{
	atomic {
		if
		:: epoch == key ->
			inq[_pid] = 1;
			(inq[_pid] == 0)	/* atomicity ends: sleep */
		:: else -> skip	/* EAGAIN */
		fi
	}
}

/* ao_futex_wake(epoch_word(ec), n): one, or every sleeper */
inline futex_wake()
{
	atomic {
#ifdef NOTIFY_ALL
		inq[0] = 0;
		inq[1] = 0;
		inq[2] = 0;
		inq[3] = 0
#else
		if
		:: inq[0] -> inq[0] = 0
		:: inq[1] -> inq[1] = 0
		:: inq[2] -> inq[2] = 0
		:: inq[3] -> inq[3] = 0
		:: else -> skip
		fi
#endif
	}
}

/* ao_ec_notify_one() / ao_ec_notify_all(): fence, load the waiter count;
 * if non-zero, ao__ec_wake(): fetch_add(EPOCH), futex_wake. */
inline notify(w)
{
	w = waiters;
	if
	:: w != 0 ->
		w = 0;
		epoch++;
		futex_wake()
	:: else
	fi
}

active [NPROD] proctype producer()
{
	byte i = 0, w = 0;

	do
	:: i < ITEMS ->
#if BUG == 2
		/* The waiter count read before the item is visible. */
		w = waiters;
		items++;
		if
		:: w != 0 ->
			w = 0;
			epoch++;
			futex_wake()
		:: else
		fi;
#else
		items++;		/* publish */
		notify(w);
#endif
		i++
	:: else -> break
	od
}

active [NCONS] proctype consumer()
{
	byte got = 0, key = 0, e = 0;

	do
	:: got == TAKE -> break
	:: else ->
		/* The condition: take an item if there is one. */
		atomic {
			if
			:: items > 0 -> items--; taken++; got++; goto progress_took
			:: else
			fi
		}
		/* ao_ec_prepare(): fetch_add(1), the old epoch is the key. */
		atomic { key = epoch; waiters++ };
#if BUG != 1
		/* Re-check; ao_ec_cancel() when the item is there. */
		atomic {
			if
			:: items > 0 ->
				items--;
				taken++;
				got++;
				waiters--;
				key = 0;
				goto progress_took
			:: else
			fi
		}
#endif
		/* ao_ec_wait(ec, key, -1): load the word; leave if the epoch
		 * moved; futex_wait on the key; loop. */
		do
		:: atomic {
			e = epoch;
			if
			:: e != key -> e = 0; break
			:: else
			fi
		   }
#if BUG == 3
			e = epoch;
			futex_wait(e);
			e = 0
#else
			e = 0;
			futex_wait(key)
#endif
		od;
		/* fetch_sub(1): the end of the prepare. */
		atomic { waiters--; key = 0 };
		goto top;
progress_took:
		skip;
top:
		skip
	od
}

/* Once every item is taken, no waiter is left registered or asleep. */
active proctype final()
{
	(taken == NPROD * ITEMS) ->
	assert(items == 0 && waiters == 0 && !inq[0] && !inq[1] && !inq[2] &&
	       !inq[3])
}
