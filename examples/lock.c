// SPDX-License-Identifier: MIT
/*
 * lock: the three-phase lock, its guards and its statistics.
 *
 *	lock [THREADS [ROUNDS]]		(default 4 threads, 200000 rounds)
 *
 * Threads share one account book.  Each round takes the lock one of three
 * ways:
 *  - guard(ao_spinlock)(&lock): held until the end of the scope, whatever
 *    way the scope is left (both returns of withdraw() release it);
 *  - scoped_guard(ao_spinlock, &lock) { ... }: held for one block;
 *  - scoped_cond_guard(ao_spinlock_try, &lock) { ... }: the block runs
 *    only if the lock was free, else the thread does something else.
 * Then it checks the book and prints the lock's statistics: how many
 * acquisitions were taken at once, while spinning, while yielding and
 * after sleeping, the hand-offs to starving sleepers, and the longest
 * wait.  A library built with LOCK_STATS=0 has no statistics, and says so.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <aorta/sync/spinlock.h>

#define MAX_THREADS 64

struct book {
	struct ao_spinlock lock;
	long balance; /* under lock */
	long entries; /* under lock */
};

/* What one thread did, to check the book against. */
struct tally {
	long added, withdrawn, missed;
};

static struct book book = { .lock = AO_SPINLOCK_INIT };
static long rounds = 200000;

/* A scope guard: the lock is released on both returns. */
static int withdraw(struct book *b, long amount)
{
	guard(ao_spinlock)(&b->lock);
	if (b->balance < amount)
		return -1;
	b->balance -= amount;
	b->entries++;
	return 0;
}

static void *worker(void *arg)
{
	struct tally *t = arg;

	for (long i = 0; i < rounds; i++) {
		bool done = false;

		switch (i % 3) {
		case 0:
			scoped_guard(ao_spinlock, &book.lock)
			{
				book.balance += 2;
				book.entries++;
			}
			t->added++;
			break;
		case 1:
			if (withdraw(&book, 1) == 0)
				t->withdrawn++;
			else
				t->missed++;
			break;
		default:
			/* Busy?  Then not now: count it and move on. */
			scoped_cond_guard(ao_spinlock_try, &book.lock)
			{
				book.entries++;
				done = true;
			}
			if (!done)
				t->missed++;
			break;
		}
	}
	return NULL;
}

static void print_stats(const struct ao_spinlock *lock)
{
	struct ao_spin_stats st;
	double n;

	if (ao_spin_stats(lock, &st) == -EOPNOTSUPP) {
		printf("lock: statistics compiled out (LOCK_STATS=0)\n");
		return;
	}
	n = (double)(st.fast + st.phase1 + st.phase2 + st.phase3);
	printf("lock: %.0f acquisitions: %.1f%% at once, %.1f%% spinning, "
	       "%.1f%% yielding, %.1f%% after sleeping (%llu hand-offs); "
	       "longest wait %.1f us\n",
	       n, 100.0 * (double)st.fast / n, 100.0 * (double)st.phase1 / n,
	       100.0 * (double)st.phase2 / n, 100.0 * (double)st.phase3 / n,
	       (unsigned long long)st.handoffs, (double)st.wait_max_ns / 1e3);
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	struct tally t[MAX_THREADS] = { { 0 } }, sum = { 0 };
	pthread_t tid[MAX_THREADS];
	struct ao_spin_tune tune;

	if (argc > 2)
		rounds = atol(argv[2]);
	if (threads < 1 || threads > MAX_THREADS || rounds < 1)
		return 2;
	/* The tunables, before the lock is shared: a shorter spin than the
	 * default 10 us. */
	ao_spin_get_tune(&book.lock, &tune);
	tune.spin_ns = 5000;
	if (ao_spin_set_tune(&book.lock, &tune))
		return 1;

	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, worker, &t[i]))
			return 1;
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		sum.added += t[i].added;
		sum.withdrawn += t[i].withdrawn;
		sum.missed += t[i].missed;
	}
	printf("lock: %d threads x %ld rounds: %ld entries, %ld missed "
	       "(lock busy, or no money), balance %ld\n",
	       threads, rounds, book.entries, sum.missed, book.balance);
	print_stats(&book.lock);
	/* Mutual exclusion: no entry lost, and the money adds up. */
	if (book.entries != threads * rounds - sum.missed ||
	    book.balance != 2 * sum.added - sum.withdrawn || book.balance < 0) {
		fprintf(stderr, "lock: the book does not add up\n");
		return 1;
	}
	return 0;
}
