// SPDX-License-Identifier: MIT
/*
 * poolbench: the sharded buffer pool with 1 shard (the seed's "one
 * toilet") and with 16, against glibc malloc/free of the same size, in one
 * run.
 *
 * pairs: T threads (1, 2, 4, 8) each loop { get; write a byte; put } for
 * --seconds; pairs per second over all threads, and for the pools the share
 * of shard-lock acquisitions that finished on the fast path and in each
 * phase of the three-phase lock (summed over the shards and the runs).
 *
 * prodcons: T/2 producer/consumer pairs, each joined by a single-producer
 * single-consumer ring: the producer gets a buffer and fills its first
 * cache line, the consumer reads it and puts it, as the io threads and the
 * workers do.  The 16-shard pool runs with both cross-thread free policies
 * (local: the freeing thread's home shard up to a high-water mark, then the
 * origin; origin: always the origin shard): items per second, steals and
 * spills per thousand items, and the fullest shard seen (sampled every
 * millisecond) as a multiple of its fair share, count / shards.
 *
 * Each cell is run --runs times, the implementations interleaved, and
 * medians are reported; compare ratios within one run (the machine is
 * shared).
 *
 * --pairs=N --impl=I: only N get/put pairs on one thread in a noinline
 * function (pairs_pool, pairs_malloc, pairs_none), for counting instructions under callgrind
 * (tools/bench/poolbench-insns.sh).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/compiler.h>
#include <aorta/core/bufpool.h>
#include "bench.h"

enum impl { I_POOL1, I_POOL16, I_ORIGIN16, I_MALLOC, I_NR };

static const char *const impl_names[I_NR] = {
	[I_POOL1] = "pool-1",
	[I_POOL16] = "pool-16",
	[I_ORIGIN16] = "pool-16-origin",
	[I_MALLOC] = "malloc",
};

static int opt_threads[8] = { 1, 2, 4, 8 };
static int opt_nthreads = 4;
static size_t opt_size = 2048;
static uint32_t opt_count = 4096;
static long opt_pairs = -1;
static const char *opt_impl = "pool-16";

/* Keep the compiler from seeing through malloc/free or the buffer. */
#define escape(p) __asm__ __volatile__("" : : "r"(p) : "memory")

static struct ao_bufpool *make_pool(int kind, uint32_t count)
{
	struct ao_bufpool_params p = {
		.buf_size = opt_size,
		.count = count,
		.shards = kind == I_POOL1 ? 1 : 16,
		.flags = kind == I_ORIGIN16 ? AO_BUFPOOL_RETURN_ORIGIN : 0,
	};
	struct ao_bufpool *pool;
	int err = ao_bufpool_create(&pool, &p);

	if (err) {
		fprintf(stderr, "poolbench: ao_bufpool_create: %s\n",
			strerror(-err));
		exit(1);
	}
	return pool;
}

static void destroy_pool(struct ao_bufpool *pool)
{
	if (ao_bufpool_destroy(pool)) {
		fprintf(stderr, "poolbench: buffers leaked\n");
		exit(1);
	}
}

/* ---- the callgrind mode ---- */

/* One function for both pools (identical copies would be folded). */
static __ao_noinline void pairs_pool(struct ao_bufpool *pool, long n)
{
	for (long i = 0; i < n; i++) {
		struct ao_buf *b = ao_buf_get(pool);

		escape(b);
		ao_buf_put(b);
	}
}

static __ao_noinline void pairs_malloc(size_t size, long n)
{
	for (long i = 0; i < n; i++) {
		void *p = malloc(size);

		escape(p);
		free(p);
	}
}

static __ao_noinline void pairs_none(long n)
{
	for (long i = 0; i < n; i++)
		escape(&i);
}

static int run_pairs(const char *impl, long n)
{
	struct ao_bufpool *pool = NULL;

	if (!strcmp(impl, "pool-16") || !strcmp(impl, "pool-1")) {
		pool = make_pool(
			impl[5] == '1' && !impl[6] ? I_POOL1 : I_POOL16, 1024);
		/* Warm: sched_getcpu's first call, the first touches. */
		for (int i = 0; i < 1000; i++)
			ao_buf_put(ao_buf_get(pool));
		pairs_pool(pool, n);
		destroy_pool(pool);
	} else if (!strcmp(impl, "malloc")) {
		pairs_malloc(opt_size, 1000);
		pairs_malloc(opt_size, n);
	} else if (!strcmp(impl, "none")) {
		pairs_none(n);
	} else {
		fprintf(stderr, "poolbench: unknown --impl=%s\n", impl);
		return 2;
	}
	return 0;
}

/* ---- threads ---- */

struct ctl {
	int go;
	int stop;
	int ready;
	int producers_left;
};

struct worker {
	pthread_t tid;
	struct ctl *ctl;
	int kind;
	int cpu;
	struct ao_bufpool *pool;
	struct ring *ring;
	uint64_t ops;
	uint64_t nulls;
} __ao_cacheline_aligned;

static void wait_go(struct worker *w)
{
	__atomic_fetch_add(&w->ctl->ready, 1, __ATOMIC_RELAXED);
	/* Acquire: pairs with the release store of go in start(). */
	while (!__atomic_load_n(&w->ctl->go, __ATOMIC_ACQUIRE))
		sched_yield();
}

static inline bool stopped(struct worker *w)
{
	return __atomic_load_n(&w->ctl->stop, __ATOMIC_RELAXED);
}

static void *pair_worker(void *arg)
{
	struct worker *w = arg;
	uint64_t n = 0;

	wait_go(w);
	if (w->kind == I_MALLOC) {
		while (!stopped(w)) {
			for (int i = 0; i < 256; i++) {
				char *p = malloc(opt_size);

				p[0] = (char)i;
				escape(p);
				free(p);
			}
			n += 256;
		}
	} else {
		while (!stopped(w)) {
			for (int i = 0; i < 256; i++) {
				struct ao_buf *b = ao_buf_get(w->pool);

				if (unlikely(!b)) {
					w->nulls++;
					continue;
				}
				((char *)b->data)[0] = (char)i;
				escape(b);
				ao_buf_put(b);
			}
			n += 256;
		}
	}
	w->ops = n;
	return NULL;
}

/* Single-producer single-consumer ring. */
#define RING 64
struct ring {
	void *slot[RING];
	uint32_t head __ao_cacheline_aligned; /* written by the producer */
	uint32_t tail __ao_cacheline_aligned; /* written by the consumer */
};

static void *producer(void *arg)
{
	struct worker *w = arg;
	struct ring *r = w->ring;
	uint32_t head = 0;
	uint64_t n = 0;

	wait_go(w);
	while (!stopped(w)) {
		void *p;

		/* Acquire: the consumer is done with the slot; pairs with
		 * its release store of tail. */
		if (head - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) ==
		    RING) {
			sched_yield();
			continue;
		}
		if (w->kind == I_MALLOC) {
			p = malloc(opt_size);
		} else {
			struct ao_buf *b = ao_buf_get(w->pool);

			if (!b) {
				w->nulls++;
				sched_yield();
				continue;
			}
			p = b;
		}
		memset(w->kind == I_MALLOC ? p : ((struct ao_buf *)p)->data,
		       (int)n, 64);
		r->slot[head % RING] = p;
		/* Release: the slot and the buffer's bytes are visible
		 * before the new head; pairs with the consumer's acquire. */
		__atomic_store_n(&r->head, ++head, __ATOMIC_RELEASE);
		n++;
	}
	w->ops = n;
	/* Release: pairs with the consumer's acquire of producers_left. */
	__atomic_fetch_sub(&w->ctl->producers_left, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *consumer(void *arg)
{
	struct worker *w = arg;
	struct ring *r = w->ring;
	uint32_t tail = 0;
	uint64_t n = 0, sum = 0;

	wait_go(w);
	for (;;) {
		void *p;

		/* Acquire: pairs with the producer's release of head. */
		if (__atomic_load_n(&r->head, __ATOMIC_ACQUIRE) == tail) {
			if (!__atomic_load_n(&w->ctl->producers_left,
					     __ATOMIC_ACQUIRE) &&
			    __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) == tail)
				break;
			sched_yield();
			continue;
		}
		p = r->slot[tail % RING];
		if (w->kind == I_MALLOC) {
			sum += ((unsigned char *)p)[63];
			free(p);
		} else {
			sum += ((unsigned char *)((struct ao_buf *)p)->data)[63];
			ao_buf_put(p);
		}
		/* Release: we are done with the slot; pairs with the
		 * producer's acquire of tail. */
		__atomic_store_n(&r->tail, ++tail, __ATOMIC_RELEASE);
		n++;
	}
	escape(&sum);
	w->ops = n;
	return NULL;
}

static void start(struct worker *w, int n, void *(*fn[])(void *))
{
	for (int i = 0; i < n; i++)
		if (pthread_create(&w[i].tid, NULL, fn[i], &w[i])) {
			perror("poolbench: pthread_create");
			exit(1);
		}
	while (__atomic_load_n(&w[0].ctl->ready, __ATOMIC_RELAXED) < n)
		sched_yield();
	/* Release: pairs with the acquire in wait_go(). */
	__atomic_store_n(&w[0].ctl->go, 1, __ATOMIC_RELEASE);
}

struct cell {
	double ops_per_s;
	double steals_k; /* steals per 1000 items */
	double spills_k;
	double max_fill; /* fullest shard seen / fair share */
	struct ao_spin_stats st;
	uint64_t nulls;
};

/* Sample the fullest shard every millisecond until the time is up. */
static double sample_fill(struct ao_bufpool *pool, double seconds)
{
	uint64_t end = bench_now_ns() + (uint64_t)(seconds * 1e9);
	uint32_t max = 0;
	struct ao_bufpool_info info;

	if (!pool) {
		while (bench_now_ns() < end)
			usleep(1000);
		return 0;
	}
	ao_bufpool_info(pool, &info);
	while (bench_now_ns() < end) {
		for (uint32_t s = 0; s < info.shards; s++) {
			struct ao_bufpool_shard_stats ss;

			ao_bufpool_shard_stats(pool, s, &ss);
			if (ss.nfree > max)
				max = ss.nfree;
		}
		usleep(1000);
	}
	return (double)max * info.shards / info.count;
}

static void run_cell(int kind, int threads, bool prodcons, double seconds,
		     struct cell *c)
{
	struct ctl ctl = { 0 };
	struct worker *w = calloc((size_t)threads, sizeof(*w));
	void *(*fn[16])(void *);
	struct ring *rings = NULL;
	struct ao_bufpool *pool = NULL;
	uint64_t t0, ops = 0;
	double fill;

	memset(c, 0, sizeof(*c));
	if (kind != I_MALLOC)
		pool = make_pool(kind, opt_count);
	if (prodcons) {
		if (posix_memalign((void **)&rings, AO_CACHELINE_SIZE,
				   sizeof(*rings) * (size_t)(threads / 2)))
			exit(1);
		memset(rings, 0, sizeof(*rings) * (size_t)(threads / 2));
		ctl.producers_left = threads / 2;
	}
	for (int i = 0; i < threads; i++) {
		w[i].ctl = &ctl;
		w[i].kind = kind;
		w[i].pool = pool;
		if (prodcons) {
			w[i].ring = &rings[i / 2];
			fn[i] = i % 2 ? consumer : producer;
		} else {
			fn[i] = pair_worker;
		}
	}
	start(w, threads, fn);
	t0 = bench_now_ns();
	fill = sample_fill(pool, seconds);
	__atomic_store_n(&ctl.stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < threads; i++)
		pthread_join(w[i].tid, NULL);
	t0 = bench_now_ns() - t0;
	for (int i = 0; i < threads; i++) {
		if (!prodcons || i % 2)
			ops += w[i].ops;
		c->nulls += w[i].nulls;
	}
	c->ops_per_s = (double)ops * 1e9 / (double)t0;
	if (pool) {
		struct ao_bufpool_stats st;

		ao_bufpool_stats(pool, &st);
		c->st = st.sum.lock;
		c->steals_k = ops ? 1000.0 * (double)st.sum.steals / ops : 0;
		c->spills_k = ops ? 1000.0 * (double)st.sum.spills / ops : 0;
		c->max_fill = fill;
		destroy_pool(pool);
	}
	free(rings);
	free(w);
}

/* ---- options ---- */

static bool extra_opt(const char *a)
{
	if (!strncmp(a, "--pairs=", 8)) {
		opt_pairs = atol(a + 8);
		return opt_pairs >= 0;
	}
	if (!strncmp(a, "--impl=", 7)) {
		opt_impl = a + 7;
		return true;
	}
	if (!strncmp(a, "--size=", 7)) {
		opt_size = (size_t)atol(a + 7);
		return opt_size > 0;
	}
	if (!strncmp(a, "--count=", 8)) {
		opt_count = (uint32_t)atol(a + 8);
		return opt_count > 0;
	}
	if (!strncmp(a, "--threads=", 10)) {
		const char *p = a + 10;

		opt_nthreads = 0;
		while (*p && opt_nthreads < 8) {
			char *e;
			long t = strtol(p, &e, 10);

			if (e == p || t < 1 || t > 16)
				return false;
			opt_threads[opt_nthreads++] = (int)t;
			p = *e == ',' ? e + 1 : e;
			if (*e && *e != ',')
				return false;
		}
		return opt_nthreads > 0;
	}
	return false;
}

static const char extra_usage[] =
	"  --threads=LIST  thread counts (default 1,2,4,8)\n"
	"  --size=N        buffer size in bytes (default 2048)\n"
	"  --count=N       buffers in each pool (default 4096)\n"
	"  --pairs=N       only N get/put pairs of --impl on one thread\n"
	"  --impl=I        pool-16, pool-1, malloc, none";

/* ---- output ---- */

#define MAXT 8
static struct cell pres[MAXT][I_NR], cres[MAXT][I_NR];
static bool pres_ok[MAXT][I_NR], cres_ok[MAXT][I_NR];
static double pratio[MAXT]; /* median over runs of pool-16 / pool-1 */

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void cell_median(struct cell *runs, int n, struct cell *out)
{
	double v[64];

	*out = runs[n / 2];
#define MED(f)                                       \
	do {                                         \
		for (int i = 0; i < n; i++)          \
			v[i] = runs[i].f;            \
		out->f = bench_median(v, (size_t)n); \
	} while (0)
	MED(ops_per_s);
	MED(steals_k);
	MED(spills_k);
	MED(max_fill);
#undef MED
	memset(&out->st, 0, sizeof(out->st));
	out->nulls = 0;
	for (int i = 0; i < n; i++) {
		ao_spin_stats_add(&out->st, &runs[i].st);
		out->nulls += runs[i].nulls;
	}
}

static double share(const struct ao_spin_stats *st, int phase)
{
	double all = (double)(st->fast + st->phase1 + st->phase2 + st->phase3);
	const uint64_t v[4] = { st->fast, st->phase1, st->phase2, st->phase3 };

	return all > 0 ? (double)v[phase] / all : 0;
}

static void json_phases(const struct cell *c)
{
	bench_json_num("fast", share(&c->st, 0));
	bench_json_num("phase1", share(&c->st, 1));
	bench_json_num("phase2", share(&c->st, 2));
	bench_json_num("phase3", share(&c->st, 3));
}

static void print_targets(bool json)
{
	double la[1] = { -1 };

	if (!json)
		printf("\nTargets (issue #4), within this run:\n");
	for (int ti = 0; ti < opt_nthreads; ti++) {
		const struct cell *p16 = &pres[ti][I_POOL16];
		int t = opt_threads[ti];
		double r = pratio[ti];
		double fp1 = share(&p16->st, 0) + share(&p16->st, 1);

		if (!pres_ok[ti][I_POOL1] || !pres_ok[ti][I_POOL16])
			continue;
		if (json) {
			bench_json_begin("poolbench");
			bench_json_str("scenario", "target");
			bench_json_int("threads", t);
			bench_json_num("pool16_vs_pool1", r);
			bench_json_num("pool16_fast_or_phase1", fp1);
			if (getloadavg(la, 1) == 1)
				bench_json_num("loadavg", la[0]);
			bench_json_end();
			continue;
		}
		if (t >= 4)
			bench_target(
				r >= 2.0,
				"t%-2d pairs: 16 shards %.2fx 1 shard (>= 2; "
				"median of per-run ratios)",
				t, r);
		if (t == 8)
			bench_target(fp1 > 0.99,
				     "t8  pairs, 16 shards: %.3f%% of lock "
				     "acquisitions fast or phase 1 (> 99%%)",
				     100.0 * fp1);
	}
	if (!json) {
		printf("  (instructions per pair against malloc/free: "
		       "sh tools/bench/poolbench-insns.sh)\n");
		if (getloadavg(la, 1) == 1)
			printf("  (load average at the end: %.2f on %ld CPUs; "
			       "other processes shrink every ratio)\n",
			       la[0], sysconf(_SC_NPROCESSORS_ONLN));
	}
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	char name[96];

	bench_parse(argc, argv, &o, 0.5, 3, extra_usage, extra_opt);
	ao_clock_calibrate();
	if (opt_pairs >= 0)
		return run_pairs(opt_impl, opt_pairs);
	if (o.quick) {
		o.seconds = o.seconds < 0.1 ? o.seconds : 0.1;
		o.runs = 1;
	}
	if (o.runs > 64)
		o.runs = 64;
	if (!o.json) {
		double la[1] = { -1 };

		getloadavg(la, 1);
		printf("poolbench: %ld CPUs, %s, %zu-byte buffers, %u per pool, "
		       "%.2fs per cell, %d run%s (medians), load average "
		       "%.2f\n",
		       sysconf(_SC_NPROCESSORS_ONLN), ao_arch_name(), opt_size,
		       opt_count, o.seconds, o.runs, o.runs > 1 ? "s" : "",
		       la[0]);
	}

	/* pairs */
	if (!o.json)
		printf("\npairs: each thread loops get, write a byte, put\n"
		       "thr impl            Mpairs/s  vs-1shard  vs-malloc  "
		       "lock fast/p1/p2/p3 %%\n");
	for (int ti = 0; ti < opt_nthreads; ti++) {
		int t = opt_threads[ti];
		struct cell runs[I_NR][64];
		const int kinds[] = { I_POOL1, I_POOL16, I_MALLOC };

		for (int r = 0; r < o.runs; r++)
			for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
				snprintf(name, sizeof(name), "pairs/%s/t%d",
					 impl_names[kinds[k]], t);
				if (!bench_selected(&o, name))
					continue;
				run_cell(kinds[k], t, false, o.seconds,
					 &runs[kinds[k]][r]);
				pres_ok[ti][kinds[k]] = true;
			}
		if (pres_ok[ti][I_POOL1] && pres_ok[ti][I_POOL16]) {
			double v[64];

			/* Ratio of cells run back to back, so that both saw
			 * about the same load; then the median. */
			for (int r = 0; r < o.runs; r++)
				v[r] = ratio(runs[I_POOL16][r].ops_per_s,
					     runs[I_POOL1][r].ops_per_s);
			pratio[ti] = bench_median(v, (size_t)o.runs);
		}
		for (size_t k = 0; k < ARRAY_SIZE(kinds); k++)
			if (pres_ok[ti][kinds[k]])
				cell_median(runs[kinds[k]], o.runs,
					    &pres[ti][kinds[k]]);
		for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
			int i = kinds[k];
			const struct cell *c = &pres[ti][i];

			if (!pres_ok[ti][i])
				continue;
			if (o.json) {
				bench_json_begin("poolbench");
				bench_json_str("scenario", "pairs");
				bench_json_str("impl", impl_names[i]);
				bench_json_int("threads", t);
				bench_json_int("size", (long long)opt_size);
				bench_json_num("pairs_per_s", c->ops_per_s);
				bench_json_num(
					"vs_pool1",
					ratio(c->ops_per_s,
					      pres[ti][I_POOL1].ops_per_s));
				bench_json_num(
					"vs_malloc",
					ratio(c->ops_per_s,
					      pres[ti][I_MALLOC].ops_per_s));
				if (i != I_MALLOC)
					json_phases(c);
				bench_json_end();
				continue;
			}
			printf("%3d %-15s %9.2f %9.2fx %9.2fx", t,
			       impl_names[i], c->ops_per_s / 1e6,
			       ratio(c->ops_per_s, pres[ti][I_POOL1].ops_per_s),
			       ratio(c->ops_per_s,
				     pres[ti][I_MALLOC].ops_per_s));
			if (i != I_MALLOC)
				printf("  %.2f/%.2f/%.3f/%.3f",
				       100 * share(&c->st, 0),
				       100 * share(&c->st, 1),
				       100 * share(&c->st, 2),
				       100 * share(&c->st, 3));
			putchar('\n');
		}
	}

	/* producer/consumer */
	if (!o.json)
		printf("\nprodcons: T/2 producer -> consumer pairs (get on one "
		       "thread, put on another)\n"
		       "thr impl            Mitems/s  vs-1shard  vs-malloc  "
		       "steals/k  spills/k  max-fill  lock fast/p1/p2/p3 %%\n");
	for (int ti = 0; ti < opt_nthreads; ti++) {
		int t = opt_threads[ti];
		struct cell runs[I_NR][64];

		if (t < 2 || t % 2)
			continue;
		for (int r = 0; r < o.runs; r++)
			for (int i = 0; i < I_NR; i++) {
				snprintf(name, sizeof(name), "prodcons/%s/t%d",
					 impl_names[i], t);
				if (!bench_selected(&o, name))
					continue;
				run_cell(i, t, true, o.seconds, &runs[i][r]);
				cres_ok[ti][i] = true;
			}
		for (int i = 0; i < I_NR; i++)
			if (cres_ok[ti][i])
				cell_median(runs[i], o.runs, &cres[ti][i]);
		for (int i = 0; i < I_NR; i++) {
			const struct cell *c = &cres[ti][i];

			if (!cres_ok[ti][i])
				continue;
			if (o.json) {
				bench_json_begin("poolbench");
				bench_json_str("scenario", "prodcons");
				bench_json_str("impl", impl_names[i]);
				bench_json_int("threads", t);
				bench_json_int("size", (long long)opt_size);
				bench_json_num("items_per_s", c->ops_per_s);
				bench_json_num(
					"vs_pool1",
					ratio(c->ops_per_s,
					      cres[ti][I_POOL1].ops_per_s));
				bench_json_num(
					"vs_malloc",
					ratio(c->ops_per_s,
					      cres[ti][I_MALLOC].ops_per_s));
				if (i != I_MALLOC) {
					bench_json_num("steals_per_k",
						       c->steals_k);
					bench_json_num("spills_per_k",
						       c->spills_k);
					bench_json_num("max_fill", c->max_fill);
					json_phases(c);
				}
				bench_json_end();
				continue;
			}
			printf("%3d %-15s %9.2f %9.2fx %9.2fx", t,
			       impl_names[i], c->ops_per_s / 1e6,
			       ratio(c->ops_per_s, cres[ti][I_POOL1].ops_per_s),
			       ratio(c->ops_per_s,
				     cres[ti][I_MALLOC].ops_per_s));
			if (i != I_MALLOC)
				printf(" %9.1f %9.1f %8.1fx  "
				       "%.2f/%.2f/%.3f/%.3f",
				       c->steals_k, c->spills_k, c->max_fill,
				       100 * share(&c->st, 0),
				       100 * share(&c->st, 1),
				       100 * share(&c->st, 2),
				       100 * share(&c->st, 3));
			putchar('\n');
		}
	}
	print_targets(o.json);
	return 0;
}
