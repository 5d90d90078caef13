/* SPDX-License-Identifier: MIT */
/*
 * Promela model of the three-phase lock's state protocol
 * (sync/spinlock.c, sync/include/aorta/sync/spinlock.h).
 *
 * NTHREADS threads each take and release the lock NACQ times.  The model
 * keeps the one 32-bit lock word with the same bits as the C code (LOCKED,
 * HANDOFF, STARVING, WOKEN, PARK, waiters << 8), every read-modify-write
 * of the word is one atomic step (a CAS, the OR of the fast path, or the
 * add that registers a sleeper), and plain loads are steps of their own,
 * so every interleaving of the C code's atomic accesses is explored.
 *
 * What is checked (see verify.sh):
 *  - mutual exclusion: an assertion on the number of threads inside the
 *    critical section, and that the word says LOCKED, not HANDOFF, there;
 *  - the fast path's premise: HANDOFF and STARVING are never set while
 *    LOCKED is clear (process invariant(), in every reachable state): the
 *    inline lock ORs LOCKED in and takes the lock iff it was clear;
 *  - no lost wake-up / no deadlock: every thread reaches its end only after
 *    NACQ acquisitions, so a thread asleep forever is an invalid end state;
 *    and when all are done the word is 0 again (no flag or count leaked);
 *  - no livelock: with -DNP, no cycle that never passes the critical
 *    section (the "progress" label) exists, under weak fairness.  With
 *    PARK this found a livelock in the first version of sync/spinlock.c:
 *    a waiter left the queue (SLEEP_TURN) also after a futex_wait that
 *    returned EAGAIN, i.e. without having slept, so two waiters that
 *    register and leave in turn made each other's waits fail for ever,
 *    and the holder's unlock CAS with them.  A wait that returns EAGAIN
 *    now does not count as timed (SLEPT=1, the default); -DBUG=8 is the
 *    old code.

 * The concurrency restriction (PARK): the controller (cr_mode()) is a free
 * choice, made once per contended unlock and kept across its CAS retries;
 * -DCTL=0 makes it "never park" (the protocol without restriction).
 *
 * The futex (ao_futex_wait/ao_futex_wake in sync/futex.c):
 *  - futex_wait(val) is atomic as in the kernel: if the word is not val it
 *    returns at once (EAGAIN); otherwise the thread is queued in the same
 *    step and then blocks until a futex_wake dequeues it, or, for a timed
 *    wait (a parked waiter), until it times out;
 *  - a time-out dequeues the thread by itself.  It may happen at any
 *    moment TMO times per acquisition (default 1), and after that only
 *    when no other step in the system is possible (Promela's timeout): the
 *    time-out is long against every other step (CR_TURN_NS, 250 us and
 *    up).  The bound is an abstraction for the non-progress check, where
 *    free time-outs would close cycles of time-out and re-sleep while the
 *    holder's steps are never taken in between; the deadlock check keeps
 *    the guarantee that matters: a timed sleeper never sleeps for ever;
 *  - futex_wake(1) dequeues any one queued thread (the kernel's FIFO is one
 *    of the choices, so this covers it) or does nothing when none sleeps;
 *    futex_wake(INT_MAX) dequeues all;
 *  - spurious returns (EINTR) are not modelled: the C code re-reads the
 *    word and loops after any return, and allowing them would hide lost
 *    wake-ups from the deadlock check (a thread could always wake itself);
 *    so an untimed sleeper returns only when a wake dequeues it.
 *
 * Abstractions, all over-approximations (more behaviours, not fewer):
 *  - phases 1 and 2 (trylock, the TTAS spin and the sched_yield() loop)
 *    are the same step in the model: load the word, and CAS LOCKED in if
 *    no BUSY bit is set.  The time budget, the spinner cap and the yield
 *    count only decide how many such attempts are made: the trylock, then
 *    0..TRIES-1 more, and 0..TRIES-1 again after each SLEEP_TURN
 *    (cpu_relax, backoff and sched_yield change nothing in the word);
 *  - "park at once while PARK is set" (the skip of phases 1 and 2 in
 *    ao__spin_lock_slow()) is the choice of 0 attempts, so by default the
 *    model leaves the test out (its load changes nothing): that halves
 *    the states (no "turn" flag).  -DRESTRICT=1 models it exactly (3 x 2:
 *    22 M states, 23 s, no errors);
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
 *           ever (a livelock, found by the non-progress check; run with
 *           -DCTL=0, as the PARK churn above is a cycle of its own);
 *  -DBUG=5  a parked waiter sleeps without a time-out: unlocks do not
 *           wake while PARK is set, so it sleeps for ever once the others
 *           are done (invalid end state);
 *  -DBUG=6  the unlock that sets PARK does not wake every sleeper: one
 *           that went to sleep, untimed, before PARK was set is never
 *           woken (invalid end state);
 *  -DBUG=7  an unlock with STARVING clears LOCKED instead of setting
 *           HANDOFF: a free lock with STARVING, which the fast path's OR
 *           would take from the starver (the invariant fails);
 *  -DBUG=8  a waiter whose futex_wait returned EAGAIN (it never slept)
 *           still leaves the queue as a parked one whose turn came: the
 *           livelock above (non-progress cycle).
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
#ifndef TMO
#define TMO 1
#endif
#ifndef CTL
#define CTL 1
#endif
#ifndef RESTRICT
#define RESTRICT 0
#endif
#if BUG == 8
#define SLEPT 0
#endif
#ifndef SLEPT
#define SLEPT 1
#endif
#ifndef BUG
#define BUG 0
#endif

#define LOCKED		1	/* AO_SPIN_LOCKED */
#define HANDOFF		2	/* AO_SPIN_HANDOFF */
#define STARVING	4	/* AO_SPIN_STARVING */
#define WOKEN		8	/* AO_SPIN_WOKEN */
#define PARK		16	/* AO_SPIN_PARK */
#define WAITER		256	/* AO_SPIN_WAITER */
#define BUSY		(LOCKED | HANDOFF | STARVING)
#define NWAITERS(w)	((w) >> 8)

/* When an unlock with WOKEN clear wakes one sleeper. */
#if BUG == 2
#define WAKE_IF		(!park && !(v & STARVING))
#else
#define WAKE_IF		(!park || (v & STARVING))
#endif

#define WAKE_ONE	1	/* ao_futex_wake(&lock->state, 1) */
#define WAKE_ALL	2	/* ao_futex_wake(&lock->state, INT_MAX) */

int state = 0;			/* lock->state */
byte incs = 0;			/* threads in the critical section */
byte done = 0;			/* threads that finished */
bit inq[4];			/* futex queue of &lock->state, by _pid */

/*
 * Each atomic { } below is one atomic access to the word (a load, a CAS, an
 * OR or an add) together with the purely local computation that follows
 * it; joining local steps to a neighbouring access hides no interleaving.
 * Locals are zeroed once dead, so that states differing only in stale
 * values are not told apart.
 */

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

/* ao_futex_wake(&state, INT_MAX) */
inline futex_wake_all()
{
	atomic {
		inq[0] = 0;
		inq[1] = 0;
		inq[2] = 0;
		inq[3] = 0
	}
}

active [NTHREADS] proctype thread()
{
	int v, n;
	bool starver, timed, turn, ctl;
	byte k = 0, t = 0, tmo = 0, wake = 0, park = 0;

	do
	:: k < NACQ ->
		/* ao__spin_lock(): fast path, atomic OR of LOCKED (lock bts):
		 * taken iff LOCKED was clear, whatever else is set. */
		atomic {
			if
			:: !(state & LOCKED) -> state = state | LOCKED; goto cs
			:: else
			fi
		};

		/* ao__spin_lock_slow(): ao__spin_trylock() first: load; CAS
		 * LOCKED in only if no BUSY bit is set. */
		atomic {
			v = state;
			if
			:: (v & BUSY) -> v = 0; goto restrict
			:: else
			fi
		}
		atomic {
			if
			:: state == v -> state = v | LOCKED; goto cs
			:: else -> v = 0	/* CAS failed */
			fi
		}
restrict:
#if RESTRICT
		/* Restricted: park at once, unless it is our turn. */
		atomic {
			if
			:: !turn && (state & PARK) -> goto phase3
			:: else
			fi
		};
#endif

		/* Phases 1 and 2: 0..TRIES-1 more such attempts (spin_phase,
		 * yield_phase). */
		do
		:: t < TRIES - 1 ->
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
				:: else -> v = 0
				fi
			}
next_try:
			skip
		:: break	/* budget spent */
		od;

phase3:
		/* Phase 3: sleep_phase().  Register: add_fetch(WAITER). */
		atomic {
			t = 0;
			timed = false;
			state = state + WAITER;
			v = state
		};
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
			:: !(v & HANDOFF) && timed && (v & PARK) && !starver ->
				/* Parked and awake again: leave the queue,
				 * compete again (SLEEP_TURN). */
				atomic {
					n = (v & ~WOKEN) - WAITER;
					if
					:: state == v ->
						state = n;
						v = 0;
						n = 0;
						timed = false;
#if RESTRICT
						turn = true;
#endif
						goto restrict
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
				/* ao_futex_wait(&state, v, timed ?
				 * park_ns(v) : -1), timed = v & PARK: if
				 * the word is v, queue in the same step. */
				atomic {
					timed = (v & PARK) != 0;
					if
					:: state == v -> inq[_pid] = 1
#if SLEPT
					:: else -> timed = false; goto eagain
#else
					:: else -> goto eagain
#endif
					fi
				}
				/* Queued: blocks until dequeued by a
				 * wake or, if timed, until it times out
				 * (see the top). */
				if
				:: atomic { inq[_pid] == 0 -> v = state }
#if BUG != 5
				:: atomic {
					timed && inq[_pid] && tmo < TMO ->
						inq[_pid] = 0;
						tmo++;
						v = state
				   }
				:: atomic {
					timed && inq[_pid] && timeout ->
						inq[_pid] = 0;
						v = state
				   }
#endif
				fi;
				goto again;
eagain:
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
			tmo = 0;
			starver = false;
			timed = false;
			turn = false
		}
progress:
		incs--;

		/* ao__spin_unlock(): fast path: a plain load, then, if it
		 * saw just LOCKED, CAS LOCKED -> 0; otherwise, or if the CAS
		 * fails, the slow path starts from the value seen (which may
		 * be stale after the load: the slow path's CAS copes).  This
		 * covers the CAS-only fast path too (load and CAS at once). */
		atomic {
			v = state;
			if
			:: v != LOCKED -> goto unlock_slow
			:: else
			fi
		}
		atomic {
			if
			:: state == LOCKED -> state = 0; v = 0; goto unlocked
			:: else -> v = state
			fi
		}
unlock_slow:
		/* ao__spin_unlock_slow(lock, v) */
		do
		:: atomic {
			wake = 0;
			if
			:: NWAITERS(v) == 0 -> n = 0
			:: else ->
				/* cr_mode(), once per call: a free choice. */
				if
				:: !ctl ->
					ctl = true;
					if
#if CTL
					:: park = PARK
#endif
					:: park = 0
					fi
				:: else
				fi;
				n = (v & ~PARK) | park;
				if
#if BUG == 7
				:: (v & STARVING) -> n = n & ~LOCKED
#else
				:: (v & STARVING) -> n = n | HANDOFF
#endif
				:: else -> n = n & ~LOCKED
				fi;
				if
#if BUG == 6
				:: false ->
#else
				:: park && !(v & PARK) ->
#endif
					/* Restricted from now: wake every
					 * sleeper (no WOKEN). */
					wake = WAKE_ALL
				:: else ->
					if
					:: !(v & WOKEN) && WAKE_IF ->
						n = n | WOKEN;
						wake = WAKE_ONE
					:: else
					fi
				fi
			fi;
			if
			:: state == v ->
				state = n;
				v = 0;
				n = 0;
				park = 0;
				ctl = false;
				break
#if BUG == 4
			:: else -> n = 0	/* v stays stale */
#else
			:: else -> v = state; n = 0
#endif
			fi
		   }
		od;
		if
		:: wake == WAKE_ONE -> futex_wake_one(); wake = 0
		:: wake == WAKE_ALL -> futex_wake_all(); wake = 0
		:: else
		fi;
unlocked:
		k++
	:: else -> break
	od;
	done++
}

/* The fast path's premise: HANDOFF and STARVING are never set while LOCKED
 * is clear.  Checked in every reachable state. */
active proctype invariant()
{
end:	atomic {
		!(state & LOCKED) && (state & (HANDOFF | STARVING)) ->
			assert((state & LOCKED) ||
			       !(state & (HANDOFF | STARVING)))
	}
}

/* Once every thread is done, nothing is left in the word. */
active proctype final()
{
	(done == NTHREADS) -> assert(state == 0)
}
