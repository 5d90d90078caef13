// SPDX-License-Identifier: MIT
/*
 * lockbench: aorta's three-phase lock against the seed's lock (the 2006
 * MMORPG server's spin 4000 / yield 4000 / usleep(1000) lock), glibc's
 * mutex (default and adaptive) and pthread_spinlock, in one run.
 *
 * Contended cells, two scenarios: T threads (the machine may have fewer
 * cores, which is the point) loop { lock; critical section; unlock; work
 * between }, for --seconds.
 *  - even: 1, 2, 4, 8, 16 threads; the critical section bumps a shared
 *    counter and spins for 50 ns or 1 us, and as much work follows it
 *    (--work scales it): the lock is free about half the time;
 *  - short: 4, 8, 16 threads; the critical section writes 8 shared cache
 *    lines, then spins for 50 ns or 1 us, and 100-200 ns of work (drawn at
 *    random each time) follow it: threads come back before the section
 *    could have ended, so the lock is almost never free.  One thread
 *    alone runs the same loop first: the one-thread limit, the rate of a
 *    lock that one thread circulates with everything in its cache.  The
 *    targets say where each lock stands against it: a lock above it
 *    overlaps one thread's work with another's section.
 *
 * Each acquisition is timed with the cycle counter (lock call to lock
 * return), into a per-thread log-linear histogram and a running
 * maximum, so the worst wait is never missed.  Per cell: acquisitions/s,
 * process CPU seconds per million acquisitions, fairness (min/max
 * per-thread acquisitions), p99 and max acquire latency, and for aorta
 * the phase histogram from ao_spin_stats().  Each cell is run --runs
 * times, the locks interleaved, and medians are reported.  Cells last 2 s
 * by default: fairness is the min / max of 16 per-thread counts, and in
 * 1 s each of 16 threads on 2 CPUs gets only some 40 scheduler slices, so
 * slice noise alone pulls the ratio to 0.6-0.7 for pthread_mutex itself
 * (measured here: 0.60-0.70 in 1 s cells, 0.80-0.84 in 4 s ones).
 *
 * Handoff cells: the main thread holds the lock for 0.1 ms or 20 ms while
 * one waiter waits; the delay from the unlock to the waiter's acquisition
 * and the waiter's own CPU time (CLOCK_THREAD_CPUTIME_ID) during the wait,
 * median over the repetitions (200 and 50), the locks interleaved rep by
 * rep, holder and waiter pinned to two different CPUs.
 *
 * --pairs=N --lock=L: only N uncontended lock+unlock pairs in a noinline
 * function (pairs_L), for counting instructions under callgrind
 * (tools/bench/lockbench-insns.sh).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/compiler.h>
#include <aorta/sync/spinlock.h>
#include "baseline/seed_lock.h"
#include "bench.h"

enum lock_kind {
	L_AORTA,
	L_SEED,
	L_MUTEX,
	L_ADAPTIVE,
	L_PSPIN,
	L_UNPARKED, /* aorta without concurrency restriction; only if listed */
	L_NR
};

static const char *const lock_names[L_NR] = {
	[L_AORTA] = "aorta",	    [L_SEED] = "seed",
	[L_MUTEX] = "mutex",	    [L_ADAPTIVE] = "mutex-adaptive",
	[L_PSPIN] = "pthread-spin", [L_UNPARKED] = "aorta-unparked",
};

static struct ao_spin_tune opt_tune;
static bool opt_have_tune;
static double opt_noise = 0.1; /* --noise: a cell is disturbed above this */
static int opt_retries = 2; /* --retries: re-runs of a disturbed cell */
static int noisy_cells, retried_cells;

union any_lock {
	struct ao_spinlock ao;
	struct seed_lock seed;
	pthread_mutex_t mx;
	pthread_spinlock_t sp;
};

/* Shared cache lines a critical section of the short scenario writes. */
#define SHORT_LINES 8

/* The lock on its own line, the data it protects on the next ones. */
struct shared {
	union any_lock lock __ao_cacheline_aligned;
	uint64_t counter __ao_cacheline_aligned;
	uint64_t checksum;
	/* Each on a line of its own (the attribute on the element type:
	 * on the array it aligned only the first, and the seven shared one
	 * line). */
	struct {
		uint64_t v;
	} __ao_cacheline_aligned line[SHORT_LINES - 1];
};

static void lock_init(int kind, union any_lock *l)
{
	pthread_mutexattr_t a;

	memset(l, 0, sizeof(*l));
	switch (kind) {
	case L_AORTA:
	case L_UNPARKED:
		ao_spin_init(&l->ao);
		if (opt_have_tune && ao_spin_set_tune(&l->ao, &opt_tune)) {
			fprintf(stderr, "lockbench: bad --tune\n");
			exit(2);
		}
		if (kind == L_UNPARKED) {
			struct ao_spin_tune t;

			ao_spin_get_tune(&l->ao, &t);
			t.park = AO_SPIN_PARK_NEVER;
			ao_spin_set_tune(&l->ao, &t);
		}
		break;
	case L_SEED:
		seed_lock_init(&l->seed);
		break;
	case L_MUTEX:
		pthread_mutex_init(&l->mx, NULL);
		break;
	case L_ADAPTIVE:
		pthread_mutexattr_init(&a);
		pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
		pthread_mutex_init(&l->mx, &a);
		pthread_mutexattr_destroy(&a);
		break;
	case L_PSPIN:
		pthread_spin_init(&l->sp, PTHREAD_PROCESS_PRIVATE);
		break;
	}
}

static void lock_destroy(int kind, union any_lock *l)
{
	if (kind == L_MUTEX || kind == L_ADAPTIVE)
		pthread_mutex_destroy(&l->mx);
	else if (kind == L_PSPIN)
		pthread_spin_destroy(&l->sp);
}

/* Inlined with a constant kind, so each worker gets its lock's fast path
 * exactly as a user of that lock would. */
static __ao_always_inline void do_lock(int kind, union any_lock *l)
{
	switch (kind) {
	case L_AORTA:
	case L_UNPARKED:
		ao_spin_lock(&l->ao);
		break;
	case L_SEED:
		seed_lock_acquire(&l->seed);
		break;
	case L_MUTEX:
	case L_ADAPTIVE:
		pthread_mutex_lock(&l->mx);
		break;
	case L_PSPIN:
		pthread_spin_lock(&l->sp);
		break;
	}
}

static __ao_always_inline void do_unlock(int kind, union any_lock *l)
{
	switch (kind) {
	case L_AORTA:
	case L_UNPARKED:
		ao_spin_unlock(&l->ao);
		break;
	case L_SEED:
		seed_lock_release(&l->seed);
		break;
	case L_MUTEX:
	case L_ADAPTIVE:
		pthread_mutex_unlock(&l->mx);
		break;
	case L_PSPIN:
		pthread_spin_unlock(&l->sp);
		break;
	}
}

/* ---- latency histogram: 16 linear sub-buckets per power of two ---- */

#define HIST_SUB_BITS 4
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS (64 * HIST_SUB)

static inline unsigned int hist_index(uint64_t v)
{
	unsigned int e;

	if (v < HIST_SUB)
		return (unsigned int)v;
	e = 63u - (unsigned int)__builtin_clzll(v);
	return (e - HIST_SUB_BITS + 1) * HIST_SUB +
	       (unsigned int)((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

/* The middle of bucket i, in the histogram's unit. */
static double hist_value(unsigned int i)
{
	unsigned int e, sub;
	double lo, width;

	if (i < HIST_SUB)
		return i;
	e = i / HIST_SUB + HIST_SUB_BITS - 1;
	sub = i % HIST_SUB;
	width = ldexp(1.0, (int)(e - HIST_SUB_BITS));
	lo = ldexp(1.0, (int)e) + sub * width;
	return lo + width / 2;
}

/* ---- contended cells ---- */

struct worker {
	struct shared *sh;
	pthread_barrier_t *start;
	const int *stop;
	uint64_t cs_ns, work_ns;
	uint32_t work_span; /* work is work_ns + [0, work_span] ns, at random */
	uint32_t lines; /* extra shared lines the section writes */
	uint64_t rnd; /* xorshift64 state */
	uint64_t count;
	uint64_t max_cyc;
	uint64_t cpu_ns; /* this thread's CPU time in the cell */
	uint32_t hist[HIST_BUCKETS];
} __ao_cacheline_aligned;

static __ao_always_inline void worker_body(int kind, struct worker *w)
{
	union any_lock *l = &w->sh->lock;
	uint64_t n = 0, max = 0, cpu0, work;

	pthread_barrier_wait(w->start);
	cpu0 = bench_thread_cpu_ns();
	while (!__atomic_load_n(w->stop, __ATOMIC_RELAXED)) {
		uint64_t t0 = ao_cycles(), d;

		do_lock(kind, l);
		d = ao_cycles() - t0;
		/* The critical section: shared data, then its length. */
		w->sh->counter++;
		w->sh->checksum += n;
		for (uint32_t i = 0; i < w->lines; i++)
			w->sh->line[i].v += n;
		bench_spin_ns(w->cs_ns);
		do_unlock(kind, l);
		w->hist[hist_index(d)]++;
		if (d > max)
			max = d;
		n++;
		work = w->work_ns;
		if (w->work_span) {
			w->rnd ^= w->rnd << 13;
			w->rnd ^= w->rnd >> 7;
			w->rnd ^= w->rnd << 17;
			work += w->rnd % (w->work_span + 1);
		}
		bench_spin_ns(work);
	}
	w->count = n;
	w->max_cyc = max;
	w->cpu_ns = bench_thread_cpu_ns() - cpu0;
}

#define DEFINE_WORKER(name, kind)             \
	static void *worker_##name(void *arg) \
	{                                     \
		worker_body(kind, arg);       \
		return NULL;                  \
	}
DEFINE_WORKER(aorta, L_AORTA)
DEFINE_WORKER(seed, L_SEED)
DEFINE_WORKER(mutex, L_MUTEX)
DEFINE_WORKER(adaptive, L_ADAPTIVE)
DEFINE_WORKER(pspin, L_PSPIN)
DEFINE_WORKER(unparked, L_UNPARKED)

static void *(*const worker_fn[L_NR])(void *) = {
	[L_AORTA] = worker_aorta, [L_SEED] = worker_seed,
	[L_MUTEX] = worker_mutex, [L_ADAPTIVE] = worker_adaptive,
	[L_PSPIN] = worker_pspin, [L_UNPARKED] = worker_unparked,
};

struct cell {
	double acq_per_s;
	double cpu_s_per_m; /* process CPU seconds per million acquisitions */
	double fairness; /* min / max per-thread acquisitions */
	/* Where unfairness comes from: the scheduler (min / max per-thread
	 * CPU time) or the lock (min / max acquisitions per CPU second). */
	double cpu_fair, lock_fair;
	double p99_ns, max_ns;
	/* CPUs other processes took meanwhile (/proc/stat busy time less
	 * this process's CPU time, over the cell's length): noise. */
	double others;
	/* Throughput against mutex and seed: the median of the ratios of
	 * runs made side by side, which cancels the machine's drift. */
	double vs_mutex, vs_seed;
	struct ao_spin_stats st; /* aorta only */
	bool have_st;
};

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u),
			       (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* What each thread of a contended cell does. */
struct load {
	uint64_t cs_ns; /* critical section, after its writes */
	uint64_t work_ns; /* work between acquisitions, at least */
	uint32_t work_span; /* plus up to this much, at random */
	uint32_t lines; /* shared lines written besides the counter's */
};

static void run_cell(int kind, int threads, const struct load *ld,
		     double seconds, struct cell *c)
{
	struct shared *sh = aligned_alloc(AO_CACHELINE_SIZE, sizeof(*sh));
	struct worker *w =
		aligned_alloc(AO_CACHELINE_SIZE, sizeof(*w) * (size_t)threads);
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	static uint32_t hist[HIST_BUCKETS];
	pthread_barrier_t start;
	int stop = 0;
	uint64_t t0, t1, cpu0, cpu1, total = 0, mn = UINT64_MAX, mx = 0;
	double busy0, busy1;
	uint64_t max_cyc = 0, seen = 0, rank;
	double cmn = 1e30, cmx = 0, rmn = 1e30, rmx = 0;

	if (!sh || !w || !tid) {
		perror("lockbench");
		exit(1);
	}
	memset(sh, 0, sizeof(*sh));
	memset(w, 0, sizeof(*w) * (size_t)threads);
	lock_init(kind, &sh->lock);
	pthread_barrier_init(&start, NULL, (unsigned int)threads + 1);
	for (int i = 0; i < threads; i++) {
		w[i].sh = sh;
		w[i].start = &start;
		w[i].stop = &stop;
		w[i].cs_ns = ld->cs_ns;
		w[i].work_ns = ld->work_ns;
		w[i].work_span = ld->work_span;
		w[i].lines = ld->lines;
		w[i].rnd = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
		if (pthread_create(&tid[i], NULL, worker_fn[kind], &w[i])) {
			perror("pthread_create");
			exit(1);
		}
	}
	pthread_barrier_wait(&start);
	t0 = bench_now_ns();
	cpu0 = bench_proc_cpu_ns();
	busy0 = bench_busy_cpu_s();
	sleep_ns((uint64_t)(seconds * 1e9));
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	t1 = bench_now_ns();
	cpu1 = bench_proc_cpu_ns();
	busy1 = bench_busy_cpu_s();
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);

	memset(hist, 0, sizeof(hist));
	for (int i = 0; i < threads; i++) {
		total += w[i].count;
		mn = w[i].count < mn ? w[i].count : mn;
		mx = w[i].count > mx ? w[i].count : mx;
		if (w[i].max_cyc > max_cyc)
			max_cyc = w[i].max_cyc;
		cmn = fmin(cmn, (double)w[i].cpu_ns);
		cmx = fmax(cmx, (double)w[i].cpu_ns);
		if (w[i].cpu_ns) {
			double r = (double)w[i].count / (double)w[i].cpu_ns;

			rmn = fmin(rmn, r);
			rmx = fmax(rmx, r);
		}
		for (unsigned int b = 0; b < HIST_BUCKETS; b++)
			hist[b] += w[i].hist[b];
	}
	if (sh->counter != total) {
		fprintf(stderr, "lockbench: %s lost updates: %llu != %llu\n",
			lock_names[kind], (unsigned long long)sh->counter,
			(unsigned long long)total);
		exit(1);
	}
	memset(c, 0, sizeof(*c));
	c->acq_per_s = (double)total * 1e9 / (double)(t1 - t0);
	c->cpu_s_per_m =
		total ? (double)(cpu1 - cpu0) / 1e9 / ((double)total / 1e6) : 0;
	c->fairness = mx ? (double)mn / (double)mx : 0;
	c->cpu_fair = cmx > 0 ? cmn / cmx : 0;
	c->lock_fair = rmx > 0 ? rmn / rmx : 0;
	rank = (uint64_t)ceil((double)total * 0.99);
	for (unsigned int b = 0; b < HIST_BUCKETS; b++) {
		seen += hist[b];
		if (seen >= rank && total) {
			c->p99_ns = (double)ao_cycles_to_ns(
				(uint64_t)hist_value(b));
			break;
		}
	}
	c->max_ns = (double)ao_cycles_to_ns(max_cyc);
	if (busy0 >= 0 && busy1 >= 0)
		c->others = fmax(
			0, ((busy1 - busy0) - (double)(cpu1 - cpu0) / 1e9) /
				   ((double)(t1 - t0) / 1e9));
	if ((kind == L_AORTA || kind == L_UNPARKED) &&
	    !ao_spin_stats(&sh->lock.ao, &c->st))
		c->have_st = true;
	lock_destroy(kind, &sh->lock);
	pthread_barrier_destroy(&start);
	free(tid);
	free(w);
	free(sh);
}

/*
 * One run of a cell.  A run during which other processes took more than
 * --noise CPUs is repeated, up to --retries times, and the least disturbed
 * one kept: on a shared 2-CPU machine a neighbour's build takes a CPU from
 * the lock's threads, which changes who holds the lock and who waits, so
 * such a run measures the neighbour as much as the lock.
 */
static void run_cell_quiet(int kind, int threads, const struct load *ld,
			   double seconds, struct cell *c)
{
	struct cell again;

	run_cell(kind, threads, ld, seconds, c);
	for (int attempt = 1; c->others > opt_noise && attempt <= opt_retries;
	     attempt++) {
		retried_cells++;
		run_cell(kind, threads, ld, seconds, &again);
		if (again.others < c->others)
			*c = again;
	}
	if (c->others > opt_noise)
		noisy_cells++;
}

/* ---- handoff cells ---- */

struct handoff {
	union any_lock *lock;
	int kind;
	int started;
	uint64_t t_acq, cpu_ns;
};

static __ao_always_inline void waiter_body(int kind, struct handoff *h)
{
	uint64_t c0;

	/* The other CPU than the holder's (pinned in handoff_all()). */
	bench_pin(1);
	c0 = bench_thread_cpu_ns();
	__atomic_store_n(&h->started, 1, __ATOMIC_RELEASE);
	do_lock(kind, h->lock);
	h->t_acq = bench_now_ns();
	h->cpu_ns = bench_thread_cpu_ns() - c0;
	do_unlock(kind, h->lock);
}

#define DEFINE_WAITER(name, kind)             \
	static void *waiter_##name(void *arg) \
	{                                     \
		waiter_body(kind, arg);       \
		return NULL;                  \
	}
DEFINE_WAITER(aorta, L_AORTA)
DEFINE_WAITER(seed, L_SEED)
DEFINE_WAITER(mutex, L_MUTEX)
DEFINE_WAITER(adaptive, L_ADAPTIVE)
DEFINE_WAITER(pspin, L_PSPIN)
DEFINE_WAITER(unparked, L_UNPARKED)

static void *(*const waiter_fn[L_NR])(void *) = {
	[L_AORTA] = waiter_aorta, [L_SEED] = waiter_seed,
	[L_MUTEX] = waiter_mutex, [L_ADAPTIVE] = waiter_adaptive,
	[L_PSPIN] = waiter_pspin, [L_UNPARKED] = waiter_unparked,
};

struct hcell {
	double delay_p50_ns, delay_max_ns;
	double cpu_p50_ns, cpu_max_ns;
};

/*
 * The holder (this thread) takes the lock, starts a waiter, lets it reach
 * the lock, holds for hold_ns more (asleep, so the waiter has a CPU) and
 * unlocks.  Delay: unlock call to the waiter's acquisition.
 */
static void handoff_once(int kind, union any_lock *l, uint64_t hold_ns,
			 double *delay, double *cpu)
{
	struct handoff h = { .lock = l, .kind = kind };
	pthread_t t;
	uint64_t t_unlock;

	do_lock(kind, l);
	if (pthread_create(&t, NULL, waiter_fn[kind], &h)) {
		perror("pthread_create");
		exit(1);
	}
	while (!__atomic_load_n(&h.started, __ATOMIC_ACQUIRE))
		sched_yield();
	sleep_ns(hold_ns);
	t_unlock = bench_now_ns();
	do_unlock(kind, l);
	pthread_join(t, NULL);
	*delay = (double)(h.t_acq - t_unlock);
	*cpu = (double)h.cpu_ns;
}

/*
 * Every selected lock, reps times, the locks interleaved rep by rep (a
 * wake-up costs 2 to 5 us here depending on what the machine does
 * meanwhile, so locks measured one block after the other differ by the
 * moment more than by the lock), holder on the first CPU and waiter on
 * the second, the same for every lock.
 */
static void handoff_all(const bool *sel, uint64_t hold_ns, int reps,
			struct hcell *cells)
{
	union any_lock *l[L_NR];
	double *delay[L_NR], *cpu[L_NR];
	cpu_set_t saved;
	bool restore = !sched_getaffinity(0, sizeof(saved), &saved);

	bench_pin(0);
	for (int k = 0; k < L_NR; k++) {
		if (!sel[k])
			continue;
		l[k] = aligned_alloc(AO_CACHELINE_SIZE, sizeof(*l[k]));
		delay[k] = calloc((size_t)reps, sizeof(double));
		cpu[k] = calloc((size_t)reps, sizeof(double));
		if (!l[k] || !delay[k] || !cpu[k]) {
			perror("lockbench");
			exit(1);
		}
		lock_init(k, l[k]);
	}
	for (int r = 0; r < reps; r++)
		for (int k = 0; k < L_NR; k++)
			if (sel[k])
				handoff_once(k, l[k], hold_ns, &delay[k][r],
					     &cpu[k][r]);
	for (int k = 0; k < L_NR; k++) {
		struct hcell *c = &cells[k];

		if (!sel[k])
			continue;
		bench_sort_double(delay[k], (size_t)reps);
		bench_sort_double(cpu[k], (size_t)reps);
		c->delay_p50_ns = bench_median(delay[k], (size_t)reps);
		c->delay_max_ns = delay[k][reps - 1];
		c->cpu_p50_ns = bench_median(cpu[k], (size_t)reps);
		c->cpu_max_ns = cpu[k][reps - 1];
		lock_destroy(k, l[k]);
		free(cpu[k]);
		free(delay[k]);
		free(l[k]);
	}
	if (restore)
		sched_setaffinity(0, sizeof(saved), &saved);
}

/* ---- instruction counting: N uncontended pairs ---- */

static __ao_noinline void pairs_aorta(struct ao_spinlock *l, long n)
{
	for (long i = 0; i < n; i++) {
		ao_spin_lock(l);
		ao_spin_unlock(l);
	}
}

static __ao_noinline void pairs_seed(struct seed_lock *l, long n)
{
	for (long i = 0; i < n; i++) {
		seed_lock_acquire(l);
		seed_lock_release(l);
	}
}

static __ao_noinline void pairs_mutex(pthread_mutex_t *l, long n)
{
	for (long i = 0; i < n; i++) {
		pthread_mutex_lock(l);
		pthread_mutex_unlock(l);
	}
}

static __ao_noinline void pairs_pspin(pthread_spinlock_t *l, long n)
{
	for (long i = 0; i < n; i++) {
		pthread_spin_lock(l);
		pthread_spin_unlock(l);
	}
}

/* The loop alone, to see what the loop itself costs. */
static __ao_noinline void pairs_none(long *l, long n)
{
	for (long i = 0; i < n; i++)
		__asm__ __volatile__("" : : "r"(l) : "memory");
}

static int run_pairs(const char *name, long n)
{
	union any_lock l;
	long dummy = 0;
	int kind = -1;
	uint64_t t;

	for (int k = 0; k < L_NR; k++)
		if (!strcmp(name, lock_names[k]))
			kind = k;
	if (kind < 0 && strcmp(name, "none")) {
		fprintf(stderr, "lockbench: unknown --lock=%s\n", name);
		return 2;
	}
	if (kind >= 0)
		lock_init(kind, &l);
	t = bench_now_ns();
	switch (kind) {
	case L_AORTA:
	case L_UNPARKED:
		pairs_aorta(&l.ao, n);
		break;
	case L_SEED:
		pairs_seed(&l.seed, n);
		break;
	case L_MUTEX:
	case L_ADAPTIVE:
		pairs_mutex(&l.mx, n);
		break;
	case L_PSPIN:
		pairs_pspin(&l.sp, n);
		break;
	default:
		pairs_none(&dummy, n);
		break;
	}
	t = bench_now_ns() - t;
	printf("%s: %ld pairs, %.2f ns per pair\n", name, n,
	       n ? (double)t / (double)n : 0.0);
	if (kind >= 0)
		lock_destroy(kind, &l);
	return 0;
}

/* ---- options ---- */

static long opt_pairs = -1;
static const char *opt_locks; /* --locks=a,b: only these */
static const char *opt_lock = "aorta";
static int opt_threads[8];
static int opt_nthreads; /* 0: each scenario's own list */
static double opt_work_factor = 1.0;
static const char *opt_scenarios; /* --scenarios=a,b: only these */

static bool extra_opt(const char *a)
{
	if (!strncmp(a, "--pairs=", 8)) {
		opt_pairs = atol(a + 8);
		return opt_pairs >= 0;
	}
	if (!strncmp(a, "--locks=", 8)) {
		opt_locks = a + 8;
		return true;
	}
	if (!strncmp(a, "--noise=", 8)) {
		char *end;

		opt_noise = strtod(a + 8, &end);
		return end != a + 8 && !*end && opt_noise >= 0;
	}
	if (!strncmp(a, "--retries=", 10)) {
		opt_retries = atoi(a + 10);
		return opt_retries >= 0;
	}
	if (!strncmp(a, "--scenarios=", 12)) {
		opt_scenarios = a + 12;
		return true;
	}
	if (!strncmp(a, "--lock=", 7)) {
		opt_lock = a + 7;
		return true;
	}
	if (!strncmp(a, "--work=", 7)) {
		opt_work_factor = atof(a + 7);
		return opt_work_factor >= 0;
	}
	if (!strncmp(a, "--tune=", 7)) {
		unsigned int s, y, t, p = AO_SPIN_PARK_AUTO;

		if (sscanf(a + 7, "%u,%u,%u,%u", &s, &y, &t, &p) < 3)
			return false;
		opt_tune = (struct ao_spin_tune){ s, y, t, p };
		opt_have_tune = true;
		return true;
	}
	if (!strncmp(a, "--threads=", 10)) {
		const char *p = a + 10;

		opt_nthreads = 0;
		while (*p && opt_nthreads < 8) {
			char *end;
			long v = strtol(p, &end, 10);

			p = end;

			if (v < 1 || v > 1024)
				return false;
			opt_threads[opt_nthreads++] = (int)v;
			if (*p == ',')
				p++;
			else if (*p)
				return false;
		}
		return opt_nthreads > 0;
	}
	return false;
}

static const char extra_usage[] =
	"  --scenarios=L   even, short (default both)\n"
	"  --threads=LIST  thread counts (default: even 1,2,4,8,16; short "
	"1,4,8,16)\n"
	"  --work=F        even: work between acquisitions, in critical "
	"sections (1)\n"
	"  --tune=S,Y,T[,P] aorta's spin_ns, yields, starve_ns, park (0 auto,\n"
	"                  1 never, 2 always; default: built in)\n"
	"  --locks=LIST    only these locks (the ratios need mutex, seed)\n"
	"  --noise=C       a cell is disturbed when other processes took more "
	"than C\n"
	"                  CPUs meanwhile (0.1)\n"
	"  --retries=N     re-run a disturbed cell up to N times, keep the "
	"quietest (2)\n"
	"  --pairs=N       only N uncontended lock+unlock pairs of --lock\n"
	"  --lock=L        aorta, seed, mutex, mutex-adaptive, pthread-spin, "
	"none";

/* Is name in list (comma-separated; NULL: everything)? */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (len == n && !strncmp(p, name, n))
			return true;
		p = e ? e + 1 : p + len;
	}
	return !list;
}

/* Is lock kind k in --locks? */
static bool lock_selected(int k)
{
	if (k == L_UNPARKED && !opt_locks)
		return false;
	return listed(opt_locks, lock_names[k]);
}

/* ---- output ---- */

static const uint64_t cs_list[] = { 50, 1000 };
#define NCS ARRAY_SIZE(cs_list)
#define MAXT 8

/*
 * The two contended scenarios and their targets: throughput against
 * pthread_mutex (want_mutex at 50 ns and 1 us sections) and the seed
 * (want_seed) at every thread count from 4 up, and at 16 threads
 * fairness 0.6 and a worst wait of at most max_vs_mutex times the mutex's.
 */
struct scenario {
	const char *name;
	int threads[MAXT];
	int nthreads;
	uint32_t lines; /* shared lines written besides the counter's */
	bool short_work; /* 100-200 ns between, else --work x the section */
	double want_mutex[NCS];
	double want_seed;
	double max_vs_mutex;
};

enum { SC_EVEN, SC_SHORT, NSC };

static struct scenario scen[NSC] = {
	[SC_EVEN] = { .name = "even",
		      .threads = { 1, 2, 4, 8, 16 },
		      .nthreads = 5,
		      .want_mutex = { 1.1, 1.4 },
		      .want_seed = 0.95,
		      .max_vs_mutex = 2 },
	[SC_SHORT] = { .name = "short",
		       .threads = { 1, 4, 8, 16 },
		       .nthreads = 4,
		       .lines = SHORT_LINES - 1,
		       .short_work = true,
		       .want_mutex = { 1.1, 1.1 },
		       .want_seed = 1.0,
		       .max_vs_mutex = 1 },
};

static struct cell res[NSC][NCS][MAXT][L_NR];
/* The short scenario's one-thread limit: the fastest lock's 1-thread
 * cell (acquisitions/s), 0 when --threads leaves 1 out. */
static double one_thread[NCS];
static bool res_ok[NSC][NCS][MAXT][L_NR];
static struct hcell hres[2][L_NR];
static bool hres_ok[2][L_NR];
static const uint64_t hold_list[2] = { 100000, 20000000 };

static double median_of(double *v, int n)
{
	return bench_median(v, (size_t)n);
}

static void cell_median(struct cell *runs, int n, struct cell *out)
{
	double v[64];

	*out = runs[n / 2];
#define MED(f)                              \
	do {                                \
		for (int i = 0; i < n; i++) \
			v[i] = runs[i].f;   \
		out->f = median_of(v, n);   \
	} while (0)
	MED(acq_per_s);
	MED(cpu_s_per_m);
	MED(fairness);
	MED(cpu_fair);
	MED(lock_fair);
	MED(p99_ns);
	MED(max_ns);
	MED(others);
#undef MED
	/* Phase shares: sums over the runs. */
	memset(&out->st, 0, sizeof(out->st));
	for (int i = 0; i < n; i++)
		ao_spin_stats_add(&out->st, &runs[i].st);
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void paired_ratios(struct cell runs[L_NR][64], int n, int k,
			  const bool *ok, struct cell *out)
{
	double vm[64], vs[64];

	for (int r = 0; r < n; r++) {
		vm[r] = ratio(runs[k][r].acq_per_s, runs[L_MUTEX][r].acq_per_s);
		vs[r] = ratio(runs[k][r].acq_per_s, runs[L_SEED][r].acq_per_s);
	}
	out->vs_mutex = ok[L_MUTEX] ? median_of(vm, n) : 0;
	out->vs_seed = ok[L_SEED] ? median_of(vs, n) : 0;
}

/* one: the one-thread limit to compare with, 0 for none. */
static void print_cell_json(const struct scenario *sc, int kind, int threads,
			    const struct load *ld, const struct cell *c,
			    const struct cell *mutex, double one)
{
	bench_json_begin("lockbench");
	/* "contended": the even scenario's name before there were two. */
	bench_json_str("scenario", sc->short_work ? "short" : "contended");
	bench_json_str("lock", lock_names[kind]);
	bench_json_int("threads", threads);
	bench_json_int("cs_ns", (long long)ld->cs_ns);
	bench_json_int("cs_lines", (long long)ld->lines + 1);
	bench_json_int("work_ns", (long long)ld->work_ns);
	bench_json_int("work_max_ns", (long long)(ld->work_ns + ld->work_span));
	bench_json_num("acq_per_s", c->acq_per_s);
	bench_json_num("cpu_s_per_m", c->cpu_s_per_m);
	bench_json_num("fairness", c->fairness);
	bench_json_num("cpu_fairness", c->cpu_fair);
	bench_json_num("fairness_per_cpu", c->lock_fair);
	bench_json_num("p99_ns", c->p99_ns);
	bench_json_num("max_ns", c->max_ns);
	bench_json_num("vs_mutex", c->vs_mutex);
	bench_json_num("vs_seed", c->vs_seed);
	bench_json_num("max_vs_mutex", ratio(c->max_ns, mutex->max_ns));
	if (threads > 1 && one > 0)
		bench_json_num("vs_one_thread", ratio(c->acq_per_s, one));
	bench_json_num("others_cpus", c->others);
	if (c->have_st) {
		double all = (double)(c->st.fast + c->st.phase1 + c->st.phase2 +
				      c->st.phase3);

		all = all > 0 ? all : 1;
		bench_json_num("fast", (double)c->st.fast / all);
		bench_json_num("phase1", (double)c->st.phase1 / all);
		bench_json_num("phase2", (double)c->st.phase2 / all);
		bench_json_num("phase3", (double)c->st.phase3 / all);
		bench_json_num("handoffs", (double)c->st.handoffs / all);
		bench_json_num("parked", (double)c->st.parked / all);
	}
	bench_json_end();
}

static void fmt_ns(char *buf, size_t n, double ns)
{
	if (ns < 10000)
		snprintf(buf, n, "%.2fus", ns / 1e3);
	else if (ns < 10000000)
		snprintf(buf, n, "%.0fus", ns / 1e3);
	else
		snprintf(buf, n, "%.1fms", ns / 1e6);
}

static void print_cell_text(int kind, int threads, const struct cell *c)
{
	char p99[32], mx[32], ph[64] = "";

	fmt_ns(p99, sizeof(p99), c->p99_ns);
	fmt_ns(mx, sizeof(mx), c->max_ns);
	if (c->have_st) {
		double all = (double)(c->st.fast + c->st.phase1 + c->st.phase2 +
				      c->st.phase3);

		all = all > 0 ? all : 1;
		snprintf(ph, sizeof(ph), "%.1f/%.1f/%.2f/%.2f",
			 100.0 * (double)c->st.fast / all,
			 100.0 * (double)c->st.phase1 / all,
			 100.0 * (double)c->st.phase2 / all,
			 100.0 * (double)c->st.phase3 / all);
	}
	printf("%3d %-14s %7.3f %7.3f %4.2f %4.2f %4.2f %8s %8s %5.2fx "
	       "%5.2fx %4.2f  %s\n",
	       threads, lock_names[kind], c->acq_per_s / 1e6, c->cpu_s_per_m,
	       c->fairness, c->cpu_fair, c->lock_fair, p99, mx, c->vs_mutex,
	       c->vs_seed, c->others, ph);
}

static void scenario_targets(int si)
{
	const struct scenario *sc = &scen[si];

	for (size_t ci = 0; ci < NCS; ci++) {
		unsigned long long cs = cs_list[ci];
		double want = sc->want_mutex[ci];

		for (int ti = 0; ti < sc->nthreads; ti++) {
			const bool *ok = res_ok[si][ci][ti];
			const struct cell *a = &res[si][ci][ti][L_AORTA];
			const struct cell *m = &res[si][ci][ti][L_MUTEX];
			int t = sc->threads[ti];

			if (t < 4 || !ok[L_AORTA] || !ok[L_MUTEX] ||
			    !ok[L_SEED])
				continue;
			bench_target(a->vs_mutex >= want &&
					     a->vs_seed >= sc->want_seed,
				     "%-5s cs %4lluns t%-2d throughput %.2fx "
				     "mutex (>= %.1f), %.2fx seed (>= %.2f)",
				     sc->name, cs, t, a->vs_mutex, want,
				     a->vs_seed, sc->want_seed);
			if (sc->short_work && one_thread[ci])
				printf("         one-thread limit %.3f M/s: "
				       "aorta %.2fx it, the seed %.2fx\n",
				       one_thread[ci] / 1e6,
				       ratio(a->acq_per_s, one_thread[ci]),
				       ratio(res[si][ci][ti][L_SEED].acq_per_s,
					     one_thread[ci]));
			if (t != 16)
				continue;
			bench_target(
				a->fairness >= 0.6 &&
					a->max_ns <=
						sc->max_vs_mutex * m->max_ns,
				"%-5s cs %4lluns t16 fairness %.2f (>= 0.6), "
				"max wait %.2fx mutex's (<= %.0f; %.1f vs "
				"%.1f ms)",
				sc->name, cs, a->fairness,
				ratio(a->max_ns, m->max_ns), sc->max_vs_mutex,
				a->max_ns / 1e6, m->max_ns / 1e6);
		}
	}
}

static void print_targets(void)
{
	printf("\nTargets, aorta against this run's baselines:\n");
	for (int si = 0; si < NSC; si++)
		scenario_targets(si);
	if (hres_ok[1][L_AORTA] && hres_ok[1][L_MUTEX]) {
		const struct hcell *a = &hres[1][L_AORTA];
		const struct hcell *m = &hres[1][L_MUTEX];

		bench_target(
			a->delay_p50_ns <= 1.2 * m->delay_p50_ns,
			"handoff 20ms: p50 delay %.0fus = %.2fx mutex's %.0fus "
			"(<= 1.2)",
			a->delay_p50_ns / 1e3,
			ratio(a->delay_p50_ns, m->delay_p50_ns),
			m->delay_p50_ns / 1e3);
		bench_target(
			a->cpu_p50_ns <= 100000,
			"handoff 20ms: waiter CPU p50 %.0fus (<= 100us; max "
			"%.0fus)",
			a->cpu_p50_ns / 1e3, a->cpu_max_ns / 1e3);
	}
}

/* Every selected cell of scenario si, each --runs times, locks interleaved. */
static void run_scenario(const struct bench_opts *o, int si)
{
	const struct scenario *sc = &scen[si];
	char name[96];

	for (size_t ci = 0; ci < NCS; ci++) {
		struct load ld = { .cs_ns = cs_list[ci], .lines = sc->lines };
		unsigned long long wmax;

		if (sc->short_work) {
			ld.work_ns = 100;
			ld.work_span = 100;
		} else {
			double w = (double)ld.cs_ns * opt_work_factor;

			ld.work_ns = (uint64_t)w;
		}
		wmax = ld.work_ns + ld.work_span;
		if (!o->json)
			printf("\n%s: critical section %u line%s + %lluns, "
			       "work between %llu-%lluns\n"
			       "thr lock            Macq/s cpu-s/M fair cpuf "
			       "f/cpu     p99      max vsmtx vsseed  oth  "
			       "aorta fast/p1/p2/p3 %%\n",
			       sc->name, ld.lines + 1, ld.lines ? "s" : "",
			       (unsigned long long)ld.cs_ns,
			       (unsigned long long)ld.work_ns, wmax);
		for (int ti = 0; ti < sc->nthreads; ti++) {
			int t = sc->threads[ti];
			bool *ok = res_ok[si][ci][ti];
			struct cell *out = res[si][ci][ti];
			static struct cell runs[L_NR][64];
			int nr = o->runs > 64 ? 64 : o->runs;
			double one;

			for (int r = 0; r < nr; r++)
				for (int k = 0; k < L_NR; k++) {
					snprintf(name, sizeof(name),
						 "%s%s/t%d/cs%llu",
						 sc->short_work ? "short/" : "",
						 lock_names[k], t,
						 (unsigned long long)ld.cs_ns);
					if (!bench_selected(o, name) ||
					    !lock_selected(k))
						continue;
					run_cell_quiet(k, t, &ld, o->seconds,
						       &runs[k][r]);
					ok[k] = true;
				}
			for (int k = 0; k < L_NR; k++)
				if (ok[k])
					cell_median(runs[k], nr, &out[k]);
			for (int k = 0; k < L_NR; k++)
				if (ok[k])
					paired_ratios(runs, nr, k, ok, &out[k]);
			for (int k = 0; k < L_NR && sc->short_work && t == 1;
			     k++)
				if (ok[k] && out[k].acq_per_s > one_thread[ci])
					one_thread[ci] = out[k].acq_per_s;
			one = sc->short_work ? one_thread[ci] : 0;
			for (int k = 0; k < L_NR; k++) {
				if (!ok[k])
					continue;
				if (o->json)
					print_cell_json(sc, k, t, &ld, &out[k],
							&out[L_MUTEX], one);
				else
					print_cell_text(k, t, &out[k]);
			}
		}
	}
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct cell warm;
	struct load warm_load = { .cs_ns = 50, .work_ns = 50 };
	char name[96];
	int reps[2];
	uint64_t t_start;

	bench_parse(argc, argv, &o, 2.0, 3, extra_usage, extra_opt);
	ao_clock_calibrate();
	if (opt_pairs >= 0)
		return run_pairs(opt_lock, opt_pairs);
	if (o.quick) {
		o.seconds = o.seconds < 0.1 ? o.seconds : 0.1;
		o.runs = 1;
	}
	t_start = bench_now_ns();
	reps[0] = o.quick ? 30 : 200;
	reps[1] = o.quick ? 5 : 50;
	for (int si = 0; si < NSC && opt_nthreads; si++) {
		memcpy(scen[si].threads, opt_threads, sizeof(opt_threads));
		scen[si].nthreads = opt_nthreads;
	}

	if (!o.json) {
		struct ao_spinlock l = AO_SPINLOCK_INIT;
		struct ao_spin_tune t = opt_tune;

		if (!opt_have_tune)
			ao_spin_get_tune(&l, &t);
		printf("lockbench: %ld CPUs, %s, %.2fs per cell, %d run%s "
		       "(medians), load average %.2f\n"
		       "aorta: spin %uns, %u yields, starve %uns\n",
		       sysconf(_SC_NPROCESSORS_ONLN), ao_arch_name(), o.seconds,
		       o.runs, o.runs > 1 ? "s" : "", bench_loadavg(),
		       t.spin_ns, t.yields, t.starve_ns);
	}
	/* Warm up (CPU frequency, page faults, the scheduler's view of this
	 * process) so that the first cell is not the odd one out. */
	run_cell(L_MUTEX, 2, &warm_load, o.quick ? 0.05 : 0.2, &warm);
	for (int si = 0; si < NSC; si++)
		if (listed(opt_scenarios, scen[si].name))
			run_scenario(&o, si);

	if (!o.json)
		printf("\nhandoff: one waiter, the holder sleeps then unlocks\n"
		       "hold    lock           reps  delay-p50  delay-max  "
		       "waiter-cpu-p50  cpu-max  vs-mutx vs-seed\n");
	for (int hi = 0; hi < 2; hi++) {
		for (int k = 0; k < L_NR; k++) {
			snprintf(name, sizeof(name), "%s/handoff%llu",
				 lock_names[k],
				 (unsigned long long)hold_list[hi] / 1000);
			hres_ok[hi][k] = bench_selected(&o, name) &&
					 lock_selected(k);
		}
		handoff_all(hres_ok[hi], hold_list[hi], reps[hi], hres[hi]);
		for (int k = 0; k < L_NR; k++) {
			const struct hcell *c = &hres[hi][k];
			double vm = ratio(c->delay_p50_ns,
					  hres[hi][L_MUTEX].delay_p50_ns);
			double vs = ratio(c->delay_p50_ns,
					  hres[hi][L_SEED].delay_p50_ns);
			char d50[32], dmx[32], c50[32], cmx[32];

			if (!hres_ok[hi][k])
				continue;
			if (o.json) {
				bench_json_begin("lockbench");
				bench_json_str("scenario", "handoff");
				bench_json_str("lock", lock_names[k]);
				bench_json_int("hold_ns",
					       (long long)hold_list[hi]);
				bench_json_int("reps", reps[hi]);
				bench_json_num("delay_p50_ns", c->delay_p50_ns);
				bench_json_num("delay_max_ns", c->delay_max_ns);
				bench_json_num("waiter_cpu_p50_ns",
					       c->cpu_p50_ns);
				bench_json_num("waiter_cpu_max_ns",
					       c->cpu_max_ns);
				bench_json_num("delay_vs_mutex", vm);
				bench_json_num("delay_vs_seed", vs);
				bench_json_end();
				continue;
			}
			fmt_ns(d50, sizeof(d50), c->delay_p50_ns);
			fmt_ns(dmx, sizeof(dmx), c->delay_max_ns);
			fmt_ns(c50, sizeof(c50), c->cpu_p50_ns);
			fmt_ns(cmx, sizeof(cmx), c->cpu_max_ns);
			printf("%-7s %-14s %4d %10s %10s %15s %8s %7.2fx "
			       "%6.2fx\n",
			       hi ? "20ms" : "0.1ms", lock_names[k], reps[hi],
			       d50, dmx, c50, cmx, vm, vs);
		}
	}
	if (!o.json) {
		print_targets();
		printf("\n%d cell%s re-run, %d still disturbed (others > %.2f "
		       "CPUs, the oth column)\n%.0f s in all; load average "
		       "%.2f at the end\n",
		       retried_cells, retried_cells == 1 ? "" : "s",
		       noisy_cells, opt_noise,
		       (double)(bench_now_ns() - t_start) / 1e9,
		       bench_loadavg());
	}
	return 0;
}
