/* SPDX-License-Identifier: MIT */
/*
 * Promela model of the three-phase lock's state protocol
 * (sync/spinlock.c, sync/include/aorta/sync/spinlock.h).
 *
 * NTHREADS threads each take and release the lock NACQ times.  The model
 * keeps the one 32-bit lock word with the same bits as the C code (LOCKED,
 * HANDOFF, STARVING, WOKEN, waiters << 8), every read-modify-write of the
 * word is one atomic step (a CAS, or the add that registers a sleeper), and
 * plain loads are steps of their own, so every interleaving of the C
 * code's atomic accesses is explored.
 *
 * What is checked (see verify.sh):
 *  - mutual exclusion: an assertion on the number of threads inside the
 *    critical section, and that the word says LOCKED, not HANDOFF, there;
 *  - no lost wake-up / no deadlock: every thread reaches its end only after
 *    NACQ acquisitions, so a thread asleep forever is an invalid end state;
 *    and when all are done the word is 0 again (no flag or count leaked);
 *  - no livelock: with -DNP, no cycle that never passes the critical
 *    section (the "progress" label) exists, under weak fairness.
 *
 * The futex (ao_futex_wait/ao_futex_wake in sync/futex.c):
 *  - futex_wait(val) is atomic as in the kernel: if the word is not val it
 *    returns at once (EAGAIN); otherwise the thread is queued in the same
 *    step and then blocks until a futex_wake dequeues it;
 *  - futex_wake(1) dequeues any one queued thread (the kernel's FIFO is one
 *    of the choices, so this covers it) or does nothing when none sleeps;
 *  - spurious returns (EINTR) are not modelled: the C code re-reads the
 *    word and loops after any return, and allowing them would hide lost
 *    wake-ups from the deadlock check (a thread could always wake itself).
 *
 * Abstractions, all over-approximations (more behaviours, not fewer):
 *  - phases 1 and 2 (trylock, the TTAS spin and the sched_yield() loop)
 *    are the same step in the model: load the word, and CAS LOCKED in if
 *    no BUSY bit is set.  The time budget, the spinner cap and the yield
 *    count only decide how many such attempts are made: 1..TRIES (trylock
 *    is always made; cpu_relax, backoff and sched_yield change nothing in
 *    the word);
 *  - "deadline_passed(now, t0 + starve)" is a free choice each time;
 *  - memory is sequentially consistent: the model checks the protocol,
 *    not the ACQUIRE/RELEASE orderings (TSan and the stress tests do).
 *
 * Deliberately broken variants (verify.sh checks that spin finds each):
 *  -DBUG=1  a sleeper goes to sleep without clearing WOKEN: unlocks then
 *           skip the wake and the sleeper is never woken (lost wake-up);
 *  -DBUG=2  an unlock that hands off (STARVING) neither sets WOKEN nor
 *           wakes anyone: the lock is held for a sleeper that sleeps on;
 *  -DBUG=3  a sleeper's "is it held?" test looks only at HANDOFF: it takes
 *           a held lock (mutual exclusion fails);
 *  -DBUG=4  the unlock slow path retries its CAS with the value it first
 *           saw instead of the one the failed CAS returned: it retries for
 *           ever (a livelock, found by the non-progress check).
 *
 * Map of the model to the C code: see tests/model/README.
 */

#ifndef NTHREADS
#define NTHREADS 3
#endif
#ifndef NACQ
#define NACQ 2
#endif
#ifndef TRIES
#define TRIES 2
#endif
#ifndef BUG
#define BUG 0
#endif

#define LOCKED		1	/* AO_SPIN_LOCKED */
#define HANDOFF		2	/* AO_SPIN_HANDOFF */
#define STARVING	4	/* AO_SPIN_STARVING */
#define WOKEN		8	/* AO_SPIN_WOKEN */
#define WAITER		256	/* AO_SPIN_WAITER */
#define BUSY		(LOCKED | HANDOFF | STARVING)
#define NWAITERS(w)	((w) >> 8)

int state = 0;			/* lock->state */
byte incs = 0;			/* threads in the critical section */
byte done = 0;			/* threads that finished */
bit inq[4];			/* futex queue of &lock->state, by _pid */

/*
 * Each atomic { } below is one atomic access to the word (a load, a CAS or
 * an add) together with the purely local computation that follows it;
 * joining local steps to a neighbouring access hides no interleaving.
 * Locals are zeroed once dead, so that states differing only in stale
 * values are not told apart.
 */

/* ao_futex_wait(&state, val, -1) */
inline futex_wait(val)
{
	atomic {
		if
		:: state == val ->
			inq[_pid] = 1;
			/* Blocks (atomicity ends here) until dequeued. */
			(inq[_pid] == 0)
		:: else -> skip	/* EAGAIN */
		fi
	}
}

/* ao_futex_wake(&state, 1) */
inline futex_wake_one()
{
	atomic {
		if
		:: inq[0] -> inq[0] = 0
		:: inq[1] -> inq[1] = 0
		:: inq[2] -> inq[2] = 0
		:: inq[3] -> inq[3] = 0
		:: else -> skip
		fi
	}
}

active [NTHREADS] proctype thread()
{
	int v, n;
	bool starver, wake;
	byte k = 0, t = 0;

	do
	:: k < NACQ ->
		/* ao__spin_lock(): fast path CAS 0 -> LOCKED. */
		atomic {
			if
			:: state == 0 -> state = LOCKED; goto cs
			:: else
			fi
		}

		/* Phases 1 and 2: 1..TRIES test-and-test-and-set attempts
		 * (ao__spin_trylock, spin_phase, yield_phase): load; CAS
		 * LOCKED in only if no BUSY bit is set. */
		do
		:: t < TRIES ->
			atomic {
				t++;
				v = state;
				if
				:: (v & BUSY) -> v = 0; goto next_try
				:: else
				fi
			}
			atomic {
				if
				:: state == v -> state = v | LOCKED; goto cs
				:: else -> v = 0	/* CAS failed */
				fi
			}
next_try:
			skip
		:: t > 0 -> break	/* budget spent */
		od;

		/* Phase 3: sleep_phase().  Register: add_fetch(WAITER). */
		atomic { t = 0; state = state + WAITER; v = state };
again:
#if BUG == 3
		if
		:: (v & HANDOFF) ->
#else
		if
		:: (v & (HANDOFF | LOCKED)) ->
#endif
			if
			:: (v & HANDOFF) ->
				/* Ours: keep LOCKED, leave the queue. */
				atomic {
					n = (v & ~(HANDOFF | WOKEN)) - WAITER;
					if
					:: starver -> n = n & ~STARVING
					:: else
					fi;
					if
					:: state == v -> state = n; goto cs
					:: else -> v = state; n = 0; goto again
					fi
				}
			:: else ->
				/* Held: clear WOKEN, maybe set STARVING. */
				atomic {
#if BUG == 1
					n = v;
#else
					n = v & ~WOKEN;
#endif
					if
					:: !starver && !(v & STARVING) ->
						if
						:: n = n | STARVING /* deadline */
						:: skip
						fi
					:: else
					fi;
					if
					:: n == v -> n = 0; goto sleep
					:: else
					fi
				}
				atomic {
					if
					:: state == v ->
						state = n;
						if
						:: (n & ~v & STARVING) ->
							starver = true
						:: else
						fi;
						v = n;
						n = 0
					:: else -> v = state; n = 0; goto again
					fi
				}
sleep:
				futex_wait(v);
				v = state;
				goto again
			fi
		:: else ->
			/* Free: a queued waiter may take it even when
			 * STARVING. */
			atomic {
				n = ((v | LOCKED) & ~WOKEN) - WAITER;
				if
				:: starver -> n = n & ~STARVING
				:: else
				fi;
				if
				:: state == v -> state = n; goto cs
				:: else -> v = state; n = 0; goto again
				fi
			}
		fi;
cs:
		atomic {
			incs++;
			assert(incs == 1);
			assert((state & LOCKED) && !(state & HANDOFF));
			assert(NWAITERS(state) <= NTHREADS - 1);
			v = 0;
			n = 0;
			t = 0;
			starver = false
		}
progress:
		incs--;

		/* ao__spin_unlock(): fast path CAS LOCKED -> 0; on failure
		 * the slow path starts from the value seen. */
		atomic {
			if
			:: state == LOCKED -> state = 0; goto unlocked
			:: else -> v = state
			fi
		}
		/* ao__spin_unlock_slow(lock, v) */
		do
		:: atomic {
			if
			:: NWAITERS(v) == 0 -> n = 0
			:: else ->
				if
				:: (v & STARVING) -> n = v | HANDOFF
				:: else -> n = v & ~LOCKED
				fi;
#if BUG == 2
				if
				:: !(v & WOKEN) && !(v & STARVING) ->
#else
				if
				:: !(v & WOKEN) ->
#endif
					n = n | WOKEN;
					wake = true
				:: else
				fi
			fi;
			if
			:: state == v -> state = n; v = 0; n = 0; break
#if BUG == 4
			:: else -> n = 0; wake = false	/* v stays stale */
#else
			:: else -> v = state; n = 0; wake = false
#endif
			fi
		   }
		od;
		if
		:: wake -> futex_wake_one(); wake = false
		:: else
		fi;
unlocked:
		k++
	:: else -> break
	od;
	done++
}

/* Once every thread is done, nothing is left in the word. */
active proctype final()
{
	(done == NTHREADS) -> assert(state == 0)
}
