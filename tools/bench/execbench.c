// SPDX-License-Identifier: MIT
/*
 * execbench: aorta's executors against the seed's three thread pools
 * (tools/bench/baseline/seed_pools.c), side by side, 2 workers each.  The
 * seed is the 2006 game server aorta started from; its textbook pools are
 * the baselines.
 *
 *	W1 throughput	one external thread submits N empty tasks, then
 *			waits for all of them: tasks/s; peak RSS above the
 *			baseline taken just before the pool exists
 *	W2 unbalanced	20,000 tasks, 1% spin ~1 ms and 99% ~2 us, all
 *			submitted by one task on a worker: makespan against
 *			the ideal (the serial time of the same spins / workers,
 *			measured beside each round: see w2_round_serial())
 *	W3 nested	every task spawns two children, to depth 18 (~512k
 *			tasks), from inside the workers: tasks/s
 *	W4 wake		one task submitted to a pool idle for 10 ms: submit
 *			to start, p50 and p99
 *	W5 idle		CPU seconds the process burns while its pool idles
 *
 * Every cell (workload x pool x run) runs in a forked child: its peak RSS is
 * its own, a pool that busy-yields is gone before the next one is measured,
 * and a pool that deadlocks (the seed's bounded pool in W3) is reported and
 * killed instead of hanging the run.  Runs are interleaved (run 1 of every
 * pool, then run 2, ...) so that the machine's noise falls on all of them.
 *
 * Completion is detected the same way for every pool: each task bumps a
 * counter private to the thread that runs it (no shared cache line), and
 * the waiting thread sums them, sleeping about half the estimated remaining
 * time between looks.  No pool's own "wait for all" is timed (the seed's
 * pools have none but their destructor).
 *
 * A task is a struct ao_work embedded in a job; the seed pools get the same
 * job through a trampoline (fn = seed_run, arg = &job->work), so all pools
 * run the same code per task, plus one indirect call for the seeds (the
 * seed's std::function has one too).  The jobs are the caller's memory:
 * W1's array is allocated and touched before the RSS baseline is read, so
 * "RSS+" is what the pool itself allocated (the seeds' growing queues).
 *
 * In W1 and W3 two more forms of submission run on aorta's executors, as
 * code that has only a function and an argument would submit: "-call"
 * with ao_exec_call() (items from the per-thread cache, core/call.c), and
 * "-malloc" with a wrapper malloc()ed per task and freed by the worker
 * that runs it (what ao_exec_call() replaces).  Their tasks take the
 * job's index as the argument and need no job array (W3's tree is
 * computed from the index); "RSS+" then includes the items.  The notes
 * give the slabs (62 items each) a call pool took from malloc() per run.
 *
 * The bounded pools hold --capacity (1024) items and block when full: aorta
 * with AO_EXEC_BLOCK, the seed with its blocking enqueue(), from outside
 * and from inside the workers alike (which is how the seed's deadlocks in
 * W3).  W4 takes --samples (2000) in all, split evenly over the runs; each
 * run's p50 and p99 are kept and their medians reported, and the pooled
 * percentiles of every sample beside them.
 *
 * The machine is shared: run it as
 *	flock /tmp/bench.lock build/tools/bench/execbench
 * and read the "wait" notes: how many of its threads, on average, were
 * runnable but had no CPU (other processes, or the pool's own threads).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <aorta/core/exec.h>
#include "bench.h"
#include "baseline/seed_pools.h"

/* ------------------------------------------------------------------------
 * Parameters
 */

static struct bench_opts opts;
static unsigned int nworkers = 2;
static size_t capacity = 1024;
static long w1_tasks = 1000000;
static long w2_tasks = 20000;
static int w3_depth = 18;
static long w4_samples = 2000; /* in all, split over the runs */
static double w5_seconds = 2.0;
static double stall_seconds = 1.0;

#define W2_LONG_NS 1000000u
#define W2_SHORT_NS 2000u
#define W4_IDLE_NS 10000000ull

static bool parse_extra(const char *a)
{
	if (!strncmp(a, "--workers=", 10))
		nworkers = (unsigned int)atoi(a + 10);
	else if (!strncmp(a, "--capacity=", 11))
		capacity = (size_t)atol(a + 11);
	else if (!strncmp(a, "--samples=", 10))
		w4_samples = atol(a + 10);
	else if (!strncmp(a, "--idle=", 7))
		w5_seconds = atof(a + 7);
	else
		return false;
	return true;
}

/* ------------------------------------------------------------------------
 * The pools
 */

enum pool_type {
	T_SEED_BASIC,
	T_SEED_STEAL,
	T_SEED_BP,
	T_AORTA,
	T_FLOOR,
	T_SPLIT
};

enum {
	P_SEED_BASIC,
	P_SEED_STEAL,
	P_SEED_BP,
	P_AO_SHARED,
	P_AO_SHARED_B,
	P_AO_STEAL,
	P_AO_STEAL_B,
	P_AO_SHARED_CALL,
	P_AO_STEAL_CALL,
	P_AO_STEAL_MALLOC,
	P_FLOOR,
	P_SPLIT,
	NPOOLS
};

/* How tasks are submitted to an aorta pool. */
enum form {
	F_WORK, /* intrusive: ao_exec_submit() of the job's ao_work */
	F_CALL, /* ao_exec_call(fn, arg) */
	F_MALLOC, /* ao_exec_submit() of a wrapper malloc()ed per task */
};

struct pool_desc {
	const char *name;
	enum pool_type type;
	enum ao_exec_kind kind; /* T_AORTA */
	bool bounded;
	int twin; /* the pool it is held against: the unbounded twin of a
		   * bounded pool, the intrusive form of another form; or -1 */
	enum form form; /* T_AORTA */
};

static const struct pool_desc pools[NPOOLS] = {
	[P_SEED_BASIC] = { "seed-basic", T_SEED_BASIC, 0, false, -1, F_WORK },
	[P_SEED_STEAL] = { "seed-steal", T_SEED_STEAL, 0, false, -1, F_WORK },
	[P_SEED_BP] = { "seed-bp", T_SEED_BP, 0, true, -1, F_WORK },
	[P_AO_SHARED] = { "ao-shared", T_AORTA, AO_EXEC_SHARED, false, -1,
			  F_WORK },
	[P_AO_SHARED_B] = { "ao-shared-b", T_AORTA, AO_EXEC_SHARED, true,
			    P_AO_SHARED, F_WORK },
	[P_AO_STEAL] = { "ao-steal", T_AORTA, AO_EXEC_STEAL, false, -1,
			 F_WORK },
	[P_AO_STEAL_B] = { "ao-steal-b", T_AORTA, AO_EXEC_STEAL, true,
			   P_AO_STEAL, F_WORK },
	[P_AO_SHARED_CALL] = { "ao-shared-call", T_AORTA, AO_EXEC_SHARED, false,
			       P_AO_SHARED, F_CALL },
	[P_AO_STEAL_CALL] = { "ao-steal-call", T_AORTA, AO_EXEC_STEAL, false,
			      P_AO_STEAL, F_CALL },
	[P_AO_STEAL_MALLOC] = { "ao-steal-malloc", T_AORTA, AO_EXEC_STEAL,
				false, P_AO_STEAL, F_MALLOC },
	[P_FLOOR] = { "floor-futex", T_FLOOR, 0, false, -1, F_WORK },
	[P_SPLIT] = { "floor-split", T_SPLIT, 0, false, -1, F_WORK },
};

/*
 * Not a pool: one thread asleep in FUTEX_WAIT, woken by a FUTEX_WAKE from
 * the submitter, with no spinning anywhere.  Any pool whose idle workers
 * sleep in the kernel pays at least this to start a task; it is the
 * machine's floor for W4 (on a VM, waking an idle vCPU is the bulk of it).
 * Measured in W4 and W5 only.
 */
struct floor_thread {
	_Atomic(struct ao_work *) slot;
	_Atomic uint32_t seq;
	atomic_bool stop;
	pthread_t thread;
};

static struct floor_thread floor_t;

static void *floor_main(void *arg)
{
	struct floor_thread *f = arg;

	for (;;) {
		uint32_t seq = atomic_load(&f->seq);
		struct ao_work *w = atomic_exchange(&f->slot, NULL);

		if (w) {
			w->fn(w);
			continue;
		}
		if (atomic_load(&f->stop))
			break;
		syscall(SYS_futex, &f->seq, FUTEX_WAIT_PRIVATE, seq, NULL, NULL,
			0);
	}
	return NULL;
}

static void floor_submit(struct floor_thread *f, struct ao_work *w)
{
	atomic_store(&f->slot, w);
	atomic_fetch_add(&f->seq, 1);
	syscall(SYS_futex, &f->seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void floor_stop(struct floor_thread *f)
{
	atomic_store(&f->stop, true);
	atomic_fetch_add(&f->seq, 1);
	syscall(SYS_futex, &f->seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	pthread_join(f->thread, NULL);
}

static void split_join(void); /* floor-split, with W2's jobs below */

/* The pool of this (child) process. */
static const struct pool_desc *cur;
static union {
	struct seed_pool_basic *basic;
	struct seed_pool_steal *steal;
	struct seed_pool_bp *bp;
	struct ao_exec *ex;
} impl;
static unsigned int steal_rr; /* external submits to the seed steal pool */
static atomic_ulong submit_errors;
static int first_error;

static void seed_run(void *arg)
{
	struct ao_work *w = arg;

	w->fn(w);
}

static int pool_create(void)
{
	struct ao_exec_config cfg = AO_EXEC_CONFIG_INIT;

	switch (cur->type) {
	case T_SEED_BASIC:
		impl.basic = seed_pool_basic_create(nworkers);
		return impl.basic ? 0 : -ENOMEM;
	case T_SEED_STEAL:
		impl.steal = seed_pool_steal_create(nworkers);
		return impl.steal ? 0 : -ENOMEM;
	case T_SEED_BP:
		impl.bp = seed_pool_bp_create(nworkers, capacity);
		return impl.bp ? 0 : -ENOMEM;
	case T_FLOOR:
		return -pthread_create(&floor_t.thread, NULL, floor_main,
				       &floor_t);
	case T_SPLIT:
		return 0; /* its threads start with the run */
	case T_AORTA:
		break;
	}
	cfg.kind = cur->kind;
	cfg.workers = nworkers;
	cfg.capacity = cur->bounded ? capacity : 0;
	cfg.policy = AO_EXEC_BLOCK;
	return ao_exec_create(&cfg, &impl.ex);
}

static void pool_destroy(void)
{
	switch (cur->type) {
	case T_SEED_BASIC:
		seed_pool_basic_destroy(impl.basic);
		break;
	case T_SEED_STEAL:
		seed_pool_steal_destroy(impl.steal);
		break;
	case T_SEED_BP:
		seed_pool_bp_destroy(impl.bp);
		break;
	case T_AORTA:
		ao_exec_destroy(impl.ex);
		break;
	case T_FLOOR:
		floor_stop(&floor_t);
		break;
	case T_SPLIT:
		split_join();
		break;
	}
}

/*
 * Submit from any thread.  Inside a worker of the seed's stealing pool the
 * task goes onto that worker's own queue (what the seed intends; its
 * enqueue takes a preferred worker); from outside, round robin.
 */
static void pool_submit(struct ao_work *w)
{
	int err = 0, self;

	switch (cur->type) {
	case T_SEED_BASIC:
		seed_pool_basic_enqueue(impl.basic, seed_run, w);
		return;
	case T_SEED_STEAL:
		self = seed_pool_steal_self(impl.steal);
		seed_pool_steal_enqueue(impl.steal, seed_run, w,
					self >= 0 ? (unsigned int)self :
						    steal_rr++);
		return;
	case T_SEED_BP:
		if (!seed_pool_bp_enqueue(impl.bp, seed_run, w))
			err = -ESHUTDOWN;
		break;
	case T_AORTA:
		err = ao_exec_submit(impl.ex, w);
		break;
	case T_FLOOR:
		floor_submit(&floor_t, w);
		return;
	case T_SPLIT:
		abort(); /* takes no submissions */
	}
	if (unlikely(err) && !atomic_fetch_add(&submit_errors, 1))
		first_error = err;
}

/* F_MALLOC: the wrapper a caller without a work item would allocate. */
struct wrapper {
	struct ao_work work;
	ao_call_fn fn;
	void *arg;
};

static void wrapper_run(struct ao_work *w)
{
	struct wrapper *x = container_of(w, struct wrapper, work);
	ao_call_fn fn = x->fn;
	void *arg = x->arg;

	free(x);
	fn(arg);
}

/* Submit fn(arg) to an aorta pool in its form (F_CALL or F_MALLOC). */
static void pool_call(ao_call_fn fn, void *arg)
{
	struct wrapper *x;
	int err;

	if (cur->form == F_CALL) {
		err = ao_exec_call(impl.ex, fn, arg);
	} else {
		x = malloc(sizeof(*x));
		if (!x) {
			err = -ENOMEM;
		} else {
			ao_work_init(&x->work, wrapper_run);
			x->fn = fn;
			x->arg = arg;
			err = ao_exec_submit(impl.ex, &x->work);
			if (err)
				free(x);
		}
	}
	if (unlikely(err) && !atomic_fetch_add(&submit_errors, 1))
		first_error = err;
}

/* ------------------------------------------------------------------------
 * Completion: a counter per thread that runs tasks; the waiter sums them.
 */

#define MAX_SLOTS 64

struct slot {
	_Atomic uint64_t n;
} __attribute__((aligned(64)));

static struct slot slots[MAX_SLOTS];
static atomic_uint nslots;
static __thread struct slot *my_slot;

static __attribute__((noinline)) struct slot *slot_claim(void)
{
	unsigned int i = atomic_fetch_add(&nslots, 1);

	if (i >= MAX_SLOTS) {
		fputs("execbench: too many task threads\n", stderr);
		abort();
	}
	my_slot = &slots[i];
	return my_slot;
}

static inline void count_one(void)
{
	struct slot *s = my_slot;

	if (unlikely(!s))
		s = slot_claim();
	/* Only this thread writes its slot: a load and a store, no RMW. */
	atomic_store_explicit(
		&s->n, atomic_load_explicit(&s->n, memory_order_relaxed) + 1,
		memory_order_release);
}

static uint64_t count_sum(void)
{
	unsigned int n = atomic_load(&nslots);
	uint64_t s = 0;

	if (n > MAX_SLOTS)
		n = MAX_SLOTS;
	for (unsigned int i = 0; i < n; i++)
		s += atomic_load_explicit(&slots[i].n, memory_order_acquire);
	return s;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull),
			       (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * Wait until target tasks have run; *end is when that was seen.  -1 if
 * nothing ran for stall_seconds (a deadlock).
 */
static int wait_count(uint64_t target, uint64_t *end)
{
	uint64_t t0 = bench_now_ns(), s0 = count_sum();
	uint64_t last = s0, t_last = t0;
	uint64_t stall = (uint64_t)(stall_seconds * 1e9);

	for (;;) {
		uint64_t s = count_sum(), t = bench_now_ns();
		double nap = 2e6;

		if (s >= target) {
			*end = t;
			return 0;
		}
		if (s != last) {
			last = s;
			t_last = t;
		} else if (t - t_last > stall) {
			return -1;
		}
		if (s > s0 && t > t0) {
			double rem = (double)(t - t0) / (double)(s - s0) *
				     (double)(target - s);

			if (rem / 2 < nap)
				nap = rem / 2;
		}
		sleep_ns(nap < 10000 ? 10000 : (uint64_t)nap);
	}
}

/* ------------------------------------------------------------------------
 * Workloads (run in the child)
 */

enum workload { W1, W2, W3, W4, W5, NWORK };
static const char *const wnames[NWORK] = { "w1", "w2", "w3", "w4", "w5" };

enum run_status { RUN_OK, RUN_STALL, RUN_ERROR };

struct run_result {
	int status;
	int err;
	double value; /* W1, W3: tasks/s; W2: makespan ns; W4: p50 ns;
			 W5: CPU s */
	double value2; /* W4: p99 ns */
	double rss_kib; /* W1: peak RSS above the baseline */
	uint64_t done; /* tasks counted */
	double cpu_own; /* CPUs this process used over the cell (cores) */
	double runq; /* threads waiting for a CPU, on average */
	double cpu_per_task; /* W1, W3: process CPU ns per task */
	struct ao_exec_stats st; /* aorta pools only */
	uint64_t call_allocated; /* F_CALL: slabs taken from malloc() */
	double share_min; /* aorta: the least busy worker's share of items */
	uint32_t nsamples; /* W4: followed by this many uint64_t */
};

struct job {
	struct ao_work work;
	uint32_t idx;
	uint32_t spin_ns; /* W2 */
};

static struct job *jobs;
static long njobs;

static void w1_run(struct ao_work *w)
{
	(void)w;
	count_one();
}

static void w2_run(struct ao_work *w)
{
	bench_spin_ns(container_of(w, struct job, work)->spin_ns);
	count_one();
}

static struct job w2_root;

static void w2_root_run(struct ao_work *w)
{
	(void)w;
	for (long i = 0; i < njobs; i++)
		pool_submit(&jobs[i].work);
}

/*
 * Not a pool either: W2's work split in advance into nworkers contiguous
 * runs of jobs of about equal total spin, one thread each, no queue at all.
 * Its makespan is what this machine's CPUs deliver at that moment for
 * "total work / workers": on a VM whose vCPUs share host cores it can be
 * far above the serial measure (seen here: two threads spinning at once
 * took 2-4 times as long as one doing both halves in turn).  Measured in
 * W2 only, interleaved with the pools.
 */
struct split_thread {
	long lo, hi; /* jobs[lo..hi) */
	pthread_t thread;
};

static struct split_thread split_t[64];
static unsigned int split_started;

static void *split_main(void *arg)
{
	struct split_thread *t = arg;

	for (long i = t->lo; i < t->hi; i++)
		jobs[i].work.fn(&jobs[i].work);
	return NULL;
}

static int split_start(void)
{
	double total = 0, acc = 0;
	unsigned int k = 0;
	long lo = 0;

	for (long i = 0; i < njobs; i++)
		total += jobs[i].spin_ns;
	for (long i = 0; i < njobs && k + 1 < nworkers; i++) {
		acc += jobs[i].spin_ns;
		if (acc >= total * (k + 1) / nworkers) {
			split_t[k].lo = lo;
			split_t[k].hi = i + 1;
			lo = i + 1;
			k++;
		}
	}
	for (; k < nworkers; k++) {
		split_t[k].lo = lo;
		split_t[k].hi = k + 1 == nworkers ? njobs : lo;
		lo = split_t[k].hi;
	}
	for (k = 0; k < nworkers; k++) {
		int err = pthread_create(&split_t[k].thread, NULL, split_main,
					 &split_t[k]);

		if (err)
			return -err;
		split_started++;
	}
	return 0;
}

static void split_join(void)
{
	for (unsigned int k = 0; k < split_started; k++)
		pthread_join(split_t[k].thread, NULL);
}

static void w1_call(void *arg)
{
	(void)arg;
	count_one();
}

static void w3_call(void *arg)
{
	uint64_t c = 2 * (uint64_t)(uintptr_t)arg + 1;

	if (c < (uint64_t)njobs) {
		pool_call(w3_call, (void *)(uintptr_t)c);
		pool_call(w3_call, (void *)(uintptr_t)(c + 1));
	}
	count_one();
}

static void w3_run(struct ao_work *w)
{
	uint64_t c = 2 * (uint64_t)container_of(w, struct job, work)->idx + 1;

	if (c < (uint64_t)njobs) {
		pool_submit(&jobs[c].work);
		pool_submit(&jobs[c + 1].work);
	}
	count_one();
}

/* Which W2 tasks are long: exactly 1%, at fixed pseudo-random places. */
static uint32_t *w2_spins;

static void w2_plan(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	long nlong = w2_tasks / 100;

	w2_spins = malloc(w2_tasks * sizeof(*w2_spins));
	if (!w2_spins)
		abort();
	for (long i = 0; i < w2_tasks; i++)
		w2_spins[i] = W2_SHORT_NS;
	while (nlong) {
		long i;

		x ^= x << 13; /* xorshift64 */
		x ^= x >> 7;
		x ^= x << 17;
		i = (long)(x % (uint64_t)w2_tasks);
		if (w2_spins[i] == W2_SHORT_NS) {
			w2_spins[i] = W2_LONG_NS;
			nlong--;
		}
	}
}

static void jobs_alloc(long n, ao_work_fn fn)
{
	njobs = n;
	jobs = malloc(n * sizeof(*jobs));
	if (!jobs)
		abort();
	for (long i = 0; i < n; i++) {
		ao_work_init(&jobs[i].work, fn);
		jobs[i].idx = (uint32_t)i;
		jobs[i].spin_ns = w2_spins ? w2_spins[i % w2_tasks] : 0;
	}
}

struct wake_job {
	struct ao_work work;
	_Atomic uint64_t started; /* 0 until the task runs */
};

static void wake_run(struct ao_work *w)
{
	struct wake_job *j = container_of(w, struct wake_job, work);

	atomic_store_explicit(&j->started, bench_now_ns(),
			      memory_order_release);
}

/* Wait (politely) for a wake job to have run; false after stall_seconds. */
static bool wake_wait(struct wake_job *j)
{
	uint64_t t0 = bench_now_ns();

	while (!atomic_load_explicit(&j->started, memory_order_acquire)) {
		if (bench_now_ns() - t0 > (uint64_t)(stall_seconds * 1e9))
			return false;
		sleep_ns(50000);
	}
	return true;
}

static int run_w4(struct run_result *r, uint64_t *lat, long n)
{
	struct wake_job j;

	ao_work_init(&j.work, wake_run);
	atomic_init(&j.started, 0);
	pool_submit(&j.work); /* warm up: the workers have run once */
	if (!wake_wait(&j))
		return RUN_STALL;
	for (long i = 0; i < n; i++) {
		uint64_t t;

		sleep_ns(W4_IDLE_NS);
		atomic_store_explicit(&j.started, 0, memory_order_relaxed);
		t = bench_now_ns();
		pool_submit(&j.work);
		if (!wake_wait(&j))
			return RUN_STALL;
		lat[i] = atomic_load(&j.started) - t;
	}
	r->nsamples = (uint32_t)n;
	bench_sort_u64(lat, n);
	r->value = (double)bench_pct_u64(lat, n, 50);
	r->value2 = (double)bench_pct_u64(lat, n, 99);
	return RUN_OK;
}

static int run_w5(struct run_result *r)
{
	struct wake_job j;
	uint64_t c0;

	ao_work_init(&j.work, wake_run);
	atomic_init(&j.started, 0);
	pool_submit(&j.work);
	if (!wake_wait(&j))
		return RUN_STALL;
	c0 = bench_proc_cpu_ns();
	sleep_ns((uint64_t)(w5_seconds * 1e9));
	r->value = (double)(bench_proc_cpu_ns() - c0) / 1e9;
	return RUN_OK;
}

/*
 * How long this process's threads sat runnable waiting for a CPU (the sum
 * of /proc/self/task/<tid>/schedstat's run delay, in ns): on a shared
 * 2-core machine that, more than the pool, often decides W2 and W4.
 */
static uint64_t runq_wait_ns(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	uint64_t sum = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[300];
		unsigned long long run, wait;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat",
			 e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%llu %llu", &run, &wait) == 2)
			sum += wait;
		fclose(f);
	}
	closedir(d);
	return sum;
}

/* The share of the executed items that the least busy worker ran. */
static double worker_share_min(void)
{
	struct ao_exec_worker_stats ws;
	uint64_t all = 0, least = UINT64_MAX;

	for (unsigned int i = 0; i < nworkers; i++) {
		if (ao_exec_worker_stats(impl.ex, i, &ws))
			return 0;
		all += ws.executed;
		if (ws.executed < least)
			least = ws.executed;
	}
	return all ? (double)least / (double)all : 0;
}

static void child_write(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			_exit(3);
		p += k;
		n -= (size_t)k;
	}
}

static __attribute__((noreturn)) void child_main(int w, int pool, int fd,
						 long samples)
{
	struct run_result r;
	uint64_t *lat = NULL;
	uint64_t t0, t1 = 0, target = 0, m0, c0, w0;
	long hwm0 = 0;
	int err;

	memset(&r, 0, sizeof(r));
	/* A child that hangs anyway (a deadlock the waiter cannot see, as
	 * in a blocked submit) dies of SIGALRM. */
	alarm(w == W4 ? (unsigned int)(samples / 50 + 60) : 120);
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	cur = &pools[pool];

	switch (w) {
	case W1:
		if (cur->form == F_WORK)
			jobs_alloc(w1_tasks, w1_run);
		target = (uint64_t)w1_tasks;
		hwm0 = bench_peak_rss_kib();
		break;
	case W2:
		jobs_alloc(w2_tasks, w2_run);
		ao_work_init(&w2_root.work, w2_root_run);
		target = (uint64_t)w2_tasks;
		break;
	case W3:
		if (cur->form == F_WORK)
			jobs_alloc((2l << w3_depth) - 1, w3_run);
		else
			njobs = (2l << w3_depth) - 1;
		target = (uint64_t)njobs;
		break;
	case W4:
		lat = calloc(samples ? samples : 1, sizeof(*lat));
		if (!lat)
			abort();
		break;
	}

	err = pool_create();
	if (err) {
		r.status = RUN_ERROR;
		r.err = err;
		child_write(fd, &r, sizeof(r));
		_exit(0);
	}

	m0 = runq_wait_ns();
	c0 = bench_proc_cpu_ns();
	w0 = bench_now_ns();
	switch (w) {
	case W1:
		t0 = bench_now_ns();
		if (cur->form != F_WORK)
			for (long i = 0; i < w1_tasks; i++)
				pool_call(w1_call, (void *)(uintptr_t)i);
		else
			for (long i = 0; i < w1_tasks; i++)
				pool_submit(&jobs[i].work);
		r.status = wait_count(target, &t1) ? RUN_STALL : RUN_OK;
		r.value = (double)target / ((double)(t1 - t0) / 1e9);
		r.rss_kib = (double)(bench_peak_rss_kib() - hwm0);
		break;
	case W2:
		t0 = bench_now_ns();
		if (cur->type == T_SPLIT) {
			err = split_start();
			if (err) {
				r.status = RUN_ERROR;
				r.err = err;
				break;
			}
		} else {
			pool_submit(&w2_root.work);
		}
		r.status = wait_count(target, &t1) ? RUN_STALL : RUN_OK;
		r.value = (double)(t1 - t0);
		break;
	case W3:
		t0 = bench_now_ns();
		if (cur->form != F_WORK)
			pool_call(w3_call, NULL);
		else
			pool_submit(&jobs[0].work);
		r.status = wait_count(target, &t1) ? RUN_STALL : RUN_OK;
		r.value = (double)target / ((double)(t1 - t0) / 1e9);
		break;
	case W4:
		r.status = run_w4(&r, lat, samples);
		break;
	case W5:
		r.status = run_w5(&r);
		break;
	}
	{
		double wall = (double)(bench_now_ns() - w0);
		double own = (double)(bench_proc_cpu_ns() - c0);
		double wait = (double)(runq_wait_ns() - m0);

		r.cpu_own = own / wall;
		if (target && (w == W1 || w == W3))
			r.cpu_per_task = own / (double)target;
		r.runq = wait / wall;
	}
	r.done = count_sum();
	if (atomic_load(&submit_errors)) {
		r.status = RUN_ERROR;
		r.err = first_error;
	}
	if (r.status == RUN_STALL) {
		/* The pool is stuck: report it and leave without a destroy
		 * that would wait for it. */
		child_write(fd, &r, sizeof(r));
		_exit(0);
	}
	if (cur->type == T_AORTA) {
		ao_exec_drain(impl.ex);
		ao_exec_stats(impl.ex, &r.st);
		r.share_min = worker_share_min();
	}
	if (cur->form == F_CALL) {
		struct ao_call_stats cs;

		ao_call_stats(&cs);
		r.call_allocated = cs.slabs_allocated;
	}
	pool_destroy();
	/* Every task ran exactly once (a task run twice would let the wait
	 * end early, one lost would have stalled it). */
	r.done = count_sum();
	if (target && r.status == RUN_OK && r.done != target) {
		r.status = RUN_ERROR;
		r.err = r.done > target ? -EPROTO : -ENODATA;
	}
	child_write(fd, &r, sizeof(r));
	if (r.nsamples)
		child_write(fd, lat, r.nsamples * sizeof(*lat));
	_exit(0);
}

/* ------------------------------------------------------------------------
 * The parent: run cells, collect, report.
 */

struct cell {
	int runs, ok, stalled, errors, killed;
	int last_err, last_sig;
	double v[64], v2[64], rss[64], own[64], bg[64], cpt[64];
	uint64_t *samples; /* W4, all runs */
	size_t nsamples;
	double stolen, inlined, parks, notifies, overflowed; /* per run */
	double call_allocated; /* per run */
	double share[64];
	int round[64]; /* the round each ok run was in */
};

static struct cell cells[NWORK][NPOOLS];
static int cur_round;
/* W2: the serial time of the spins before round r (w2_serial[r]) and after
 * the last (w2_serial[runs]); see w2_round_serial(). */
static double w2_serial[65];

static void run_cell(int w, int pool, long samples)
{
	struct cell *c = &cells[w][pool];
	struct run_result r;
	int fds[2], st;
	pid_t pid;
	ssize_t k;
	size_t got = 0;

	fflush(NULL);
	if (pipe(fds)) {
		perror("execbench: pipe");
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		perror("execbench: fork");
		exit(1);
	}
	if (!pid) {
		close(fds[0]);
		child_main(w, pool, fds[1], samples);
	}
	close(fds[1]);
	memset(&r, 0, sizeof(r));
	while (got < sizeof(r)) {
		k = read(fds[0], (char *)&r + got, sizeof(r) - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	if (got == sizeof(r) && r.nsamples) {
		uint64_t *s = realloc(c->samples,
				      (c->nsamples + r.nsamples) * sizeof(*s));
		size_t want = r.nsamples * sizeof(*s), have = 0;

		if (!s)
			abort();
		c->samples = s;
		while (have < want) {
			k = read(fds[0], (char *)(s + c->nsamples) + have,
				 want - have);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			have += (size_t)k;
		}
		c->nsamples += have / sizeof(*s);
	}
	close(fds[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (c->runs >= 64)
		return;
	c->runs++;
	if (got != sizeof(r)) {
		c->killed++;
		c->last_sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
		return;
	}
	switch (r.status) {
	case RUN_OK:
		c->v[c->ok] = r.value;
		c->v2[c->ok] = r.value2;
		c->rss[c->ok] = r.rss_kib;
		c->own[c->ok] = r.cpu_own;
		c->bg[c->ok] = r.runq;
		c->cpt[c->ok] = r.cpu_per_task;
		c->round[c->ok] = cur_round;
		c->ok++;
		c->share[c->ok - 1] = r.share_min;
		c->stolen += (double)r.st.stolen;
		c->inlined += (double)r.st.inlined;
		c->parks += (double)r.st.parks;
		c->notifies += (double)r.st.notifies;
		c->overflowed += (double)r.st.overflowed;
		c->call_allocated += (double)r.call_allocated;
		break;
	case RUN_STALL:
		c->stalled++;
		break;
	default:
		c->errors++;
		c->last_err = r.err;
		break;
	}
}

struct stat3 {
	double med, min, max;
};

static struct stat3 stat3(const double *v, int n)
{
	double tmp[64];
	struct stat3 s = { 0, 0, 0 };

	if (n <= 0)
		return s;
	memcpy(tmp, v, n * sizeof(*v));
	s.med = bench_median(tmp, (size_t)n); /* sorts tmp */
	s.min = tmp[0];
	s.max = tmp[n - 1];
	return s;
}

static bool cell_ok(int w, int p)
{
	return cells[w][p].ok > 0;
}

static double med(int w, int p)
{
	return stat3(cells[w][p].v, cells[w][p].ok).med;
}

static double med2(int w, int p)
{
	return stat3(cells[w][p].v2, cells[w][p].ok).med;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static const char *cell_note(int w, int p, char *buf, size_t n)
{
	struct cell *c = &cells[w][p];
	int len = 0;

	buf[0] = 0;
	if (c->ok)
		len += snprintf(buf + len, n - len, "cpu %.2f wait %.2f ",
				stat3(c->own, c->ok).med,
				stat3(c->bg, c->ok).med);
	if (c->stalled)
		len += snprintf(buf + len, n - len, "DEADLOCK %d/%d ",
				c->stalled, c->runs);
	if (c->errors)
		len += snprintf(buf + len, n - len, "error %s %d/%d ",
				c->last_err == -EPROTO ? "task ran twice" :
				c->last_err == -ENODATA ?
							 "task lost" :
							 strerror(-c->last_err),
				c->errors, c->runs);
	if (c->killed)
		len += snprintf(buf + len, n - len, "killed (%s) %d/%d ",
				c->last_sig ? strsignal(c->last_sig) : "exit",
				c->killed, c->runs);
	if (pools[p].type == T_AORTA && c->ok && w != W5 && w != W4) {
		double k = c->ok;

		len += snprintf(buf + len, n - len,
				"least %.0f%% stolen %.0f inl %.0f parks %.0f "
				"wakes %.0f",
				100 * stat3(c->share, c->ok).med, c->stolen / k,
				c->inlined / k, c->parks / k, c->notifies / k);
		if (pools[p].form == F_CALL)
			len += snprintf(buf + len, n - len, " slabs %.0f",
					c->call_allocated / k);
	}
	(void)len;
	return buf;
}

static bool selected(int w, int p)
{
	char name[64];

	if (pools[p].type == T_FLOOR && w != W4 && w != W5)
		return false;
	if (pools[p].type == T_SPLIT && w != W2)
		return false;
	if (pools[p].form != F_WORK && w != W1 && w != W3)
		return false;
	snprintf(name, sizeof(name), "%s/%s", wnames[w], pools[p].name);
	return bench_selected(&opts, name);
}

static void json_cell_common(int w, int p)
{
	struct cell *c = &cells[w][p];

	bench_json_begin("execbench");
	bench_json_str("workload", wnames[w]);
	bench_json_str("pool", pools[p].name);
	bench_json_int("workers", nworkers);
	if (pools[p].bounded)
		bench_json_int("capacity", (long long)capacity);
	bench_json_int("runs", c->runs);
	bench_json_int("ok", c->ok);
	bench_json_int("stalled", c->stalled);
	bench_json_int("errors", c->errors + c->killed);
	if (c->ok) {
		bench_json_num("cpu_own", stat3(c->own, c->ok).med);
		bench_json_num("runq_wait", stat3(c->bg, c->ok).med);
	}
}

static void json_stat(const char *key, struct stat3 s)
{
	char k[64];

	snprintf(k, sizeof(k), "%s", key);
	bench_json_num(k, s.med);
	snprintf(k, sizeof(k), "%s_min", key);
	bench_json_num(k, s.min);
	snprintf(k, sizeof(k), "%s_max", key);
	bench_json_num(k, s.max);
}

static void json_vs_seeds(int w, int p, bool higher_better)
{
	static const char *const keys[] = { "vs_seed_basic", "vs_seed_steal",
					    "vs_seed_bp" };

	for (int s = P_SEED_BASIC; s <= P_SEED_BP; s++)
		if (cell_ok(w, s) && cell_ok(w, p))
			bench_json_num(keys[s],
				       higher_better ?
					       ratio(med(w, p), med(w, s)) :
					       ratio(med(w, s), med(w, p)));
}

static bool any_runs(int w)
{
	for (int p = 0; p < NPOOLS; p++)
		if (cells[w][p].runs)
			return true;
	return false;
}

static void report_rate(int w, const char *title)
{
	char note[160];

	if (!any_runs(w))
		return;
	if (!opts.json) {
		printf("\n%s\n", title);
		printf("%-15s %8s %8s %8s %7s %7s %7s %7s %7s  %s\n", "pool",
		       "median", "min", "max", "xbasic", "xsteal", "xbp",
		       "cpu-ns", w == W1 ? "RSS+MiB" : "", "notes");
	}
	for (int p = 0; p < NPOOLS; p++) {
		struct cell *c = &cells[w][p];
		struct stat3 s = stat3(c->v, c->ok);
		struct stat3 m = stat3(c->rss, c->ok);

		if (!c->runs)
			continue;
		if (opts.json) {
			json_cell_common(w, p);
			json_stat("tasks_per_s", s);
			json_vs_seeds(w, p, true);
			if (w == W1)
				json_stat("peak_rss_kib", m);
			if (c->ok)
				bench_json_num("cpu_ns_per_task",
					       stat3(c->cpt, c->ok).med);
			if (pools[p].type == T_AORTA && c->ok) {
				bench_json_num("stolen", c->stolen / c->ok);
				bench_json_num("inlined", c->inlined / c->ok);
				bench_json_num("parks", c->parks / c->ok);
				bench_json_num("notifies", c->notifies / c->ok);
				bench_json_num("overflowed",
					       c->overflowed / c->ok);
				bench_json_num("least_worker_share",
					       stat3(c->share, c->ok).med);
			}
			if (pools[p].form == F_CALL && c->ok)
				bench_json_num("malloc_slabs",
					       c->call_allocated / c->ok);
			bench_json_end();
			continue;
		}
		printf("%-15s", pools[p].name);
		if (c->ok) {
			printf(" %8.2f %8.2f %8.2f", s.med / 1e6, s.min / 1e6,
			       s.max / 1e6);
			for (int b = P_SEED_BASIC; b <= P_SEED_BP; b++)
				if (cell_ok(w, b))
					printf(" %6.2fx",
					       ratio(s.med, med(w, b)));
				else
					printf(" %7s", "-");
			printf(" %7.0f", stat3(c->cpt, c->ok).med);
			if (w == W1)
				printf(" %7.2f", m.med / 1024);
			else
				printf(" %7s", "");
		} else {
			printf(" %8s %8s %8s %7s %7s %7s %7s %7s", "-", "-",
			       "-", "", "", "", "", "");
		}
		printf("  %s\n", cell_note(w, p, note, sizeof(note)));
	}
}

/* Round r's ideal W2 makespan: the faster of the serial runs just before
 * and just after it, / workers. */
static double w2_round_ideal(int r)
{
	double a = w2_serial[r], b = w2_serial[r + 1];

	return (a < b ? a : b) / nworkers;
}

/* A W2 cell's makespans as ratios to their own rounds' ideals. */
static struct stat3 w2_ratios(int p)
{
	struct cell *c = &cells[W2][p];
	double x[64];

	for (int i = 0; i < c->ok; i++)
		x[i] = ratio(c->v[i], w2_round_ideal(c->round[i]));
	return stat3(x, c->ok);
}

static void report_w2(void)
{
	char note[160];
	struct stat3 ideal;
	double v[64];

	if (!any_runs(W2))
		return;
	for (int r = 0; r < opts.runs; r++)
		v[r] = w2_round_ideal(r);
	ideal = stat3(v, opts.runs);
	if (!opts.json) {
		printf("\nW2 unbalanced: %ld tasks (1%% %.1f ms, 99%% %.1f us) "
		       "from one worker; ideal %.2f ms [%.2f, %.2f] (serial / "
		       "%u, measured beside each round; x: each run against "
		       "its round's)\n",
		       w2_tasks, W2_LONG_NS / 1e6, W2_SHORT_NS / 1e3,
		       ideal.med / 1e6, ideal.min / 1e6, ideal.max / 1e6,
		       nworkers);
		printf("%-15s %8s %8s %8s %7s %7s %7s  %s\n", "pool", "ms",
		       "min", "max", "xideal", "minx", "maxx", "notes");
	}
	for (int p = 0; p < NPOOLS; p++) {
		struct cell *c = &cells[W2][p];
		struct stat3 s = stat3(c->v, c->ok), x = w2_ratios(p);

		if (!c->runs)
			continue;
		if (opts.json) {
			json_cell_common(W2, p);
			json_stat("makespan_ns", s);
			bench_json_num("ideal_ns", ideal.med);
			bench_json_num("vs_ideal", x.med);
			bench_json_num("vs_ideal_min", x.min);
			bench_json_num("vs_ideal_max", x.max);
			bench_json_end();
			continue;
		}
		printf("%-15s", pools[p].name);
		if (c->ok)
			printf(" %8.2f %8.2f %8.2f %6.3fx %6.3fx %6.3fx",
			       s.med / 1e6, s.min / 1e6, s.max / 1e6, x.med,
			       x.min, x.max);
		else
			printf(" %8s %8s %8s %7s %7s %7s", "-", "-", "-", "",
			       "", "");
		printf("  %s\n", cell_note(W2, p, note, sizeof(note)));
	}
}

static void report_w4(long per_run)
{
	char note[160];

	if (!any_runs(W4))
		return;
	if (!opts.json) {
		printf("\nW4 wake latency: submit to start after %llu ms idle, "
		       "%ld samples per run (us)\n",
		       W4_IDLE_NS / 1000000, per_run);
		printf("%-15s %7s %7s %7s %8s %8s %8s %8s %8s  %s\n", "pool",
		       "p50", "min", "max", "p99", "min", "max", "all-p50",
		       "all-p99", "notes");
	}
	for (int p = 0; p < NPOOLS; p++) {
		struct cell *c = &cells[W4][p];
		struct stat3 a = stat3(c->v, c->ok), b = stat3(c->v2, c->ok);
		double all50 = 0, all99 = 0;

		if (!c->runs)
			continue;
		if (c->nsamples) {
			bench_sort_u64(c->samples, c->nsamples);
			all50 = (double)bench_pct_u64(c->samples, c->nsamples,
						      50);
			all99 = (double)bench_pct_u64(c->samples, c->nsamples,
						      99);
		}
		if (opts.json) {
			json_cell_common(W4, p);
			json_stat("p50_ns", a);
			json_stat("p99_ns", b);
			bench_json_int("samples", (long long)c->nsamples);
			bench_json_num("all_p50_ns", all50);
			bench_json_num("all_p99_ns", all99);
			bench_json_end();
			continue;
		}
		printf("%-15s", pools[p].name);
		if (c->ok)
			printf(" %7.1f %7.1f %7.1f %8.1f %8.1f %8.1f %8.1f "
			       "%8.1f",
			       a.med / 1e3, a.min / 1e3, a.max / 1e3,
			       b.med / 1e3, b.min / 1e3, b.max / 1e3,
			       all50 / 1e3, all99 / 1e3);
		else
			printf(" %7s %7s %7s %8s %8s %8s %8s %8s", "-", "-",
			       "-", "-", "-", "-", "-", "-");
		printf("  %s\n", cell_note(W4, p, note, sizeof(note)));
	}
}

static void report_w5(void)
{
	char note[160];

	if (!any_runs(W5))
		return;
	if (!opts.json) {
		printf("\nW5 idle: process CPU seconds while the pool idles "
		       "for %.2f s\n",
		       w5_seconds);
		printf("%-15s %9s %9s %9s  %s\n", "pool", "cpu-s", "min", "max",
		       "notes");
	}
	for (int p = 0; p < NPOOLS; p++) {
		struct cell *c = &cells[W5][p];
		struct stat3 s = stat3(c->v, c->ok);

		if (!c->runs)
			continue;
		if (opts.json) {
			json_cell_common(W5, p);
			json_stat("cpu_s", s);
			bench_json_num("idle_s", w5_seconds);
			bench_json_end();
			continue;
		}
		printf("%-15s", pools[p].name);
		if (c->ok)
			printf(" %9.4f %9.4f %9.4f", s.med, s.min, s.max);
		else
			printf(" %9s %9s %9s", "-", "-", "-");
		printf("  %s\n", cell_note(W5, p, note, sizeof(note)));
	}
}

/* ------------------------------------------------------------------------
 * Targets, against this run's baselines
 */

static struct bench_run run = { .name = "execbench",
				.width = 38,
				.measured = true };

static void targets(void)
{
	static const int ao[] = { P_AO_SHARED, P_AO_SHARED_B, P_AO_STEAL,
				  P_AO_STEAL_B };
	static const int call[] = { P_AO_SHARED_CALL, P_AO_STEAL_CALL,
				    P_AO_STEAL_MALLOC };
	char name[80];
	bool have;
	double x;

	int ran = 0, bad = 0;

	if (!opts.json)
		printf("\nTargets, medians of this run:\n");
	for (int w = 0; w < NWORK; w++)
		for (int i = 0; i < 4; i++) {
			struct cell *c = &cells[w][ao[i]];

			ran += c->runs;
			bad += c->runs - c->ok;
		}
	for (int w = 0; w < NWORK; w++)
		for (int i = 0; i < 3; i++) {
			struct cell *c = &cells[w][call[i]];

			ran += c->runs;
			bad += c->runs - c->ok;
		}
	if (ran > 0)
		bench_goal(&run, "every aorta run completes", !bad, bad, 0,
			   "%d of %d runs failed, stalled or crashed", bad,
			   ran);

	have = cell_ok(W1, P_AO_STEAL) && cell_ok(W1, P_SEED_BASIC);
	x = have ? ratio(med(W1, P_AO_STEAL), med(W1, P_SEED_BASIC)) : 0;
	if (have)
		bench_goal(&run, "W1 ao-steal >= 2x seed-basic", x >= 2, x, 2,
			   "%.2fx", x);
	have = cell_ok(W1, P_AO_SHARED) && cell_ok(W1, P_SEED_BASIC);
	x = have ? ratio(med(W1, P_AO_SHARED), med(W1, P_SEED_BASIC)) : 0;
	if (have)
		bench_goal(&run, "W1 ao-shared >= 1.2x seed-basic", x >= 1.2, x,
			   1.2, "%.2fx", x);
	have = cell_ok(W3, P_AO_STEAL) && cell_ok(W3, P_SEED_BASIC);
	x = have ? ratio(med(W3, P_AO_STEAL), med(W3, P_SEED_BASIC)) : 0;
	if (have)
		bench_goal(&run, "W3 ao-steal >= 12x seed-basic", x >= 12, x,
			   12, "%.2fx", x);
	for (int i = 0; i < 4; i++) {
		int p = ao[i], t = pools[p].twin;
		struct cell *c = &cells[W3][p];

		if (t < 0)
			continue;
		snprintf(name, sizeof(name), "W3 %s finishes every run",
			 pools[p].name);
		if (c->runs > 0)
			bench_goal(&run, name, c->runs && c->ok == c->runs,
				   c->ok, c->runs, "%d/%d runs", c->ok,
				   c->runs);
		have = cell_ok(W1, p) && cell_ok(W1, t);
		x = have ? ratio(med(W1, t), med(W1, p)) : 0;
		snprintf(name, sizeof(name), "W1 %s within 1.3x of %s",
			 pools[p].name, pools[t].name);
		if (have)
			bench_goal(&run, name, x <= 1.3, x, 1.3, "%.2fx slower",
				   x);
	}
	for (int i = 0; i < 4; i++) {
		int p = ao[i];

		have = cell_ok(W2, p);
		x = have ? w2_ratios(p).med : 0;
		snprintf(name, sizeof(name), "W2 %s <= 1.05x ideal",
			 pools[p].name);
		if (have)
			bench_goal(&run, name, x <= 1.05, x, 1.05, "%.3fx", x);
	}
	if (!opts.json && cell_ok(W2, P_SPLIT))
		printf("  (machine: floor-split, the work split in advance, "
		       "no pool, %.3fx ideal)\n",
		       w2_ratios(P_SPLIT).med);
	for (int i = 0; i < 4; i++) {
		int p = ao[i];

		have = cell_ok(W4, p);
		x = have ? med(W4, p) / 1e3 : 0;
		snprintf(name, sizeof(name), "W4 %s p50 <= 10 us",
			 pools[p].name);
		if (have)
			bench_goal(&run, name, x <= 10, x, 10, "%.1f us", x);
		x = have ? med2(W4, p) / 1e3 : 0;
		snprintf(name, sizeof(name), "W4 %s p99 <= 100 us",
			 pools[p].name);
		if (have)
			bench_goal(&run, name, x <= 100, x, 100, "%.1f us", x);
	}
	if (!opts.json && cell_ok(W4, P_FLOOR))
		printf("  (machine: floor-futex, a bare futex wake, p50 %.1f "
		       "us, p99 %.1f us)\n",
		       med(W4, P_FLOOR) / 1e3, med2(W4, P_FLOOR) / 1e3);
	for (int i = 0; i < 4; i++) {
		int p = ao[i];

		have = cell_ok(W5, p);
		x = have ? med(W5, p) : 0;
		snprintf(name, sizeof(name), "W5 %s < 0.01 CPU s",
			 pools[p].name);
		if (have)
			bench_goal(&run, name, x < 0.01, x, 0.01, "%.4f CPU s",
				   x);
	}
	for (int i = 0; i < 4; i++) {
		int p = ao[i];

		have = cell_ok(W1, p);
		x = have ? stat3(cells[W1][p].rss, cells[W1][p].ok).max / 1024 :
			   0;
		snprintf(name, sizeof(name), "W1 %s peak RSS <= +2 MiB",
			 pools[p].name);
		if (have)
			bench_goal(&run, name, x <= 2, x, 2,
				   "+%.2f MiB (worst run)", x);
	}
	/* A call costs at most a quarter more than an intrusive
	 * submit (ao-steal-malloc is shown, not held to it). */
	for (int k = 0; k < 2; k++) {
		int w = k ? W3 : W1;

		for (int i = 0; i < 2; i++) {
			int p = call[i], t = pools[p].twin;

			have = cell_ok(w, p) && cell_ok(w, t);
			x = have ? ratio(med(w, p), med(w, t)) : 0;
			snprintf(name, sizeof(name), "%s %s >= 0.8x %s",
				 k ? "W3" : "W1", pools[p].name, pools[t].name);
			if (have)
				bench_goal(&run, name, x >= 0.8, x, 0.8,
					   "%.2fx", x);
		}
	}
}

/*
 * W2's total work: the same spins run serially here, once before each round
 * and once after the last.  This VM's speed moves by 2x from minute to
 * minute, so one serial figure taken at the start is stale by the last
 * round; each run is held against the faster of the serial runs on either
 * side of its round (the smaller ideal: the stricter of the two).
 */
static void w2_round_serial(int r)
{
	uint64_t t = bench_now_ns();

	for (long i = 0; i < w2_tasks; i++)
		bench_spin_ns(w2_spins[i]);
	w2_serial[r] = (double)(bench_now_ns() - t);
}

static bool w2_selected(void)
{
	for (int p = 0; p < NPOOLS; p++)
		if (selected(W2, p))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	bool quick = false, progress;
	long per_run;

	bench_begin(&run);
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--quick"))
			quick = true;
	bench_parse(argc, argv, &opts, 1.0, quick ? 3 : 7,
		    "  --workers=N   worker threads per pool (2)\n"
		    "  --capacity=N  bound of the bounded pools (1024)\n"
		    "  --samples=N   W4 wake samples in all runs (2000)\n"
		    "  --idle=S      W5 idle seconds per run (2)",
		    parse_extra);
	if (opts.quick) {
		w1_tasks = 200000;
		w2_tasks = 5000;
		w3_depth = 16;
		if (w4_samples == 2000)
			w4_samples = 60;
		if (w5_seconds == 2.0)
			w5_seconds = 0.25;
		stall_seconds = 0.5;
	}
	if (!nworkers || !capacity || opts.runs > 64 || w4_samples < 0) {
		fputs("execbench: --workers and --capacity must be > 0, "
		      "--runs <= 64\n",
		      stderr);
		return 2;
	}
	run.json = opts.json;
	per_run = (w4_samples + opts.runs - 1) / opts.runs;
	progress = !opts.json && isatty(STDERR_FILENO);
	w2_plan();

	if (!opts.json)
		printf("execbench: %u workers per pool, capacity %zu for the "
		       "bounded ones (-b: block policy), %d runs per cell%s\n"
		       "figures: median [min, max] over the runs; x: ratio of "
		       "medians against each seed pool\n"
		       "notes: cpu = cores this process used during the cell; "
		       "wait = its threads waiting\n"
		       "       for a CPU (runqueue delay / wall time: "
		       "contention, often from other processes);\n"
		       "       cpu-ns (W1, W3): process CPU time per task, "
		       "which other processes disturb less than the rate\n"
		       "       aorta: least = share of the items run by the "
		       "least busy worker; counters per run\n"
		       "       (stolen, inlined, parks, futex wakes by "
		       "submits)\n",
		       nworkers, capacity, opts.runs,
		       opts.quick ? " (--quick: smaller workloads)" : "");

	for (int w = 0; w < NWORK; w++) {
		bool serial = w == W2 && w2_selected();

		for (int r = 0; r < opts.runs; r++) {
			if (progress)
				fprintf(stderr, "\r  %s run %d/%d ", wnames[w],
					r + 1, opts.runs);
			if (serial)
				w2_round_serial(r);
			cur_round = r;
			for (int p = 0; p < NPOOLS; p++)
				if (selected(w, p))
					run_cell(w, p, per_run);
		}
		if (serial)
			w2_round_serial(opts.runs);
	}
	if (progress)
		fprintf(stderr, "\r%30s\r", "");

	{
		char title[160];

		snprintf(title, sizeof(title),
			 "W1 throughput: %ld empty tasks from one external "
			 "thread, then wait (Mtasks/s)",
			 w1_tasks);
		report_rate(W1, title);
		report_w2();
		snprintf(title, sizeof(title),
			 "W3 nested: binary tree of depth %d spawned from the "
			 "workers, %ld tasks (Mtasks/s)",
			 w3_depth, (2l << w3_depth) - 1);
		report_rate(W3, title);
		report_w4(per_run);
		report_w5();
	}
	targets();
	bench_end(&run, NULL, 0);
	return 0;
}
