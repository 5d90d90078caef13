// SPDX-License-Identifier: MIT
/*
 * Strands: items of one strand run in submission order and never two at
 * once, with many producers (outside and inside the pool) over both
 * disciplines, bounded and unbounded; strands run in parallel with each
 * other; the batch hands the worker back; refusals; idle and destroy.
 * Held turns (ao_strand_submit_hold(), ao_strand_run_held()): nothing
 * runs while a turn is held; the holder runs items on its own thread, in
 * order, and hands the rest to the workers; capacity slots, drain and
 * destroy count items run off the pool; order and one-at-a-time hold with
 * a holder and submitters racing (a stress test for TSan).
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/clock.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include "helpers.h"

#define NSTRANDS 4
#define NPROD 4

struct sess {
	struct ao_strand strand;
	int inside; /* items running now: must never exceed 1 */
	long last_seq[NPROD + NPROD]; /* per producer: last seq seen */
	long ran;
	int bad;
};

struct pkt {
	struct ao_work work;
	struct sess *s;
	int producer;
	long seq;
	int forward; /* if set: submit a follow-up from the worker */
	struct pkt *next_pkt;
};

static struct sess sessions[NSTRANDS];
static long per_prod;

static void pkt_fn(struct ao_work *w)
{
	struct pkt *p = container_of(w, struct pkt, work);
	struct sess *s = p->s;

	if (__atomic_fetch_add(&s->inside, 1, __ATOMIC_RELAXED) != 0)
		s->bad = 1;
	if (ao_strand_current() != &s->strand)
		s->bad = 1;
	/* Plain accesses on purpose: the strand alone serialises them
	 * (ThreadSanitizer would see a race otherwise). */
	if (p->seq != s->last_seq[p->producer] + 1)
		s->bad = 1;
	s->last_seq[p->producer] = p->seq;
	s->ran++;
	__atomic_fetch_sub(&s->inside, 1, __ATOMIC_RELAXED);
	if (p->next_pkt) {
		/* From inside a worker: onto another strand, in order
		 * for that (worker) producer because items of one strand
		 * are serial. */
		struct pkt *n = p->next_pkt;

		assert_int_equal(ao_strand_submit(&n->s->strand, &n->work), 0);
	}
}

struct producer {
	int id;
	struct pkt *pkts;
	struct pkt *fwd; /* follow-ups, producer id + NPROD */
};

static void *producer_fn(void *arg)
{
	struct producer *pr = arg;

	for (long i = 0; i < per_prod; i++) {
		struct pkt *p = &pr->pkts[i];

		assert_int_equal(ao_strand_submit(&p->s->strand, &p->work), 0);
	}
	return NULL;
}

static void run_order(enum ao_exec_kind kind, unsigned int workers,
		      size_t capacity)
{
	struct ao_exec *ex =
		t_exec_create(kind, workers, capacity, AO_EXEC_BLOCK);
	struct producer prods[NPROD];
	long total = 0;

	per_prod = t_scaled(20000, 1000);
	memset(sessions, 0, sizeof(sessions));
	for (int i = 0; i < NSTRANDS; i++) {
		ao_strand_init(&sessions[i].strand, ex);
		/* A small batch makes strands give the worker back often. */
		ao_strand_set_batch(&sessions[i].strand, (unsigned)(i + 1));
		for (int j = 0; j < 2 * NPROD; j++)
			sessions[i].last_seq[j] = -1;
	}
	for (int i = 0; i < NPROD; i++) {
		prods[i].id = i;
		prods[i].pkts = calloc((size_t)per_prod, sizeof(struct pkt));
		prods[i].fwd = calloc((size_t)per_prod, sizeof(struct pkt));
		assert_non_null(prods[i].pkts);
		assert_non_null(prods[i].fwd);
	}
	/* Producer i sends everything to strand i; each item forwards a
	 * follow-up to strand (i + 1) % N as producer i + NPROD.  Strand i
	 * runs serially, so the follow-ups are submitted in order. */
	for (int i = 0; i < NPROD; i++) {
		for (long k = 0; k < per_prod; k++) {
			struct pkt *p = &prods[i].pkts[k];
			struct pkt *f = &prods[i].fwd[k];

			ao_work_init(&p->work, pkt_fn);
			p->s = &sessions[i % NSTRANDS];
			p->producer = i;
			p->seq = k;
			p->next_pkt = f;
			ao_work_init(&f->work, pkt_fn);
			f->s = &sessions[(i + 1) % NSTRANDS];
			f->producer = i + NPROD;
			f->seq = k;
		}
	}
	t_watchdog_arm(120, "strand order");
	t_run_threads(NPROD, producer_fn, prods, sizeof(prods[0]));
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (int i = 0; i < NSTRANDS; i++) {
		assert_int_equal(sessions[i].bad, 0);
		assert_true(ao_strand_idle(&sessions[i].strand));
		assert_int_equal(ao_strand_destroy(&sessions[i].strand), 0);
		assert_int_equal(sessions[i].strand.executed,
				 sessions[i].strand.submitted);
		total += sessions[i].ran;
	}
	assert_int_equal(total, 2 * NPROD * per_prod);
	assert_int_equal(ao_exec_destroy(ex), 0);
	for (int i = 0; i < NPROD; i++) {
		free(prods[i].pkts);
		free(prods[i].fwd);
	}
}

static void test_order_shared(void **state)
{
	(void)state;
	run_order(AO_EXEC_SHARED, 2, 0);
	run_order(AO_EXEC_SHARED, 4, 0);
}

static void test_order_steal(void **state)
{
	(void)state;
	run_order(AO_EXEC_STEAL, 2, 0);
	run_order(AO_EXEC_STEAL, 4, 0);
}

static void test_order_bounded(void **state)
{
	(void)state;
	run_order(AO_EXEC_SHARED, 2, 16);
	run_order(AO_EXEC_STEAL, 2, 16);
	run_order(AO_EXEC_STEAL, 3, 1);
}

/* ---- strands run in parallel with each other ---- */

/*
 * Each item of strand i marks its strand running and waits until it has
 * seen the other strand running too (and the test has made its checks
 * on the busy strands): the two strands then overlap on the two workers
 * whatever the scheduler does.  If they cannot (strands serialised, one
 * worker for both), the wait runs out after PAR_WAIT_NS, which fails the
 * test.  Once they have met, the remaining items just run.
 */
#define PAR_WAIT_NS 10000000000ull

struct par {
	int running[2]; /* items of strand i running now */
	int met; /* an item saw the other strand running */
	int go; /* the test checked the strands busy */
	int gave_up; /* an item waited PAR_WAIT_NS in vain */
	int doubled; /* a strand ran two of its items at once */
};

struct slow {
	struct ao_work work;
	struct par *par;
	int id;
};

static void slow_fn(struct ao_work *w)
{
	struct slow *s = container_of(w, struct slow, work);
	struct par *p = s->par;
	uint64_t end = t_now_ns() + PAR_WAIT_NS;

	/* Seq_cst: this strand's mark and the look at the other's are the
	 * two sides of a handshake (with the other strand's item doing the
	 * same): at least one of the two sees the other. */
	if (__atomic_add_fetch(&p->running[s->id], 1, __ATOMIC_SEQ_CST) != 1)
		__atomic_store_n(&p->doubled, 1, __ATOMIC_RELAXED);
	while (!__atomic_load_n(&p->gave_up, __ATOMIC_RELAXED)) {
		if (__atomic_load_n(&p->running[!s->id], __ATOMIC_SEQ_CST))
			__atomic_store_n(&p->met, 1, __ATOMIC_RELAXED);
		if (__atomic_load_n(&p->met, __ATOMIC_RELAXED) &&
		    __atomic_load_n(&p->go, __ATOMIC_ACQUIRE))
			break;
		if (t_now_ns() > end) {
			__atomic_store_n(&p->gave_up, 1, __ATOMIC_RELAXED);
			break;
		}
		t_sleep_ns(100000);
	}
	__atomic_sub_fetch(&p->running[s->id], 1, __ATOMIC_SEQ_CST);
}

static void test_parallel_strands(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_strand st[2];
	struct slow items[2][3];
	struct par par = { .met = 0 };

	(void)state;
	t_watchdog_arm(30, "parallel strands");
	for (int i = 0; i < 2; i++) {
		ao_strand_init(&st[i], ex);
		for (int k = 0; k < 3; k++) {
			ao_work_init(&items[i][k].work, slow_fn);
			items[i][k].par = &par;
			items[i][k].id = i;
			assert_int_equal(
				ao_strand_submit(&st[i], &items[i][k].work), 0);
		}
	}
	/* No item can finish before go. */
	assert_false(ao_strand_idle(&st[0]));
	assert_int_equal(ao_strand_destroy(&st[0]), -EBUSY);
	__atomic_store_n(&par.go, 1, __ATOMIC_RELEASE);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	/* Two strands on two workers overlapped; one strand never did. */
	assert_int_equal(par.gave_up, 0);
	assert_int_equal(par.met, 1);
	assert_int_equal(par.doubled, 0);
	assert_int_equal(ao_strand_destroy(&st[0]), 0);
	assert_int_equal(ao_strand_destroy(&st[1]), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- refusals, shutdown, and a strand's items surviving destroy ---- */

struct gate {
	struct ao_work work;
	int open;
};

static void gate_fn(struct ao_work *w)
{
	struct gate *g = container_of(w, struct gate, work);

	while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
}

static int cnt_ran[8];

static void cnt_fn(struct ao_work *w)
{
	(void)w;
	__atomic_fetch_add(&cnt_ran[0], 1, __ATOMIC_RELAXED);
}

static void test_refusals(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 2, AO_EXEC_FAIL);
	struct ao_strand s;
	struct gate g = { AO_WORK_INIT(gate_fn), 0 };
	struct ao_work w[4];
	struct ao_exec_stats st;

	(void)state;
	t_watchdog_arm(30, "strand refusals");
	memset(cnt_ran, 0, sizeof(cnt_ran));
	ao_strand_init(&s, ex);
	assert_null(ao_strand_current());
	assert_int_equal(ao_strand_submit(&s, NULL), -EINVAL);
	/* The gate holds the only worker. */
	assert_int_equal(ao_exec_submit(ex, &g.work), 0);
	do {
		ao_exec_stats(ex, &st);
	} while (st.queued);
	for (int i = 0; i < 4; i++)
		ao_work_init(&w[i], cnt_fn);
	/* One item takes a slot, its turn the other: full. */
	assert_int_equal(ao_strand_submit(&s, &w[0]), 0);
	assert_int_equal(ao_strand_submit(&s, &w[1]), -EAGAIN);
	assert_int_equal(ao_strand_try_submit(&s, &w[2]), -EAGAIN);
	__atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(cnt_ran[0], 1);
	assert_int_equal(ao_strand_try_submit(&s, &w[1]), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(cnt_ran[0], 2);
	ao_exec_shutdown(ex);
	assert_int_equal(ao_strand_submit(&s, &w[2]), -ESHUTDOWN);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(cnt_ran[0], 2);
	assert_int_equal(ao_strand_destroy(&s), 0);
}

static void test_destroy_runs_strand_backlog(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_strand s[3];
	long n = t_scaled(3000, 300);
	struct ao_work *w = calloc((size_t)n * 3, sizeof(*w));

	(void)state;
	assert_non_null(w);
	memset(cnt_ran, 0, sizeof(cnt_ran));
	t_watchdog_arm(30, "strand backlog at destroy");
	for (int i = 0; i < 3; i++)
		ao_strand_init(&s[i], ex);
	for (long k = 0; k < n * 3; k++) {
		ao_work_init(&w[k], cnt_fn);
		assert_int_equal(ao_strand_submit(&s[k % 3], &w[k]), 0);
	}
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(cnt_ran[0], n * 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(ao_strand_destroy(&s[i]), 0);
	free(w);
}

/* ---- held turns ---- */

struct held_item {
	struct ao_work work;
	struct ao_strand *s;
	pthread_t thread; /* where it ran */
	int order; /* position in the run order */
	int bad;
};

static int held_order;

static void held_fn(struct ao_work *w)
{
	struct held_item *it = container_of(w, struct held_item, work);

	it->thread = pthread_self();
	it->order = __atomic_fetch_add(&held_order, 1, __ATOMIC_RELAXED);
	if (ao_strand_current() != it->s)
		it->bad = 1;
}

static void test_hold_basic(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 1, 0, AO_EXEC_BLOCK);
	struct held_item it[5];
	struct ao_exec_stats st;
	struct ao_strand s;

	(void)state;
	t_watchdog_arm(30, "held turn");
	held_order = 0;
	ao_strand_init(&s, ex);
	memset(it, 0, sizeof(it));
	for (int i = 0; i < 5; i++) {
		ao_work_init(&it[i].work, held_fn);
		it[i].s = &s;
		it[i].order = -1;
	}
	assert_int_equal(ao_strand_submit_hold(NULL, &it[0].work), -EINVAL);
	assert_int_equal(ao_strand_submit_hold(&s, NULL), -EINVAL);
	/* The first takes the turn, the others only append. */
	assert_int_equal(ao_strand_submit_hold(&s, &it[0].work), 1);
	assert_int_equal(ao_strand_submit_hold(&s, &it[1].work), 0);
	assert_int_equal(ao_strand_submit(&s, &it[2].work), 0);
	/* Held: no worker runs any of it, and the strand is busy. */
	t_sleep_ns(20000000);
	assert_int_equal(__atomic_load_n(&held_order, __ATOMIC_RELAXED), 0);
	assert_false(ao_strand_idle(&s));
	assert_int_equal(ao_strand_destroy(&s), -EBUSY);
	/* Two here, on this thread, off the pool; the third to a worker. */
	assert_int_equal(ao_strand_run_held(&s, 2), 2);
	assert_null(ao_strand_current());
	assert_int_equal(ao_exec_drain(ex), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(it[i].order, i);
		assert_int_equal(it[i].bad, 0);
	}
	assert_true(pthread_equal(it[0].thread, pthread_self()));
	assert_true(pthread_equal(it[1].thread, pthread_self()));
	assert_false(pthread_equal(it[2].thread, pthread_self()));
	assert_true(ao_strand_idle(&s));
	/* Given up at once: the workers run it. */
	assert_int_equal(ao_strand_submit_hold(&s, &it[3].work), 1);
	assert_int_equal(ao_strand_run_held(&s, 0), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(it[3].order, 3);
	assert_false(pthread_equal(it[3].thread, pthread_self()));
	/* A queued turn is not taken: the worker's turn runs the item. */
	assert_int_equal(ao_strand_submit(&s, &it[4].work), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(it[4].order, 4);
	assert_int_equal(s.executed, 5);
	assert_int_equal(s.submitted, 5);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_int_equal(st.queued, 0);
	assert_int_equal(ao_strand_destroy(&s), 0);
	ao_exec_shutdown(ex);
	assert_int_equal(ao_strand_submit_hold(&s, &it[0].work), -ESHUTDOWN);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
}

/* Items run off the pool give their capacity slots back. */
static void test_hold_bounded(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 4, AO_EXEC_FAIL);
	struct ao_strand s;
	struct ao_work w[12];

	(void)state;
	t_watchdog_arm(30, "held turn, bounded");
	memset(cnt_ran, 0, sizeof(cnt_ran));
	ao_strand_init(&s, ex);
	for (int i = 0; i < 12; i++)
		ao_work_init(&w[i], cnt_fn);
	for (int round = 0; round < 3; round++) {
		struct ao_work *r = &w[4 * round];

		assert_int_equal(ao_strand_submit_hold(&s, &r[0]), 1);
		for (int i = 1; i < 4; i++)
			assert_int_equal(ao_strand_submit_hold(&s, &r[i]), 0);
		/* Four slots taken, no carrier: full. */
		assert_int_equal(ao_strand_try_submit(&s, &w[0]), -EAGAIN);
		assert_int_equal(ao_strand_run_held(&s, 4), 4);
		assert_int_equal(cnt_ran[0], 4 * (round + 1));
	}
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(ao_strand_destroy(&s), 0);
}

/* Destroy waits for a held turn's items, run by their holder. */
struct late_holder {
	struct ao_strand *s;
	int n;
};

static void *late_holder_fn(void *arg)
{
	struct late_holder *h = arg;

	t_sleep_ns(20000000);
	h->n = (int)ao_strand_run_held(h->s, 100);
	return NULL;
}

static void test_hold_destroy(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct late_holder h;
	struct ao_strand s;
	struct ao_work w[8];
	pthread_t th;

	(void)state;
	t_watchdog_arm(30, "held turn at destroy");
	memset(cnt_ran, 0, sizeof(cnt_ran));
	ao_strand_init(&s, ex);
	for (int i = 0; i < 8; i++) {
		ao_work_init(&w[i], cnt_fn);
		assert_int_equal(ao_strand_submit_hold(&s, &w[i]), i == 0);
	}
	h.s = &s;
	h.n = 0;
	assert_int_equal(pthread_create(&th, NULL, late_holder_fn, &h), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	assert_int_equal(cnt_ran[0], 8);
	pthread_join(th, NULL);
	assert_int_equal(h.n, 8);
	assert_int_equal(ao_strand_destroy(&s), 0);
	t_watchdog_disarm();
}

/*
 * A holder (as the io ring is) and submitters racing on the same strands:
 * the holder submits with ao_strand_submit_hold() and now and then runs
 * what it holds, a few items or none (given to the workers); the others
 * submit as usual.  Every strand's items run in each producer's order and
 * one at a time, wherever they run.
 */
struct holder {
	long n;
	struct pkt *pkts;
};

static void *holder_fn(void *arg)
{
	struct holder *h = arg;
	struct ao_strand *held[NSTRANDS];
	int nheld = 0;

	for (long i = 0; i < h->n; i++) {
		struct pkt *p = &h->pkts[i];
		int r = ao_strand_submit_hold(&p->s->strand, &p->work);

		assert_true(r == 0 || r == 1);
		if (r == 1)
			held[nheld++] = &p->s->strand;
		if (nheld == NSTRANDS || (i % 7) == 6) {
			for (int k = 0; k < nheld; k++)
				ao_strand_run_held(held[k],
						   (unsigned int)(i + k) % 4);
			nheld = 0;
		}
	}
	for (int k = 0; k < nheld; k++)
		ao_strand_run_held(held[k], 64);
	return NULL;
}

static void *hold_producer_fn(void *arg)
{
	struct producer *pr = arg;

	if (pr->id == 0)
		return holder_fn(pr->fwd);
	return producer_fn(arg);
}

static void test_hold_stress(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct producer prods[NPROD];
	struct holder h;
	long total = 0;

	(void)state;
	per_prod = t_scaled(20000, 1000);
	memset(sessions, 0, sizeof(sessions));
	for (int i = 0; i < NSTRANDS; i++) {
		ao_strand_init(&sessions[i].strand, ex);
		ao_strand_set_batch(&sessions[i].strand, (unsigned)(i + 1));
		for (int j = 0; j < 2 * NPROD; j++)
			sessions[i].last_seq[j] = -1;
	}
	/* Producer 0 is the holder: it spreads its items over every
	 * strand; the others each feed one. */
	for (int i = 0; i < NPROD; i++) {
		prods[i].id = i;
		prods[i].pkts = calloc((size_t)per_prod, sizeof(struct pkt));
		prods[i].fwd = NULL;
		assert_non_null(prods[i].pkts);
		for (long k = 0; k < per_prod; k++) {
			struct pkt *p = &prods[i].pkts[k];

			ao_work_init(&p->work, pkt_fn);
			p->s = &sessions[i ? i % NSTRANDS :
					     (int)(k * 7 / 3) % NSTRANDS];
			p->producer = i;
			p->seq = k; /* the holder's: per strand, below */
		}
	}
	/* The holder's sequence numbers count per strand. */
	{
		long next[NSTRANDS] = { 0 };

		for (long k = 0; k < per_prod; k++) {
			struct pkt *p = &prods[0].pkts[k];

			p->seq = next[p->s - sessions]++;
		}
	}
	h.n = per_prod;
	h.pkts = prods[0].pkts;
	prods[0].fwd = (struct pkt *)&h;
	t_watchdog_arm(120, "held turns, stress");
	t_run_threads(NPROD, hold_producer_fn, prods, sizeof(prods[0]));
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (int i = 0; i < NSTRANDS; i++) {
		assert_int_equal(sessions[i].bad, 0);
		assert_true(ao_strand_idle(&sessions[i].strand));
		assert_int_equal(sessions[i].strand.executed,
				 sessions[i].strand.submitted);
		total += sessions[i].ran;
	}
	assert_int_equal(total, NPROD * per_prod);
	assert_int_equal(ao_exec_destroy(ex), 0);
	for (int i = 0; i < NPROD; i++)
		free(prods[i].pkts);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_parallel_strands),
		cmocka_unit_test(test_destroy_runs_strand_backlog),
		cmocka_unit_test(test_order_shared),
		cmocka_unit_test(test_order_steal),
		cmocka_unit_test(test_order_bounded),
		cmocka_unit_test(test_hold_basic),
		cmocka_unit_test(test_hold_bounded),
		cmocka_unit_test(test_hold_destroy),
		cmocka_unit_test(test_hold_stress),
	};

	ao_clock_calibrate();
	return cmocka_run_group_tests_name("strand", tests, NULL, NULL);
}
