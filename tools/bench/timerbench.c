// SPDX-License-Identifier: MIT
/*
 * timerbench: aorta's timers (core/timer.h) against a binary heap, a
 * red-black tree and timerfd, in one run.
 *
 *	hot/IMPL/N	one timer armed and cancelled repeatedly, N others
 *			pending (0, 10k, 1M): ns per arm+cancel pair.  The
 *			deadlines are absolute (ao_timer_arm_at), a random
 *			10 ms..1 s ahead from a table, added to a clock
 *			reading taken once per 1024 pairs: no clock read in
 *			the loop.  hot-delay/aorta: the same with
 *			ao_timer_arm(delay), which reads the clock.
 *	rearm/IMPL/N	a random one of the N pending timers moved to a new
 *			random deadline: ns per move.
 *			The N others are due 1 min..61 min ahead, uniformly,
 *			so that none fires during a cell.  IMPL: aorta, heap
 *			(baseline/tm_heap.c, an indexed array), heap-ptr
 *			(baseline/tm_pheap.c, linked with pointers as
 *			libuv's: the rearm target's anchor), rbtree
 *			(baseline/tm_rbtree.c),
 *			timerfd (one timerfd per timer, timerfd_settime to
 *			arm and to disarm; N = 0 and 10k only).
 *	threads/IMPL/tT	T threads (1, 2), each arming and cancelling its own
 *			64 timers (initialised on that thread, so each lands
 *			in its thread's shard), pinned to CPUs 0 and 1:
 *			total pairs/s.  heap-lock: one tm_heap behind one
 *			struct ao_spinlock, taken for each arm and each
 *			cancel (one queue behind one lock).
 *	expiry/IMPL	1M timers due uniformly over 10 s (--quick: 2 s), on
 *			an executor with 2 workers; the callbacks count.
 *			CPU per fired timer: process CPU less the arming
 *			thread's (which only arms, then sleeps), over the
 *			fired count; the service's statistics (polls, longest
 *			expiry step, lateness p50/p99/max) and the lateness
 *			the callbacks saw (ev->late_ns).  heap-loop: one
 *			thread with a tm_heap, sleeping in clock_nanosleep
 *			until the earliest deadline and running the due
 *			callbacks itself (an event loop's way), its CPU per
 *			fired timer.
 *	bounded/aorta	the same, 1M timers over --expiry-seconds (60; --quick
 *			10): the longest expiry step (step_max_ns).  It is
 *			wall time under the shard lock, so a worker
 *			preempted there (other processes) makes a long step.
 *	bounded/testclock  the same timers on the test clock, advanced
 *			100 us at a time on the main thread: step_max_ns
 *			(wall time, so preemption included), and the burst:
 *			the most thread CPU one advance took, that is all
 *			the expiry work due within 100 us of timer time,
 *			however many steps it is split into (the target).
 *	tick/CELL	a 60 Hz periodic timer (ao_timer_arm_periodic): the
 *			lateness of every tick (ev->late_ns, all kept and
 *			sorted: p50, p99, max), the ticks run against those
 *			due, and the process CPU as a share of one core.
 *			floor: a plain thread looping on clock_nanosleep(
 *			TIMER_ABSTIME) over the same deadlines, with
 *			PR_SET_TIMERSLACK 1; idle: an idle pool; precise: the
 *			same with AO_TIMER_PRECISE; busy: both workers
 *			running 100 us items with ~1000 more kept queued by
 *			a feeder thread; busy-strand: the same, the timer on
 *			a strand (ao_timer_init_strand).  --tick-seconds of
 *			each (60; --quick 5), interleaved in chunks of
 *			--tick-chunk seconds (5): floor, idle, precise, busy,
 *			busy-strand, floor, ...; each chunk on a fresh
 *			executor.
 *	idle/aorta	100k timers pending, due over an hour, on an idle
 *			executor: process CPU over --idle seconds (2).
 *
 * Cells of hot, rearm and threads last --seconds (0.25 s; --quick 0.05)
 * and run --runs times (3; --quick 1), the implementations interleaved;
 * medians are reported (min and max in the JSON).  Ratios are against the
 * baselines of this run.  The default run takes about 7 minutes, 6 of them
 * in the 60 s tick and bounded cells.  The machine is shared: run it as
 *	flock /tmp/bench.lock build/tools/bench/timerbench
 *
 * Options (beside --json, --quick, --seconds, --runs, --only=NAME, which
 * selects the cells whose name above contains NAME):
 *	--expiry-seconds=S	bounded/aorta spread (60)
 *	--tick-seconds=S	each tick cell's length (60)
 *	--tick-chunk=S		tick cells interleave in chunks of S s (5)
 *	--idle=S		idle/aorta measuring time (2)
 *	--exec=shared|steal	the executors' queue discipline (shared)
 *	--check			check the baselines against each other first
 *
 * --pairs=N --impl=I [--pending=P] [--op=hot|rearm]: only N pairs of I
 * (aorta, aorta-delay, heap, rbtree, timerfd, none) with P others pending,
 * in noinline functions (hot_I, rearm_I), for counting instructions under
 * callgrind (tools/bench/timerbench-insns.sh).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <aorta/compiler.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include <aorta/sync/spinlock.h>
#include "baseline/tm_heap.h"
#include "baseline/tm_pheap.h"
#include "baseline/tm_rbtree.h"
#include "bench.h"

#define NSEC 1000000000ull
#define MSEC 1000000ull
#define USEC 1000ull

/* Pairs between two clock readings (a power of two). */
#define CHUNK 1024
/* The hot timer's deadlines: 10 ms..1 s ahead. */
#define HOT_MIN_NS (10 * MSEC)
#define HOT_SPAN_NS (990 * MSEC)
/* The pending others' deadlines: 1 min..61 min ahead (838 * 2^32 ns is
 * just under an hour). */
#define FAR_MIN_NS (60 * NSEC)
#define FAR_UNIT_NS 838ull
/* threads/: timers per thread (a power of two). */
#define THR_TIMERS 64
/* expiry: the first deadline this far after the arming starts. */
#define EXPIRY_LEAD_NS (300 * MSEC)
/* 60 Hz, in a multiple of AO_TIMER_PERIOD_UNIT (60.0000086 Hz), so that
 * the floor's deadlines are exactly the timer's. */
#define TICK_PERIOD_NS 16666664ull
#define BUSY_ITEM_NS (100 * USEC)
#define BUSY_BACKLOG 1000
#define BUSY_JOBS 2048
#define IDLE_TIMERS 100000
#define IDLE_SPAN_NS (3600 * NSEC)

static struct bench_opts opts;
static double opt_expiry_s = 60;
static double opt_tick_s = 60;
static double opt_chunk_s = 5;
static double opt_idle_s = 2;
static enum ao_exec_kind opt_kind = AO_EXEC_SHARED;
static bool opt_check;
static long opt_pairs = -1;
static long opt_pending;
static const char *opt_impl = "aorta";
static const char *opt_op = "hot";
static const unsigned int nworkers = 2;
static double expiry_s = 10; /* expiry/: the spread (--quick: 2) */

/* Keep the compiler from dropping a value. */
#define escape(v) __asm__ __volatile__("" : : "r"(v) : "memory")

static __ao_noreturn void die(const char *what, int err)
{
	fprintf(stderr, "timerbench: %s: %s\n", what, strerror(err));
	exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		die("calloc", ENOMEM);
	return p;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / NSEC), (long)(ns % NSEC) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { (time_t)(t / NSEC), (long)(t % NSEC) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* xorshift64*: the same sequence for every implementation. */
static inline uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* An index below n (n < 2^32) from the low half of r. */
static inline uint32_t rnd_below(uint64_t r, uint32_t n)
{
	return (uint32_t)(((r & 0xffffffffu) * n) >> 32);
}

/* A far deadline's distance from now, from the high half of r. */
static inline uint64_t rnd_far(uint64_t r)
{
	return FAR_MIN_NS + (r >> 32) * FAR_UNIT_NS;
}

static uint64_t hot_delta[CHUNK];

static void hot_plan(void)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;

	for (int i = 0; i < CHUNK; i++)
		hot_delta[i] = HOT_MIN_NS + rnd(&s) % HOT_SPAN_NS;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static const char *size_name(long n, char *buf, size_t len)
{
	if (n >= 1000000 && n % 1000000 == 0)
		snprintf(buf, len, "%ldM", n / 1000000);
	else if (n >= 1000 && n % 1000 == 0)
		snprintf(buf, len, "%ldk", n / 1000);
	else
		snprintf(buf, len, "%ld", n);
	return buf;
}

/* ---- targets: a line for people, an object in --json ---- */

static struct bench_run run = { .name = "timerbench", .width = 34 };

/* ---- the executor and timer service ---- */

struct service {
	struct ao_exec *ex;
	struct ao_timers *ts;
};

static void service_start(struct service *s)
{
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;
	int err;

	ec.kind = opt_kind;
	ec.workers = nworkers;
	err = ao_exec_create(&ec, &s->ex);
	if (err)
		die("ao_exec_create", -err);
	tc.exec = s->ex;
	err = ao_timers_create(&tc, &s->ts);
	if (err)
		die("ao_timers_create", -err);
}

/* Destroy; returns how many timers were still pending. */
static uint64_t service_stop(struct service *s)
{
	uint64_t pending = 0;
	int err = ao_timers_destroy(s->ts, &pending);

	if (err)
		die("ao_timers_destroy", -err);
	err = ao_exec_destroy(s->ex);
	if (err)
		die("ao_exec_destroy", -err);
	s->ts = NULL;
	s->ex = NULL;
	return pending;
}

static struct ao_timers_stats stats_of(struct ao_timers *ts)
{
	struct ao_timers_stats st;

	memset(&st, 0, sizeof(st));
	if (ao_timers_stats(ts, &st))
		fprintf(stderr, "timerbench: ao_timers_stats failed\n");
	return st;
}

/* Timers of hot, rearm and threads are due a minute ahead at least: one
 * that fires is a bug (or a cell that ran for a minute). */
static atomic_ulong stray_fires;

static void stray_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	(void)t;
	(void)ev;
	atomic_fetch_add(&stray_fires, 1);
}

/* ------------------------------------------------------------------------
 * hot and rearm: one thread
 */

enum impl { I_AORTA, I_HEAP, I_PHEAP, I_RBTREE, I_TIMERFD, I_NONE, NIMPL };
enum op { OP_HOT, OP_HOT_DELAY, OP_REARM, NOP };

static const char *const impl_names[NIMPL] = {
	[I_AORTA] = "aorta",   [I_HEAP] = "heap",	[I_PHEAP] = "heap-ptr",
	[I_RBTREE] = "rbtree", [I_TIMERFD] = "timerfd", [I_NONE] = "none",
};
static const char *const op_names[NOP] = {
	[OP_HOT] = "hot",
	[OP_HOT_DELAY] = "hot-delay",
	[OP_REARM] = "rearm",
};

/* One implementation with n timers pending and the hot one idle. */
struct timers {
	enum impl impl;
	uint32_t n;
	struct ao_timers *ts;
	struct ao_timer *ao, hot_ao;
	struct tm_heap heap;
	struct tm_heap_node *hn, hot_hn;
	struct tm_pheap ph;
	struct tm_pnode *pn, hot_pn;
	struct tm_rbtree rb;
	struct tm_rb_node *rn, hot_rn;
	int *fd, hot_fd;
	uint64_t rng; /* rearm's random sequence */
	long errors; /* failed arms, cancels that found nothing */
};

static void fd_arm(int fd, uint64_t deadline, long *errors)
{
	struct itimerspec its = {
		.it_value = { (time_t)(deadline / NSEC),
			      (long)(deadline % NSEC) },
	};

	if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL))
		(*errors)++;
}

static void fd_disarm(int fd, long *errors)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	if (timerfd_settime(fd, 0, &its, NULL))
		(*errors)++;
}

static int fd_new(void)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

	if (fd < 0)
		die("timerfd_create", errno);
	return fd;
}

static void timers_setup(struct timers *t, enum impl impl, uint32_t n,
			 struct ao_timers *ts)
{
	uint64_t s = 0x2545f4914f6cdd1dull ^ n, now = bench_now_ns();
	int err;

	memset(t, 0, sizeof(*t));
	t->impl = impl;
	t->n = n;
	t->ts = ts;
	t->rng = 0x853c49e6748fea9bull;
	switch (impl) {
	case I_AORTA:
		t->ao = xcalloc(n, sizeof(*t->ao));
		if (ao_timer_init(&t->hot_ao, ts, stray_fn))
			die("ao_timer_init", EINVAL);
		for (uint32_t i = 0; i < n; i++) {
			if (ao_timer_init(&t->ao[i], ts, stray_fn))
				die("ao_timer_init", EINVAL);
			err = ao_timer_arm_at(&t->ao[i],
					      now + rnd_far(rnd(&s)));
			if (err)
				die("ao_timer_arm_at", -err);
		}
		if (stats_of(ts).pending != n)
			fprintf(stderr,
				"timerbench: %u armed, but the service "
				"counts %llu pending\n",
				n, (unsigned long long)stats_of(ts).pending);
		break;
	case I_HEAP:
		t->hn = xcalloc(n, sizeof(*t->hn));
		if (tm_heap_init(&t->heap, n + 1))
			die("tm_heap_init", ENOMEM);
		tm_heap_node_init(&t->hot_hn);
		for (uint32_t i = 0; i < n; i++) {
			tm_heap_node_init(&t->hn[i]);
			tm_heap_arm(&t->heap, &t->hn[i],
				    now + rnd_far(rnd(&s)));
		}
		break;
	case I_PHEAP:
		t->pn = xcalloc(n, sizeof(*t->pn));
		tm_pheap_init(&t->ph);
		tm_pnode_init(&t->hot_pn);
		for (uint32_t i = 0; i < n; i++) {
			tm_pnode_init(&t->pn[i]);
			tm_pheap_arm(&t->ph, &t->pn[i], now + rnd_far(rnd(&s)));
		}
		break;
	case I_RBTREE:
		t->rn = xcalloc(n, sizeof(*t->rn));
		tm_rbtree_init(&t->rb);
		tm_rb_node_init(&t->hot_rn);
		for (uint32_t i = 0; i < n; i++) {
			tm_rb_node_init(&t->rn[i]);
			tm_rbtree_arm(&t->rb, &t->rn[i],
				      now + rnd_far(rnd(&s)));
		}
		break;
	case I_TIMERFD:
		t->fd = xcalloc(n, sizeof(*t->fd));
		t->hot_fd = fd_new();
		for (uint32_t i = 0; i < n; i++) {
			t->fd[i] = fd_new();
			fd_arm(t->fd[i], now + rnd_far(rnd(&s)), &t->errors);
		}
		break;
	default:
		break;
	}
}

static void timers_teardown(struct timers *t)
{
	switch (t->impl) {
	case I_AORTA:
		ao_timer_cancel_sync(&t->hot_ao);
		for (uint32_t i = 0; i < t->n; i++)
			if (!ao_timer_cancel_sync(&t->ao[i]))
				t->errors++;
		free(t->ao);
		break;
	case I_HEAP:
		tm_heap_destroy(&t->heap);
		free(t->hn);
		break;
	case I_PHEAP:
		free(t->pn);
		break;
	case I_RBTREE:
		free(t->rn);
		break;
	case I_TIMERFD:
		for (uint32_t i = 0; i < t->n; i++)
			close(t->fd[i]);
		close(t->hot_fd);
		free(t->fd);
		break;
	default:
		break;
	}
}

/*
 * The measured loops, one noinline function each so that callgrind can
 * count exactly them.  Each runs n pairs (or moves) from one clock reading
 * now; a failed arm or a cancel that finds nothing is counted.
 */
static __ao_noinline long hot_aorta(struct ao_timer *t, uint64_t now, long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		bad |= ao_timer_arm_at(t, now + hot_delta[i & (CHUNK - 1)]);
		bad += !ao_timer_cancel(t);
	}
	return bad;
}

static __ao_noinline long hot_aorta_delay(struct ao_timer *t, long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		bad |= ao_timer_arm(t, hot_delta[i & (CHUNK - 1)]);
		bad += !ao_timer_cancel(t);
	}
	return bad;
}

static __ao_noinline long hot_heap(struct tm_heap *h, struct tm_heap_node *x,
				   uint64_t now, long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		bad |= tm_heap_arm(h, x, now + hot_delta[i & (CHUNK - 1)]);
		bad += !tm_heap_cancel(h, x);
	}
	return bad;
}

static __ao_noinline long hot_pheap(struct tm_pheap *h, struct tm_pnode *x,
				    uint64_t now, long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		tm_pheap_arm(h, x, now + hot_delta[i & (CHUNK - 1)]);
		bad += !tm_pheap_cancel(h, x);
	}
	return bad;
}

static __ao_noinline long hot_rbtree(struct tm_rbtree *t, struct tm_rb_node *x,
				     uint64_t now, long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		tm_rbtree_arm(t, x, now + hot_delta[i & (CHUNK - 1)]);
		bad += !tm_rbtree_cancel(t, x);
	}
	return bad;
}

static __ao_noinline long hot_timerfd(int fd, uint64_t now, long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		fd_arm(fd, now + hot_delta[i & (CHUNK - 1)], &bad);
		fd_disarm(fd, &bad);
	}
	return bad;
}

/* The loop alone: what the loops above pay besides the calls. */
static __ao_noinline long hot_none(uint64_t now, long n)
{
	for (long i = 0; i < n; i++)
		escape(now + hot_delta[i & (CHUNK - 1)]);
	return 0;
}

static __ao_noinline long rearm_aorta(struct ao_timer *v, uint32_t nv,
				      uint64_t *rng, uint64_t now, long n)
{
	uint64_t s = *rng;
	long bad = 0;

	for (long i = 0; i < n; i++) {
		uint64_t r = rnd(&s);

		bad |= ao_timer_arm_at(&v[rnd_below(r, nv)], now + rnd_far(r));
	}
	*rng = s;
	return bad;
}

static __ao_noinline long rearm_heap(struct tm_heap *h, struct tm_heap_node *v,
				     uint32_t nv, uint64_t *rng, uint64_t now,
				     long n)
{
	uint64_t s = *rng;
	long bad = 0;

	for (long i = 0; i < n; i++) {
		uint64_t r = rnd(&s);

		bad |= tm_heap_arm(h, &v[rnd_below(r, nv)], now + rnd_far(r));
	}
	*rng = s;
	return bad;
}

static __ao_noinline long rearm_pheap(struct tm_pheap *h, struct tm_pnode *v,
				      uint32_t nv, uint64_t *rng, uint64_t now,
				      long n)
{
	uint64_t s = *rng;

	for (long i = 0; i < n; i++) {
		uint64_t r = rnd(&s);

		tm_pheap_arm(h, &v[rnd_below(r, nv)], now + rnd_far(r));
	}
	*rng = s;
	return 0;
}

static __ao_noinline long rearm_rbtree(struct tm_rbtree *t,
				       struct tm_rb_node *v, uint32_t nv,
				       uint64_t *rng, uint64_t now, long n)
{
	uint64_t s = *rng;

	for (long i = 0; i < n; i++) {
		uint64_t r = rnd(&s);

		tm_rbtree_arm(t, &v[rnd_below(r, nv)], now + rnd_far(r));
	}
	*rng = s;
	return 0;
}

static __ao_noinline long rearm_timerfd(const int *v, uint32_t nv,
					uint64_t *rng, uint64_t now, long n)
{
	uint64_t s = *rng;
	long bad = 0;

	for (long i = 0; i < n; i++) {
		uint64_t r = rnd(&s);

		fd_arm(v[rnd_below(r, nv)], now + rnd_far(r), &bad);
	}
	*rng = s;
	return bad;
}

static __ao_noinline long rearm_none(uint32_t nv, uint64_t *rng, uint64_t now,
				     long n)
{
	uint64_t s = *rng;

	for (long i = 0; i < n; i++) {
		uint64_t r = rnd(&s);

		escape(rnd_below(r, nv) + now + rnd_far(r));
	}
	*rng = s;
	return 0;
}

static void run_chunk(struct timers *t, enum op op, uint64_t now, long n)
{
	long bad = 0;

	if (op == OP_REARM) {
		switch (t->impl) {
		case I_AORTA:
			bad = rearm_aorta(t->ao, t->n, &t->rng, now, n);
			break;
		case I_HEAP:
			bad = rearm_heap(&t->heap, t->hn, t->n, &t->rng, now,
					 n);
			break;
		case I_PHEAP:
			bad = rearm_pheap(&t->ph, t->pn, t->n, &t->rng, now, n);
			break;
		case I_RBTREE:
			bad = rearm_rbtree(&t->rb, t->rn, t->n, &t->rng, now,
					   n);
			break;
		case I_TIMERFD:
			bad = rearm_timerfd(t->fd, t->n, &t->rng, now, n);
			break;
		default:
			bad = rearm_none(t->n, &t->rng, now, n);
			break;
		}
	} else {
		switch (t->impl) {
		case I_AORTA:
			bad = op == OP_HOT_DELAY ?
				      hot_aorta_delay(&t->hot_ao, n) :
				      hot_aorta(&t->hot_ao, now, n);
			break;
		case I_HEAP:
			bad = hot_heap(&t->heap, &t->hot_hn, now, n);
			break;
		case I_PHEAP:
			bad = hot_pheap(&t->ph, &t->hot_pn, now, n);
			break;
		case I_RBTREE:
			bad = hot_rbtree(&t->rb, &t->hot_rn, now, n);
			break;
		case I_TIMERFD:
			bad = hot_timerfd(t->hot_fd, now, n);
			break;
		default:
			bad = hot_none(now, n);
			break;
		}
	}
	t->errors += bad != 0;
}

/* ns per pair (or move) over about seconds, after a short warm-up. */
static double measure(struct timers *t, enum op op, double seconds)
{
	uint64_t t0, now, end;
	long done = 0;

	now = bench_now_ns();
	end = now + 10 * MSEC;
	while (now < end) {
		run_chunk(t, op, now, CHUNK);
		now = bench_now_ns();
	}
	t0 = now;
	end = t0 + (uint64_t)(seconds * 1e9);
	do {
		run_chunk(t, op, now, CHUNK);
		done += CHUNK;
		now = bench_now_ns();
	} while (now < end);
	return (double)(now - t0) / (double)done;
}

#define NSIZES 3
#define MAXRUNS 64

static const uint32_t sizes[NSIZES] = { 0, 10000, 1000000 };

struct one_cell {
	double v[MAXRUNS];
	int n;
};

static struct one_cell res1[NOP][NSIZES][NIMPL];

static bool impl_has(enum impl impl, enum op op, uint32_t n)
{
	if (op == OP_REARM && !n)
		return false;
	if (op == OP_HOT_DELAY && impl != I_AORTA)
		return false;
	if (impl == I_TIMERFD && n > 10000)
		return false;
	return impl != I_NONE;
}

static bool cell1_selected(enum impl impl, enum op op, uint32_t n)
{
	char name[64], sz[16];

	if (!impl_has(impl, op, n))
		return false;
	snprintf(name, sizeof(name), "%s/%s/%s", op_names[op], impl_names[impl],
		 size_name(n, sz, sizeof(sz)));
	return bench_selected(&opts, name);
}

/* timerfd needs a descriptor per timer. */
static void raise_fd_limit(uint32_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < want + 64 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void part_one(struct ao_timers *ts)
{
	struct timers t;

	for (int r = 0; r < opts.runs; r++) {
		for (int si = 0; si < NSIZES; si++) {
			for (int impl = 0; impl < I_NONE; impl++) {
				bool any = false;

				for (int op = 0; op < NOP; op++)
					any |= cell1_selected(impl, op,
							      sizes[si]);
				if (!any)
					continue;
				timers_setup(&t, impl, sizes[si], ts);
				for (int op = 0; op < NOP; op++) {
					struct one_cell *c =
						&res1[op][si][impl];

					if (!cell1_selected(impl, op,
							    sizes[si]))
						continue;
					c->v[c->n++] =
						measure(&t, op, opts.seconds);
				}
				if (impl == I_HEAP && opt_check &&
				    tm_heap_check(&t.heap))
					exit(1);
				if (impl == I_PHEAP && opt_check &&
				    tm_pheap_check(&t.ph))
					exit(1);
				if (impl == I_RBTREE && opt_check &&
				    tm_rbtree_check(&t.rb))
					exit(1);
				timers_teardown(&t);
				if (t.errors)
					fprintf(stderr,
						"timerbench: %s with %u "
						"pending: %ld failed calls\n",
						impl_names[impl], sizes[si],
						t.errors);
			}
		}
	}
}

struct stat3 {
	double med, min, max;
};

static struct stat3 stat3(const double *v, int n)
{
	double tmp[MAXRUNS];
	struct stat3 s = { 0, 0, 0 };

	if (n <= 0)
		return s;
	memcpy(tmp, v, (size_t)n * sizeof(*v));
	s.med = bench_median(tmp, (size_t)n);
	s.min = tmp[0];
	s.max = tmp[n - 1];
	return s;
}

static double med1(enum op op, int si, enum impl impl)
{
	const struct one_cell *c = &res1[op][si][impl];

	return stat3(c->v, c->n).med;
}

static void report_one(void)
{
	bool any = false;
	char sz[16];

	for (int op = 0; op < NOP; op++)
		for (int si = 0; si < NSIZES; si++)
			for (int i = 0; i < I_NONE; i++)
				any |= res1[op][si][i].n > 0;
	if (!any)
		return;
	if (!opts.json)
		printf("\narm+cancel on one thread: ns per pair (rearm: per "
		       "move), medians of %d run%s\n"
		       "op        pending    aorta     heap heap-ptr   rbtree"
		       "  timerfd  aorta/heap  aorta/rbtree  aorta/aorta@0\n",
		       opts.runs, opts.runs > 1 ? "s" : "");
	for (int op = 0; op < NOP; op++) {
		for (int si = 0; si < NSIZES; si++) {
			double a = med1(op, si, I_AORTA);
			double a0 = med1(op, op == OP_REARM ? 1 : 0, I_AORTA);
			bool row = false;

			for (int i = 0; i < I_NONE; i++)
				row |= res1[op][si][i].n > 0;
			if (!row)
				continue;
			size_name(sizes[si], sz, sizeof(sz));
			if (opts.json) {
				for (int i = 0; i < I_NONE; i++) {
					const struct one_cell *c =
						&res1[op][si][i];
					struct stat3 s = stat3(c->v, c->n);

					if (!c->n)
						continue;
					bench_json_begin("timerbench");
					bench_json_str("cell", op_names[op]);
					bench_json_str("impl", impl_names[i]);
					bench_json_int("pending", sizes[si]);
					bench_json_int("runs", c->n);
					bench_json_num("ns", s.med);
					bench_json_num("ns_min", s.min);
					bench_json_num("ns_max", s.max);
					if (i == I_AORTA) {
						bench_json_num(
							"vs_heap",
							ratio(a, med1(op, si,
								      I_HEAP)));
						bench_json_num(
							"vs_heap_ptr",
							ratio(a,
							      med1(op, si,
								   I_PHEAP)));
						bench_json_num(
							"vs_rbtree",
							ratio(a,
							      med1(op, si,
								   I_RBTREE)));
						bench_json_num("vs_fewest",
							       ratio(a, a0));
					}
					bench_json_end();
				}
				continue;
			}
			printf("%-9s %7s", op_names[op], sz);
			for (int i = 0; i < I_NONE; i++) {
				if (res1[op][si][i].n)
					printf(" %8.1f", med1(op, si, i));
				else
					printf(" %8s", "-");
			}
			if (a > 0 && med1(op, si, I_HEAP) > 0)
				printf("  %9.2fx",
				       ratio(a, med1(op, si, I_HEAP)));
			else
				printf("  %10s", "");
			if (a > 0 && med1(op, si, I_RBTREE) > 0)
				printf("  %11.2fx",
				       ratio(a, med1(op, si, I_RBTREE)));
			else
				printf("  %12s", "");
			if (a > 0 && a0 > 0)
				printf("  %12.2fx", ratio(a, a0));
			putchar('\n');
		}
	}
	if (!opts.json)
		printf("(hot: deadlines 10 ms..1 s ahead; the pending others "
		       "and rearm's: 1..61 min ahead;\n"
		       " aorta/aorta@0: against the fewest pending of the same "
		       "op)\n");
}

/* ------------------------------------------------------------------------
 * threads: arm+cancel from one and two threads at once
 */

enum { TI_AORTA, TI_HEAP_LOCK, NTIMPL };

static const char *const timpl_names[NTIMPL] = { "aorta", "heap-lock" };

struct locked_heap {
	struct ao_spinlock lock;
	struct tm_heap heap;
} __ao_cacheline_aligned;

struct thr_shared {
	pthread_barrier_t ready;
	atomic_int stop;
	int impl;
	struct ao_timers *ts;
	struct locked_heap *lh;
};

struct thr {
	pthread_t tid;
	int cpu;
	long pairs;
	long errors;
	struct thr_shared *sh;
} __ao_cacheline_aligned;

static __ao_noinline long thr_aorta(struct ao_timer *t, uint64_t now, long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		struct ao_timer *x = &t[i & (THR_TIMERS - 1)];

		bad |= ao_timer_arm_at(x, now + hot_delta[i & (CHUNK - 1)]);
		bad += !ao_timer_cancel(x);
	}
	return bad;
}

static __ao_noinline long thr_heap_lock(struct locked_heap *lh,
					struct tm_heap_node *v, uint64_t now,
					long n)
{
	long bad = 0;

	for (long i = 0; i < n; i++) {
		struct tm_heap_node *x = &v[i & (THR_TIMERS - 1)];

		ao_spin_lock(&lh->lock);
		bad |= tm_heap_arm(&lh->heap, x,
				   now + hot_delta[i & (CHUNK - 1)]);
		ao_spin_unlock(&lh->lock);
		ao_spin_lock(&lh->lock);
		bad += !tm_heap_cancel(&lh->heap, x);
		ao_spin_unlock(&lh->lock);
	}
	return bad;
}

static void *thr_main(void *arg)
{
	struct thr *th = arg;
	struct thr_shared *sh = th->sh;
	struct ao_timer t[THR_TIMERS];
	struct tm_heap_node hn[THR_TIMERS];
	long pairs = 0, bad = 0;

	bench_pin(th->cpu);
	for (int i = 0; i < THR_TIMERS; i++) {
		if (ao_timer_init(&t[i], sh->ts, stray_fn))
			die("ao_timer_init", EINVAL);
		tm_heap_node_init(&hn[i]);
	}
	pthread_barrier_wait(&sh->ready);
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		uint64_t now = bench_now_ns();

		if (sh->impl == TI_AORTA)
			bad += thr_aorta(t, now, CHUNK) != 0;
		else
			bad += thr_heap_lock(sh->lh, hn, now, CHUNK) != 0;
		pairs += CHUNK;
	}
	for (int i = 0; i < THR_TIMERS; i++)
		ao_timer_cancel_sync(&t[i]);
	th->pairs = pairs;
	th->errors = bad;
	return NULL;
}

/* Pairs per second over nthr threads. */
static double thr_cell(int impl, int nthr, struct ao_timers *ts)
{
	struct thr_shared sh;
	struct locked_heap *lh = aligned_alloc(AO_CACHELINE_SIZE, sizeof(*lh));
	struct thr th[2];
	uint64_t t0, t1;
	long pairs = 0;

	if (!lh)
		die("aligned_alloc", ENOMEM);
	ao_spin_init(&lh->lock);
	if (tm_heap_init(&lh->heap, 2 * THR_TIMERS))
		die("tm_heap_init", ENOMEM);
	memset(&sh, 0, sizeof(sh));
	sh.impl = impl;
	sh.ts = ts;
	sh.lh = lh;
	pthread_barrier_init(&sh.ready, NULL, (unsigned int)nthr + 1);
	for (int i = 0; i < nthr; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i].cpu = i;
		th[i].sh = &sh;
		if (pthread_create(&th[i].tid, NULL, thr_main, &th[i]))
			die("pthread_create", errno);
	}
	pthread_barrier_wait(&sh.ready);
	t0 = bench_now_ns();
	sleep_ns((uint64_t)(opts.seconds * 1e9));
	atomic_store(&sh.stop, 1);
	t1 = bench_now_ns();
	for (int i = 0; i < nthr; i++) {
		pthread_join(th[i].tid, NULL);
		pairs += th[i].pairs;
		if (th[i].errors)
			fprintf(stderr,
				"timerbench: threads/%s: failed calls\n",
				timpl_names[impl]);
	}
	pthread_barrier_destroy(&sh.ready);
	tm_heap_destroy(&lh->heap);
	free(lh);
	return (double)pairs * 1e9 / (double)(t1 - t0);
}

static struct one_cell res2[NTIMPL][2];

static bool thr_selected(int impl, int nthr)
{
	char name[64];

	snprintf(name, sizeof(name), "threads/%s/t%d", timpl_names[impl], nthr);
	return bench_selected(&opts, name);
}

static void part_two(struct ao_timers *ts)
{
	for (int r = 0; r < opts.runs; r++)
		for (int nt = 1; nt <= 2; nt++)
			for (int i = 0; i < NTIMPL; i++) {
				struct one_cell *c = &res2[i][nt - 1];

				if (thr_selected(i, nt))
					c->v[c->n++] = thr_cell(i, nt, ts);
			}
}

static double med2(int impl, int nthr)
{
	const struct one_cell *c = &res2[impl][nthr - 1];

	return stat3(c->v, c->n).med;
}

static void report_two(void)
{
	bool any = false;

	for (int i = 0; i < NTIMPL; i++)
		any |= res2[i][0].n || res2[i][1].n;
	if (!any)
		return;
	if (!opts.json)
		printf("\nthreads: each thread arms and cancels its own %d "
		       "timers (no others pending), pinned\n"
		       "impl       threads  Mpairs/s      min      max  "
		       "x1thread  xheap-lock\n",
		       THR_TIMERS);
	for (int i = 0; i < NTIMPL; i++)
		for (int nt = 1; nt <= 2; nt++) {
			const struct one_cell *c = &res2[i][nt - 1];
			struct stat3 s = stat3(c->v, c->n);
			double one = med2(i, 1);
			double base = med2(TI_HEAP_LOCK, nt);

			if (!c->n)
				continue;
			if (opts.json) {
				bench_json_begin("timerbench");
				bench_json_str("cell", "threads");
				bench_json_str("impl", timpl_names[i]);
				bench_json_int("threads", nt);
				bench_json_int("runs", c->n);
				bench_json_num("pairs_per_s", s.med);
				bench_json_num("pairs_per_s_min", s.min);
				bench_json_num("pairs_per_s_max", s.max);
				bench_json_num("vs_one_thread",
					       ratio(s.med, one));
				bench_json_num("vs_heap_lock",
					       ratio(s.med, base));
				bench_json_end();
				continue;
			}
			printf("%-10s %7d %9.2f %8.2f %8.2f  %7.2fx  %9.2fx\n",
			       timpl_names[i], nt, s.med / 1e6, s.min / 1e6,
			       s.max / 1e6, ratio(s.med, one),
			       ratio(s.med, base));
		}
}

/* ------------------------------------------------------------------------
 * expiry and bounded: many timers firing
 */

#define MAX_SLOTS 64

/* A counter and a lateness log per thread that runs callbacks. */
struct slot {
	_Atomic uint64_t n;
	uint64_t *late;
	uint64_t cap;
} __ao_cacheline_aligned;

static struct slot slots[MAX_SLOTS];
static atomic_uint nslots;
static uint64_t slot_cap;
/* Callbacks run on the workers of one cell's executor, which are gone
 * before the next cell's start: a thread claims a slot once. */
static _Thread_local struct slot *my_slot;

static struct slot *slot_claim(void)
{
	unsigned int i = atomic_fetch_add(&nslots, 1);

	if (i >= MAX_SLOTS) {
		fputs("timerbench: too many callback threads\n", stderr);
		abort();
	}
	my_slot = &slots[i];
	return my_slot;
}

/* Forget the slots (between cells; no callback may be running). */
static void slots_reset(uint64_t cap)
{
	unsigned int n = atomic_load(&nslots);

	for (unsigned int i = 0; i < n && i < MAX_SLOTS; i++) {
		free(slots[i].late);
		slots[i].late = NULL;
		slots[i].cap = 0;
		atomic_store(&slots[i].n, 0);
	}
	atomic_store(&nslots, 0);
	slot_cap = cap;
}

static uint64_t slots_sum(void)
{
	unsigned int n = atomic_load(&nslots);
	uint64_t s = 0;

	for (unsigned int i = 0; i < n && i < MAX_SLOTS; i++)
		s += atomic_load_explicit(&slots[i].n, memory_order_acquire);
	return s;
}

static void count_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct slot *s = my_slot;
	uint64_t n;

	(void)t;
	if (unlikely(!s)) {
		s = slot_claim();
		s->late = malloc(slot_cap * sizeof(*s->late));
		s->cap = s->late ? slot_cap : 0;
	}
	n = atomic_load_explicit(&s->n, memory_order_relaxed);
	if (n < s->cap)
		s->late[n] = ev->late_ns > 0 ? (uint64_t)ev->late_ns : 0;
	atomic_store_explicit(&s->n, n + 1, memory_order_release);
}

/* Every slot's lateness log in one sorted array; *n its length. */
static uint64_t *slots_late(uint64_t *n)
{
	unsigned int k = atomic_load(&nslots);
	uint64_t total = 0, *all;

	for (unsigned int i = 0; i < k && i < MAX_SLOTS; i++) {
		uint64_t m = atomic_load(&slots[i].n);

		total += m < slots[i].cap ? m : slots[i].cap;
	}
	all = xcalloc(total, sizeof(*all));
	total = 0;
	for (unsigned int i = 0; i < k && i < MAX_SLOTS; i++) {
		uint64_t m = atomic_load(&slots[i].n);

		m = m < slots[i].cap ? m : slots[i].cap;
		memcpy(all + total, slots[i].late, m * sizeof(*all));
		total += m;
	}
	bench_sort_u64(all, total);
	*n = total;
	return all;
}

struct expiry_result {
	bool ran;
	uint64_t timers, fired, pending_left;
	double spread_s;
	double arm_ms; /* arming them all (the main thread) */
	double cpu_ns_per_fired;
	double wall_s; /* from the first deadline to the last fire seen */
	uint64_t late_p50, late_p99, late_max; /* seen by the callbacks */
	struct ao_timers_stats st; /* aorta */
	/* test clock: the most CPU one advance of VIRT_STEP_NS took, and
	 * when (timer time from the first deadline) */
	double burst_ns, burst_at_s;
};

static void expiry_aorta(uint64_t n, double spread_s, struct expiry_result *r)
{
	struct service s;
	struct ao_timer *t = xcalloc(n, sizeof(*t));
	uint64_t spread = (uint64_t)(spread_s * 1e9);
	uint64_t seed = 0x6a09e667f3bcc908ull;
	uint64_t base, c0, m0, w0, w1, c1, m1, last = 0, last_t, deadline;
	uint64_t nlate, *late;

	memset(r, 0, sizeof(*r));
	r->ran = true;
	r->timers = n;
	r->spread_s = spread_s;
	slots_reset(n);
	service_start(&s);
	for (uint64_t i = 0; i < n; i++)
		if (ao_timer_init(&t[i], s.ts, count_fn))
			die("ao_timer_init", EINVAL);
	c0 = bench_proc_cpu_ns();
	m0 = bench_thread_cpu_ns();
	w0 = bench_now_ns();
	base = w0 + EXPIRY_LEAD_NS;
	for (uint64_t i = 0; i < n; i++) {
		int err = ao_timer_arm_at(&t[i], base + rnd(&seed) % spread);

		if (err)
			die("ao_timer_arm_at", -err);
	}
	r->arm_ms = (double)(bench_now_ns() - w0) / 1e6;
	/* Wait for all, or until nothing has fired for 5 s past the last
	 * deadline. */
	deadline = base + spread + 5 * NSEC;
	last_t = bench_now_ns();
	for (;;) {
		uint64_t k = slots_sum(), now = bench_now_ns();

		if (k >= n)
			break;
		if (k != last) {
			last = k;
			last_t = now;
		}
		if (now > deadline && now - last_t > 2 * NSEC)
			break;
		sleep_ns(20 * MSEC);
	}
	w1 = bench_now_ns();
	c1 = bench_proc_cpu_ns();
	m1 = bench_thread_cpu_ns();
	r->fired = slots_sum();
	r->wall_s = (double)(w1 - base) / 1e9;
	r->st = stats_of(s.ts);
	if (r->fired)
		r->cpu_ns_per_fired =
			(double)((c1 - c0) - (m1 - m0)) / (double)r->fired;
	r->pending_left = service_stop(&s);
	late = slots_late(&nlate);
	r->late_p50 = bench_pct_u64(late, nlate, 50);
	r->late_p99 = bench_pct_u64(late, nlate, 99);
	r->late_max = nlate ? late[nlate - 1] : 0;
	free(late);
	slots_reset(0);
	free(t);
}

/*
 * The same on the test clock, advanced VIRT_STEP_NS at a time on this
 * thread (ao_timers_advance() runs the expiry and the callbacks here): no
 * other thread, so a long step is the wheel's work, not a preemption, and
 * the thread CPU of one advance is all the expiry work due within
 * VIRT_STEP_NS of timer time, however many steps it is split into.
 */
#define VIRT_STEP_NS (100 * USEC)

static uint64_t virt_fired;

static void virt_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	(void)t;
	(void)ev;
	virt_fired++;
}

static void expiry_virtual(uint64_t n, double spread_s, struct expiry_result *r)
{
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;
	struct service s;
	struct ao_timer *t = xcalloc(n, sizeof(*t));
	uint64_t spread = (uint64_t)(spread_s * 1e9);
	uint64_t seed = 0x6a09e667f3bcc908ull, base, c0, c1, total = 0;
	uint64_t end;
	int err;

	memset(r, 0, sizeof(*r));
	r->ran = true;
	r->timers = n;
	r->spread_s = spread_s;
	ec.kind = opt_kind;
	ec.workers = nworkers;
	err = ao_exec_create(&ec, &s.ex);
	if (err)
		die("ao_exec_create", -err);
	tc.exec = s.ex;
	tc.test_clock = true;
	tc.test_start_ns = NSEC;
	err = ao_timers_create(&tc, &s.ts);
	if (err)
		die("ao_timers_create", -err);
	virt_fired = 0;
	c0 = bench_thread_cpu_ns();
	base = ao_timers_now(s.ts) + EXPIRY_LEAD_NS;
	for (uint64_t i = 0; i < n; i++) {
		err = ao_timer_init(&t[i], s.ts, virt_fn);
		if (!err)
			err = ao_timer_arm_at(&t[i],
					      base + rnd(&seed) % spread);
		if (err)
			die("ao_timer_arm_at", -err);
	}
	r->arm_ms = (double)(bench_thread_cpu_ns() - c0) / 1e6;
	end = base + spread + NSEC;
	while (virt_fired < n && ao_timers_now(s.ts) < end) {
		c0 = bench_thread_cpu_ns();
		err = ao_timers_advance(s.ts, VIRT_STEP_NS);
		c1 = bench_thread_cpu_ns() - c0;
		if (err)
			die("ao_timers_advance", -err);
		total += c1;
		if ((double)c1 > r->burst_ns) {
			r->burst_ns = (double)c1;
			r->burst_at_s =
				(double)(ao_timers_now(s.ts) - base) / 1e9;
		}
	}
	r->fired = virt_fired;
	r->cpu_ns_per_fired = n ? (double)total / (double)n : 0;
	r->wall_s = (double)(ao_timers_now(s.ts) - base) / 1e9;
	r->st = stats_of(s.ts);
	r->late_p50 = r->st.late_p50_ns;
	r->late_p99 = r->st.late_p99_ns;
	r->late_max = r->st.late_max_ns;
	r->pending_left = service_stop(&s);
	free(t);
}

/* heap-loop: one thread, a heap, clock_nanosleep, callbacks inline. */
struct loop_timer {
	struct tm_heap_node node;
	uint64_t fired;
};

struct heap_loop {
	uint64_t n, spread;
	struct loop_timer *t;
	uint64_t *late;
	uint64_t fired, arm_ns, cpu_ns, end;
};

static __ao_noinline void loop_callback(struct loop_timer *lt)
{
	lt->fired++;
}

static void *heap_loop_main(void *arg)
{
	struct heap_loop *hl = arg;
	struct tm_heap h;
	uint64_t seed = 0x6a09e667f3bcc908ull, base, c0, now;

	/* The slack an aorta worker sleeps with (its default). */
	prctl(PR_SET_TIMERSLACK, (unsigned long)AO_TIMERS_DEFAULT_SLACK_NS, 0,
	      0, 0);
	if (tm_heap_init(&h, (uint32_t)hl->n))
		die("tm_heap_init", ENOMEM);
	now = bench_now_ns();
	base = now + EXPIRY_LEAD_NS;
	for (uint64_t i = 0; i < hl->n; i++) {
		tm_heap_node_init(&hl->t[i].node);
		tm_heap_arm(&h, &hl->t[i].node, base + rnd(&seed) % hl->spread);
	}
	hl->arm_ns = bench_now_ns() - now;
	c0 = bench_thread_cpu_ns();
	while (hl->fired < hl->n) {
		struct tm_heap_node *x;

		now = bench_now_ns();
		while ((x = tm_heap_pop_due(&h, now))) {
			hl->late[hl->fired++] = now - x->expires;
			loop_callback(container_of(x, struct loop_timer, node));
		}
		x = tm_heap_min(&h);
		if (x)
			sleep_until(x->expires);
	}
	hl->cpu_ns = bench_thread_cpu_ns() - c0;
	hl->end = bench_now_ns();
	tm_heap_destroy(&h);
	return NULL;
}

static void expiry_heap_loop(uint64_t n, double spread_s,
			     struct expiry_result *r)
{
	struct heap_loop hl;
	pthread_t tid;
	uint64_t t0 = bench_now_ns();

	memset(r, 0, sizeof(*r));
	memset(&hl, 0, sizeof(hl));
	hl.n = n;
	hl.spread = (uint64_t)(spread_s * 1e9);
	hl.t = xcalloc(n, sizeof(*hl.t));
	hl.late = xcalloc(n, sizeof(*hl.late));
	if (pthread_create(&tid, NULL, heap_loop_main, &hl))
		die("pthread_create", errno);
	pthread_join(tid, NULL);
	r->ran = true;
	r->timers = n;
	r->spread_s = spread_s;
	r->fired = hl.fired;
	r->arm_ms = (double)hl.arm_ns / 1e6;
	r->cpu_ns_per_fired = n ? (double)hl.cpu_ns / (double)n : 0;
	r->wall_s = (double)(hl.end - t0) / 1e9 - EXPIRY_LEAD_NS / 1e9;
	bench_sort_u64(hl.late, n);
	r->late_p50 = bench_pct_u64(hl.late, n, 50);
	r->late_p99 = bench_pct_u64(hl.late, n, 99);
	r->late_max = n ? hl.late[n - 1] : 0;
	free(hl.late);
	free(hl.t);
}

enum { E_AORTA, E_HEAP_LOOP, E_BOUNDED, E_VIRTUAL, NEXP };

static struct expiry_result res3[NEXP];
static const char *const exp_names[NEXP] = {
	[E_AORTA] = "expiry/aorta",
	[E_HEAP_LOOP] = "expiry/heap-loop",
	[E_BOUNDED] = "bounded/aorta",
	[E_VIRTUAL] = "bounded/testclock",
};

static void part_three(void)
{
	const uint64_t n = 1000000;

	if (bench_selected(&opts, exp_names[E_AORTA]))
		expiry_aorta(n, expiry_s, &res3[E_AORTA]);
	if (bench_selected(&opts, exp_names[E_HEAP_LOOP]))
		expiry_heap_loop(n, expiry_s, &res3[E_HEAP_LOOP]);
	if (bench_selected(&opts, exp_names[E_BOUNDED]))
		expiry_aorta(n, opt_expiry_s, &res3[E_BOUNDED]);
	if (bench_selected(&opts, exp_names[E_VIRTUAL]))
		expiry_virtual(n, opt_expiry_s, &res3[E_VIRTUAL]);
}

static void report_three(void)
{
	bool any = false;

	for (int i = 0; i < NEXP; i++)
		any |= res3[i].ran;
	if (!any)
		return;
	if (!opts.json)
		printf("\nexpiry: 1M timers due uniformly over the spread, 2 "
		       "workers, the callbacks count\n"
		       "cell              spread     fired  arm-ms  "
		       "cpu-ns/fired  polls  step-max-us  late-us "
		       "p50/p99/max (callbacks)  (service)\n");
	for (int i = 0; i < NEXP; i++) {
		const struct expiry_result *r = &res3[i];
		bool ao = i != E_HEAP_LOOP;

		if (!r->ran)
			continue;
		if (opts.json) {
			bench_json_begin("timerbench");
			bench_json_str("cell",
				       i >= E_BOUNDED ? "bounded" : "expiry");
			bench_json_str("impl", i == E_VIRTUAL ?
						       "aorta-testclock" :
					       ao ? "aorta" :
						    "heap-loop");
			bench_json_int("timers", (long long)r->timers);
			bench_json_num("spread_s", r->spread_s);
			bench_json_int("fired", (long long)r->fired);
			bench_json_num("arm_ms", r->arm_ms);
			bench_json_num("cpu_ns_per_fired", r->cpu_ns_per_fired);
			bench_json_num("wall_s", r->wall_s);
			bench_json_int("late_p50_ns", (long long)r->late_p50);
			bench_json_int("late_p99_ns", (long long)r->late_p99);
			bench_json_int("late_max_ns", (long long)r->late_max);
			if (ao) {
				bench_json_int("pending_left",
					       (long long)r->pending_left);
				bench_json_int("st_fired",
					       (long long)r->st.fired);
				bench_json_int("polls", (long long)r->st.polls);
				bench_json_int("step_max_ns",
					       (long long)r->st.step_max_ns);
				bench_json_int("st_late_p50_ns",
					       (long long)r->st.late_p50_ns);
				bench_json_int("st_late_p99_ns",
					       (long long)r->st.late_p99_ns);
				bench_json_int("st_late_max_ns",
					       (long long)r->st.late_max_ns);
				bench_json_int("sleeps",
					       (long long)r->st.sleeps);
			}
			if (i == E_VIRTUAL) {
				bench_json_num("burst_cpu_ns", r->burst_ns);
				bench_json_num("burst_at_s", r->burst_at_s);
				bench_json_int("step_ns", VIRT_STEP_NS);
			}
			if (i == E_AORTA && res3[E_HEAP_LOOP].ran)
				bench_json_num(
					"cpu_vs_heap_loop",
					ratio(r->cpu_ns_per_fired,
					      res3[E_HEAP_LOOP]
						      .cpu_ns_per_fired));
			bench_json_end();
			continue;
		}
		printf("%-17s %5.0f s %9llu %7.1f %13.0f", exp_names[i],
		       r->spread_s, (unsigned long long)r->fired, r->arm_ms,
		       r->cpu_ns_per_fired);
		if (ao)
			printf(" %6llu %12.1f", (unsigned long long)r->st.polls,
			       (double)r->st.step_max_ns / 1e3);
		else
			printf(" %6s %12s", "-", "-");
		if (i == E_VIRTUAL) {
			printf("  burst: %.1f us CPU at %.2f s\n",
			       r->burst_ns / 1e3, r->burst_at_s);
			continue;
		}
		printf("  %7.1f/%.1f/%.1f", (double)r->late_p50 / 1e3,
		       (double)r->late_p99 / 1e3, (double)r->late_max / 1e3);
		if (ao)
			printf("  %.1f/%.1f/%.1f",
			       (double)r->st.late_p50_ns / 1e3,
			       (double)r->st.late_p99_ns / 1e3,
			       (double)r->st.late_max_ns / 1e3);
		putchar('\n');
	}
	if (!opts.json && res3[E_AORTA].ran && res3[E_HEAP_LOOP].ran)
		printf("(cpu-ns/fired: aorta's workers %.2fx the heap loop's "
		       "thread; the loop runs its callbacks inline)\n",
		       ratio(res3[E_AORTA].cpu_ns_per_fired,
			     res3[E_HEAP_LOOP].cpu_ns_per_fired));
	if (!opts.json && res3[E_VIRTUAL].ran)
		printf("(bounded/testclock: the same timers on the test clock, "
		       "advanced %llu us at a time on one thread;\n"
		       " burst: the most thread CPU one advance took, i.e. "
		       "the expiry work due within %llu us of timer time)\n",
		       VIRT_STEP_NS / USEC, VIRT_STEP_NS / USEC);
}

/* ------------------------------------------------------------------------
 * tick: a 60 Hz periodic timer, against a plain thread's clock_nanosleep
 */

enum { K_FLOOR, K_IDLE, K_PRECISE, K_BUSY, K_BUSY_STRAND, NTICK };

static const char *const tick_names[NTICK] = {
	"floor", "idle", "precise", "busy", "busy-strand",
};

struct tick_cell {
	uint64_t *late;
	size_t n, cap;
	uint64_t ticks, expected, skipped, early, chunks;
	double cpu_ns, wall_ns;
	uint64_t sleeps, spins;
	double tick_p50, tick_p99, tick_max; /* after sorting */
};

static struct tick_cell res5[NTICK];

/* The chunk being run (one at a time). */
static struct {
	uint64_t last; /* the window's last deadline */
	atomic_ulong n; /* ticks in the window */
	atomic_ulong skipped, early;
	uint64_t *late;
	size_t cap;
} tk;

static void tick_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	unsigned long i;

	(void)t;
	if (ev->deadline > tk.last)
		return; /* past the window */
	if (ev->late_ns < 0)
		atomic_fetch_add(&tk.early, 1);
	atomic_fetch_add(&tk.skipped, ev->skipped);
	i = atomic_fetch_add(&tk.n, 1);
	if (i < tk.cap)
		tk.late[i] = ev->late_ns > 0 ? (uint64_t)ev->late_ns : 0;
}

/* Ticks of the window run or skipped so far. */
static uint64_t tick_seen(void)
{
	return atomic_load(&tk.n) + atomic_load(&tk.skipped);
}

struct floor_arg {
	uint64_t first, m;
};

static void *floor_main(void *arg)
{
	struct floor_arg *fa = arg;

	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	for (uint64_t k = 0; k < fa->m; k++) {
		uint64_t d = fa->first + k * TICK_PERIOD_NS, now;

		sleep_until(d);
		now = bench_now_ns();
		if (now < d)
			atomic_fetch_add(&tk.early, 1);
		if (k < tk.cap)
			tk.late[k] = now > d ? now - d : 0;
		atomic_fetch_add(&tk.n, 1);
	}
	return NULL;
}

/* busy: 100 us items, about BUSY_BACKLOG of them kept queued. */
struct busy_job {
	struct ao_work work;
	atomic_bool inflight;
};

static struct {
	struct busy_job *jobs;
	atomic_ulong done;
	uint64_t submitted;
	atomic_int stop;
	struct ao_exec *ex;
	pthread_t tid;
	long errors;
} busy;

static void busy_run(struct ao_work *w)
{
	struct busy_job *j = container_of(w, struct busy_job, work);

	bench_spin_ns(BUSY_ITEM_NS);
	atomic_store_explicit(&j->inflight, false, memory_order_release);
	atomic_fetch_add_explicit(&busy.done, 1, memory_order_relaxed);
}

static void busy_top_up(void)
{
	static unsigned int next;
	uint64_t backlog = busy.submitted - atomic_load(&busy.done);

	for (unsigned int tries = 0;
	     backlog < BUSY_BACKLOG && tries < BUSY_JOBS; tries++) {
		struct busy_job *j = &busy.jobs[next++ % BUSY_JOBS];

		if (atomic_load_explicit(&j->inflight, memory_order_acquire))
			continue;
		atomic_store(&j->inflight, true);
		if (ao_exec_submit(busy.ex, &j->work)) {
			atomic_store(&j->inflight, false);
			busy.errors++;
			break;
		}
		busy.submitted++;
		backlog++;
	}
}

static void *feeder_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&busy.stop)) {
		busy_top_up();
		sleep_ns(MSEC);
	}
	return NULL;
}

static void busy_start(struct ao_exec *ex)
{
	busy.ex = ex;
	busy.submitted = 0;
	atomic_store(&busy.done, 0);
	atomic_store(&busy.stop, 0);
	if (!busy.jobs) {
		busy.jobs = xcalloc(BUSY_JOBS, sizeof(*busy.jobs));
		for (int i = 0; i < BUSY_JOBS; i++)
			ao_work_init(&busy.jobs[i].work, busy_run);
	}
	busy_top_up();
	if (pthread_create(&busy.tid, NULL, feeder_main, NULL))
		die("pthread_create", errno);
	sleep_ns(20 * MSEC); /* both workers well into it */
}

static void busy_stop(void)
{
	atomic_store(&busy.stop, 1);
	pthread_join(busy.tid, NULL);
	ao_exec_drain(busy.ex);
}

static void tick_chunk(int kind, double secs)
{
	struct tick_cell *c = &res5[kind];
	uint64_t m = (uint64_t)(secs * 1e9 / TICK_PERIOD_NS + 0.5);
	struct service s = { NULL, NULL };
	struct ao_strand strand;
	struct ao_timer t;
	struct ao_timers_stats st;
	uint64_t first, c0, w0, c1, w1;
	int err;

	if (m < 1)
		m = 1;
	if (c->n + m > c->cap) {
		c->cap = (c->n + m) * 2;
		c->late = realloc(c->late, c->cap * sizeof(*c->late));
		if (!c->late)
			die("realloc", ENOMEM);
	}
	tk.late = c->late + c->n;
	tk.cap = m;
	atomic_store(&tk.n, 0);
	atomic_store(&tk.skipped, 0);
	atomic_store(&tk.early, 0);

	if (kind == K_FLOOR) {
		struct floor_arg fa;
		pthread_t tid;

		c0 = bench_proc_cpu_ns();
		w0 = bench_now_ns();
		fa.first = w0 + TICK_PERIOD_NS;
		fa.m = m;
		tk.last = fa.first + (m - 1) * TICK_PERIOD_NS;
		if (pthread_create(&tid, NULL, floor_main, &fa))
			die("pthread_create", errno);
		pthread_join(tid, NULL);
		c1 = bench_proc_cpu_ns();
		w1 = bench_now_ns();
		goto account;
	}

	service_start(&s);
	if (kind == K_BUSY || kind == K_BUSY_STRAND)
		busy_start(s.ex);
	if (kind == K_BUSY_STRAND) {
		ao_strand_init(&strand, s.ex);
		err = ao_timer_init_strand(&t, &strand, tick_fn);
	} else {
		err = ao_timer_init(&t, s.ts, tick_fn);
	}
	if (err)
		die("ao_timer_init", -err);
	c0 = bench_proc_cpu_ns();
	w0 = bench_now_ns();
	first = ao_timers_now(s.ts) + TICK_PERIOD_NS;
	tk.last = first + (m - 1) * TICK_PERIOD_NS;
	err = ao_timer_arm_periodic(&t, first, TICK_PERIOD_NS,
				    kind == K_PRECISE ? AO_TIMER_PRECISE : 0);
	if (err)
		die("ao_timer_arm_periodic", -err);
	sleep_until(tk.last + TICK_PERIOD_NS / 2);
	/* A late last tick gets up to a second more. */
	for (int i = 0; i < 1000 && tick_seen() < m; i++)
		sleep_ns(MSEC);
	ao_timer_cancel_sync(&t);
	c1 = bench_proc_cpu_ns();
	w1 = bench_now_ns();
	st = stats_of(s.ts);
	c->sleeps += st.sleeps;
	c->spins += st.spins;
	if (kind == K_BUSY || kind == K_BUSY_STRAND)
		busy_stop();
	if (kind == K_BUSY_STRAND && ao_strand_destroy(&strand))
		fprintf(stderr, "timerbench: strand still busy\n");
	service_stop(&s);
account:
	c->chunks++;
	c->ticks += atomic_load(&tk.n);
	c->expected += m;
	c->skipped += atomic_load(&tk.skipped);
	c->early += atomic_load(&tk.early);
	c->n += atomic_load(&tk.n) < m ? atomic_load(&tk.n) : m;
	c->cpu_ns += (double)(c1 - c0);
	c->wall_ns += (double)(w1 - w0);
}

static bool tick_selected(int kind)
{
	char name[64];

	snprintf(name, sizeof(name), "tick/%s", tick_names[kind]);
	return bench_selected(&opts, name);
}

static void part_five(void)
{
	double left = opt_tick_s;

	while (left > 1e-9) {
		double secs = left < opt_chunk_s ? left : opt_chunk_s;

		for (int k = 0; k < NTICK; k++)
			if (tick_selected(k))
				tick_chunk(k, secs);
		left -= secs;
	}
	for (int k = 0; k < NTICK; k++) {
		struct tick_cell *c = &res5[k];

		if (!c->chunks)
			continue;
		bench_sort_u64(c->late, c->n);
		c->tick_p50 = (double)bench_pct_u64(c->late, c->n, 50);
		c->tick_p99 = (double)bench_pct_u64(c->late, c->n, 99);
		c->tick_max = c->n ? (double)c->late[c->n - 1] : 0;
	}
}

static void report_five(void)
{
	bool any = false;

	for (int k = 0; k < NTICK; k++)
		any |= res5[k].chunks > 0;
	if (!any)
		return;
	if (!opts.json)
		printf("\ntick: 60 Hz for %.0f s per cell, in chunks of %.0f s "
		       "interleaved; lateness of every tick (us)\n"
		       "cell          ticks/due  skipped  early      p50      "
		       "p99      max  cpu%%/core  sleeps  spins\n",
		       opt_tick_s, opt_chunk_s);
	for (int k = 0; k < NTICK; k++) {
		const struct tick_cell *c = &res5[k];
		double cpu = c->wall_ns > 0 ? 100 * c->cpu_ns / c->wall_ns : 0;

		if (!c->chunks)
			continue;
		if (opts.json) {
			bench_json_begin("timerbench");
			bench_json_str("cell", "tick");
			bench_json_str("impl", tick_names[k]);
			bench_json_num("seconds", c->wall_ns / 1e9);
			bench_json_int("chunks", (long long)c->chunks);
			bench_json_int("ticks", (long long)c->ticks);
			bench_json_int("due", (long long)c->expected);
			bench_json_int("skipped", (long long)c->skipped);
			bench_json_int("early", (long long)c->early);
			bench_json_num("late_p50_ns", c->tick_p50);
			bench_json_num("late_p99_ns", c->tick_p99);
			bench_json_num("late_max_ns", c->tick_max);
			bench_json_num("cpu_pct_core", cpu);
			if (k != K_FLOOR) {
				bench_json_int("sleeps", (long long)c->sleeps);
				bench_json_int("spins", (long long)c->spins);
			}
			bench_json_end();
			continue;
		}
		printf("%-12s %5llu/%-5llu %7llu %6llu %8.1f %8.1f %8.1f "
		       "%9.2f",
		       tick_names[k], (unsigned long long)c->ticks,
		       (unsigned long long)c->expected,
		       (unsigned long long)c->skipped,
		       (unsigned long long)c->early, c->tick_p50 / 1e3,
		       c->tick_p99 / 1e3, c->tick_max / 1e3, cpu);
		if (k != K_FLOOR)
			printf(" %7llu %6llu", (unsigned long long)c->sleeps,
			       (unsigned long long)c->spins);
		putchar('\n');
	}
}

/* ------------------------------------------------------------------------
 * idle: 100k timers pending over an hour
 */

static struct {
	bool ran;
	double seconds, cpu_s;
	uint64_t fired, polls, sleeps;
} res6;

static void part_six(void)
{
	struct service s;
	struct ao_timer *t;
	struct ao_timers_stats a, b;
	uint64_t seed = 0xbb67ae8584caa73bull, now, c0, f0;

	if (!bench_selected(&opts, "idle/aorta"))
		return;
	t = xcalloc(IDLE_TIMERS, sizeof(*t));
	slots_reset(IDLE_TIMERS);
	service_start(&s);
	now = bench_now_ns();
	for (int i = 0; i < IDLE_TIMERS; i++) {
		int err = ao_timer_init(&t[i], s.ts, count_fn);

		if (!err)
			err = ao_timer_arm_at(&t[i],
					      now + rnd(&seed) % IDLE_SPAN_NS);
		if (err)
			die("ao_timer_arm_at", -err);
	}
	sleep_ns(200 * MSEC);
	a = stats_of(s.ts);
	f0 = slots_sum();
	c0 = bench_proc_cpu_ns();
	sleep_ns((uint64_t)(opt_idle_s * 1e9));
	res6.cpu_s = (double)(bench_proc_cpu_ns() - c0) / 1e9;
	b = stats_of(s.ts);
	res6.fired = slots_sum() - f0;
	res6.polls = b.polls - a.polls;
	res6.sleeps = b.sleeps - a.sleeps;
	res6.seconds = opt_idle_s;
	res6.ran = true;
	service_stop(&s);
	slots_reset(0);
	free(t);
}

static void report_six(void)
{
	if (!res6.ran)
		return;
	if (opts.json) {
		bench_json_begin("timerbench");
		bench_json_str("cell", "idle");
		bench_json_str("impl", "aorta");
		bench_json_int("timers", IDLE_TIMERS);
		bench_json_num("seconds", res6.seconds);
		bench_json_num("cpu_s", res6.cpu_s);
		bench_json_int("fired", (long long)res6.fired);
		bench_json_int("polls", (long long)res6.polls);
		bench_json_int("sleeps", (long long)res6.sleeps);
		bench_json_end();
		return;
	}
	printf("\nidle: %d timers pending, due over an hour, %.1f s: %.4f "
	       "CPU-s; %llu fired, %llu polls, %llu sleeps\n",
	       IDLE_TIMERS, res6.seconds, res6.cpu_s,
	       (unsigned long long)res6.fired, (unsigned long long)res6.polls,
	       (unsigned long long)res6.sleeps);
}

/* ------------------------------------------------------------------------
 * Targets
 */

static void targets(void)
{
	char name[64], sz[16];
	double lo = 0, hi = 0;
	int have = 0;

	if (!opts.json)
		printf("\nTargets, against this run's baselines:\n");
	for (int si = 0; si < NSIZES; si++) {
		double a = med1(OP_HOT, si, I_AORTA);

		if (!res1[OP_HOT][si][I_AORTA].n)
			continue;
		snprintf(name, sizeof(name), "hot/aorta/%s <= 20 ns",
			 size_name(sizes[si], sz, sizeof(sz)));
		bench_goal(&run, name, a <= 20, a, 20, "%.1f ns per pair", a);
		lo = have ? (a < lo ? a : lo) : a;
		hi = have ? (a > hi ? a : hi) : a;
		have++;
	}
	if (have == NSIZES)
		bench_goal(&run, "hot/aorta flat 0..1M <= 1.5x", hi <= 1.5 * lo,
			   hi / lo, 1.5, "%.2fx (%.1f..%.1f ns)", hi / lo, lo,
			   hi);
	if (res1[OP_REARM][2][I_AORTA].n) {
		double a = med1(OP_REARM, 2, I_AORTA);
		double h = med1(OP_REARM, 2, I_HEAP);

		bench_goal(&run, "rearm/aorta/1M <= 150 ns", a <= 150, a, 150,
			   "%.1f ns per move", a);
		double hp = med1(OP_REARM, 2, I_PHEAP);

		/* The target's anchor is libuv's heap (887 ns): heap-ptr
		 * has its shape; heap, an array that keeps the deadlines
		 * together, is faster than the anchor, and is shown too. */
		if (hp > 0)
			bench_goal(&run, "rearm/aorta/1M <= 0.5x heap-ptr",
				   a <= 0.5 * hp, a / hp, 0.5,
				   "%.2fx (heap-ptr, libuv's shape, "
				   "%.1f ns)",
				   a / hp, hp);
		if (h > 0)
			bench_goal(&run, "rearm/aorta/1M <= 0.5x heap",
				   a <= 0.5 * h, a / h, 0.5,
				   "%.2fx (heap, an indexed array, "
				   "%.1f ns)",
				   a / h, h);
	}
	if (res2[TI_AORTA][1].n) {
		double x = med2(TI_AORTA, 2);

		bench_goal(&run, "threads/aorta/t2 >= 10M pairs/s", x >= 1e7, x,
			   1e7,
			   "%.2f M pairs/s (one thread %.2f, heap-lock %.2f)",
			   x / 1e6, med2(TI_AORTA, 1) / 1e6,
			   med2(TI_HEAP_LOCK, 2) / 1e6);
	}
	for (int i = 0; i < NEXP; i++) {
		const struct expiry_result *r = &res3[i];

		if (!r->ran || i == E_HEAP_LOOP)
			continue;
		snprintf(name, sizeof(name), "%s: all fire", exp_names[i]);
		bench_goal(&run, name, r->fired == r->timers, (double)r->fired,
			   (double)r->timers, "%llu of %llu (%.0f ns CPU each)",
			   (unsigned long long)r->fired,
			   (unsigned long long)r->timers, r->cpu_ns_per_fired);
	}
	if (res3[E_BOUNDED].ran) {
		double us = (double)res3[E_BOUNDED].st.step_max_ns / 1e3;

		bench_goal(&run, "bounded/aorta step <= 200 us", us <= 200, us,
			   200, "longest expiry step %.1f us (%.0f s spread)",
			   us, res3[E_BOUNDED].spread_s);
	}
	if (res3[E_VIRTUAL].ran) {
		const struct expiry_result *r = &res3[E_VIRTUAL];
		double us = r->burst_ns / 1e3;

		/*
		 * CPU, not wall time: the cell has one thread and nothing
		 * to wait for, so a step's wall time beyond its CPU is
		 * this thread preempted by other processes.  The burst
		 * bounds every step, as it is all the steps of one advance.
		 */
		bench_goal(&run, "bounded/testclock CPU <= 200 us", us <= 200,
			   us, 200,
			   "the expiry work due within %llu us of timer time "
			   "took up to %.1f us CPU (at %.2f s)",
			   VIRT_STEP_NS / USEC, us, r->burst_at_s);
		if (!opts.json)
			printf("  (note) bounded/testclock: longest step %.1f "
			       "us of wall time, preemption included\n",
			       (double)r->st.step_max_ns / 1e3);
	}
	if (res5[K_IDLE].chunks) {
		const struct tick_cell *c = &res5[K_IDLE];
		long d = (long)c->ticks - (long)c->expected;

		if (res5[K_FLOOR].chunks) {
			double f = res5[K_FLOOR].tick_p99;

			bench_goal(&run, "tick/idle p99 <= floor + 50 us",
				   c->tick_p99 <= f + 50e3, c->tick_p99 / 1e3,
				   (f + 50e3) / 1e3, "%.1f us (floor %.1f us)",
				   c->tick_p99 / 1e3, f / 1e3);
		}
		bench_goal(&run, "tick/idle ticks exact (+-1)",
			   d >= -1 && d <= 1, (double)c->ticks,
			   (double)c->expected,
			   "%llu of %llu due, %llu skipped",
			   (unsigned long long)c->ticks,
			   (unsigned long long)c->expected,
			   (unsigned long long)c->skipped);
	}
	if (res5[K_PRECISE].chunks) {
		const struct tick_cell *c = &res5[K_PRECISE];
		double cpu = 100 * c->cpu_ns / c->wall_ns;

		bench_goal(&run, "tick/precise p99 <= 100 us",
			   c->tick_p99 <= 100e3, c->tick_p99 / 1e3, 100,
			   "%.1f us", c->tick_p99 / 1e3);
		bench_goal(&run, "tick/precise CPU <= 2% core", cpu <= 2, cpu,
			   2, "%.2f%% of one core", cpu);
	}
	for (int k = K_BUSY; k <= K_BUSY_STRAND; k++) {
		const struct tick_cell *c = &res5[k];

		if (!c->chunks)
			continue;
		snprintf(name, sizeof(name), "tick/%s p99 <= 300 us",
			 tick_names[k]);
		bench_goal(&run, name, c->tick_p99 <= 300e3, c->tick_p99 / 1e3,
			   300, "%.1f us (%llu of %llu ticks, %llu skipped)",
			   c->tick_p99 / 1e3, (unsigned long long)c->ticks,
			   (unsigned long long)c->expected,
			   (unsigned long long)c->skipped);
	}
	for (int k = 0; k < NTICK; k++)
		if (res5[k].early) {
			snprintf(name, sizeof(name), "tick/%s never early",
				 tick_names[k]);
			bench_goal(&run, name, false, (double)res5[k].early, 0,
				   "%llu ticks ran before their deadline",
				   (unsigned long long)res5[k].early);
		}
	if (res6.ran)
		bench_goal(&run, "idle/aorta < 0.01 CPU-s", res6.cpu_s < 0.01,
			   res6.cpu_s, 0.01, "%.4f CPU-s in %.1f s", res6.cpu_s,
			   res6.seconds);
	if (atomic_load(&stray_fires))
		bench_goal(&run, "no stray fires", false,
			   (double)atomic_load(&stray_fires), 0,
			   "%lu timers due a minute ahead fired",
			   atomic_load(&stray_fires));
}

/* ------------------------------------------------------------------------
 * --check: the baselines against each other
 */

static int check_baselines(void)
{
	enum { N = 500 };
	static struct tm_heap_node hn[N];
	static struct tm_rb_node rn[N];
	struct tm_heap h;
	struct tm_rbtree t;
	uint64_t s = 42;

	if (tm_heap_init(&h, 4))
		return -1;
	tm_rbtree_init(&t);
	for (int i = 0; i < N; i++) {
		tm_heap_node_init(&hn[i]);
		tm_rb_node_init(&rn[i]);
	}
	for (long k = 0; k < 1000000; k++) {
		uint64_t r = rnd(&s), d = (r >> 40) % 5000;
		uint32_t i = rnd_below(r, N);
		unsigned int op = (unsigned int)(r >> 20) % 8;

		if (op < 4) {
			tm_heap_arm(&h, &hn[i], d);
			tm_rbtree_arm(&t, &rn[i], d);
		} else if (op < 6) {
			if (tm_heap_cancel(&h, &hn[i]) !=
			    tm_rbtree_cancel(&t, &rn[i]))
				return -1;
		} else {
			for (;;) {
				struct tm_heap_node *a = tm_heap_pop_due(&h, d);
				struct tm_rb_node *b = tm_rbtree_pop_due(&t, d);

				if (!a != !b || (a && a - hn != b - rn))
					return -1;
				if (!a)
					break;
			}
		}
		if (h.n != t.n ||
		    (!(k % 4096) && (tm_heap_check(&h) || tm_rbtree_check(&t))))
			return -1;
	}
	tm_heap_destroy(&h);
	return 0;
}

/* ------------------------------------------------------------------------
 * --pairs: the callgrind mode
 */

static int run_pairs(void)
{
	struct service s = { NULL, NULL };
	struct timers t;
	enum impl impl = NIMPL;
	enum op op = strcmp(opt_op, "rearm") ? OP_HOT : OP_REARM;
	bool delay = !strcmp(opt_impl, "aorta-delay");
	uint64_t t0;
	long left = opt_pairs;

	for (int i = 0; i < NIMPL; i++)
		if (!strcmp(opt_impl, impl_names[i]))
			impl = i;
	if (delay)
		impl = I_AORTA;
	if (impl == NIMPL || (op == OP_REARM && !opt_pending)) {
		fprintf(stderr, "timerbench: bad --impl/--op/--pending\n");
		return 2;
	}
	if (delay)
		op = OP_HOT_DELAY;
	if (impl == I_AORTA)
		service_start(&s);
	raise_fd_limit((uint32_t)opt_pending);
	timers_setup(&t, impl, (uint32_t)opt_pending, s.ts);
	t0 = bench_now_ns();
	while (left > 0) {
		long n = left < CHUNK ? left : CHUNK;

		run_chunk(&t, op, bench_now_ns(), n);
		left -= n;
	}
	t0 = bench_now_ns() - t0;
	printf("%s %s, %ld pending: %ld pairs, %.2f ns each\n", opt_impl,
	       op_names[op], opt_pending, opt_pairs,
	       opt_pairs ? (double)t0 / (double)opt_pairs : 0.0);
	timers_teardown(&t);
	if (s.ts)
		service_stop(&s);
	return t.errors ? 1 : 0;
}

/* ------------------------------------------------------------------------
 * Options and main
 */

static bool parse_extra(const char *a)
{
	if (!strncmp(a, "--expiry-seconds=", 17))
		opt_expiry_s = atof(a + 17);
	else if (!strncmp(a, "--tick-seconds=", 15))
		opt_tick_s = atof(a + 15);
	else if (!strncmp(a, "--tick-chunk=", 13))
		opt_chunk_s = atof(a + 13);
	else if (!strncmp(a, "--idle=", 7))
		opt_idle_s = atof(a + 7);
	else if (!strcmp(a, "--exec=shared"))
		opt_kind = AO_EXEC_SHARED;
	else if (!strcmp(a, "--exec=steal"))
		opt_kind = AO_EXEC_STEAL;
	else if (!strcmp(a, "--check"))
		opt_check = true;
	else if (!strncmp(a, "--pairs=", 8))
		return (opt_pairs = atol(a + 8)) >= 0;
	else if (!strncmp(a, "--pending=", 10))
		return (opt_pending = atol(a + 10)) >= 0 &&
		       opt_pending < 0x7fffffff;
	else if (!strncmp(a, "--impl=", 7))
		opt_impl = a + 7;
	else if (!strncmp(a, "--op=", 5))
		opt_op = a + 5;
	else
		return false;
	return true;
}

static const char extra_usage[] =
	"  --expiry-seconds=S  bounded/: 1M timers due over S s (60; quick "
	"10)\n"
	"  --tick-seconds=S    each tick/ cell's length (60; quick 5)\n"
	"  --tick-chunk=S      tick/ cells interleave in chunks of S s (5)\n"
	"  --idle=S            idle/: measure for S s (2)\n"
	"  --exec=shared|steal the executors' queue discipline (shared)\n"
	"  --check             check the baselines against each other first\n"
	"  --pairs=N           only N pairs of --impl (callgrind mode)\n"
	"  --impl=I            aorta, aorta-delay, heap, rbtree, timerfd, "
	"none\n"
	"  --pending=P         others pending in --pairs mode (0)\n"
	"  --op=hot|rearm      what --pairs does (hot)";

int main(int argc, char **argv)
{
	struct service s = { NULL, NULL };
	bool quick = false, expiry_set = false, tick_set = false;

	bench_begin(&run);
	for (int i = 1; i < argc; i++) {
		quick |= !strcmp(argv[i], "--quick");
		expiry_set |= !strncmp(argv[i], "--expiry-seconds=", 17);
		tick_set |= !strncmp(argv[i], "--tick-seconds=", 15);
	}
	bench_parse(argc, argv, &opts, quick ? 0.05 : 0.25, quick ? 1 : 3,
		    extra_usage, parse_extra);
	if (opts.quick) {
		expiry_s = 2;
		if (!expiry_set)
			opt_expiry_s = 10;
		if (!tick_set)
			opt_tick_s = 5;
	}
	if (opts.runs > MAXRUNS || opt_expiry_s <= 0 || opt_tick_s <= 0 ||
	    opt_chunk_s <= 0 || opt_idle_s <= 0) {
		fprintf(stderr, "timerbench: --runs <= %d, seconds > 0\n",
			MAXRUNS);
		return 2;
	}
	run.json = opts.json;
	hot_plan();
	if (opt_pairs >= 0)
		return run_pairs();
	if (opt_check || opts.quick) {
		if (check_baselines()) {
			fputs("timerbench: the heap and the rbtree disagree\n",
			      stderr);
			return 1;
		}
	}
	raise_fd_limit(sizes[1] + 1);
	if (!opts.json)
		printf("timerbench: %ld CPUs, %u workers (%s), %.2f s per "
		       "cell, %d run%s (medians); load average %.2f\n",
		       sysconf(_SC_NPROCESSORS_ONLN), nworkers,
		       opt_kind == AO_EXEC_STEAL ? "steal" : "shared",
		       opts.seconds, opts.runs, opts.runs > 1 ? "s" : "",
		       run.load0);

	service_start(&s);
	part_one(s.ts);
	part_two(s.ts);
	service_stop(&s);
	report_one();
	report_two();
	fflush(stdout);
	part_three();
	report_three();
	fflush(stdout);
	part_six();
	report_six();
	fflush(stdout);
	part_five();
	report_five();
	targets();
	bench_end(&run, NULL, 0);
	return 0;
}
