// SPDX-License-Identifier: MIT
/*
 * poolbench: the buffer pool against glibc malloc/free of the same size,
 * in one run.  pool-1 is one shard without thread caches, the "one
 * toilet": every get and put takes its one lock, the seed's three-phase
 * lock (the seed: the 2006 server's spin, yield, sleep lock);
 * pool-16-nocache is 16 shards without caches; pool-16 the default pool
 * (16 shards, a cache per thread); pool-16-origin the same with puts
 * spilling to their origin shard.
 *
 * pairs: T threads (1, 2, 4, 8) each loop { get; write a byte; put } for
 * --seconds; pairs per second over all threads, and for the pools the share
 * of shard-lock acquisitions that finished on the fast path and in each
 * phase of the three-phase lock (summed over the shards and the runs).
 *
 * prodcons: T/2 producer/consumer pairs, each joined by a single-producer
 * single-consumer ring: the producer gets a buffer and fills its first
 * cache line, the consumer reads it and puts it, as the io threads and the
 * workers do: items per second, steals and spills per thousand items, and
 * the fullest shard seen (sampled every millisecond) as a multiple of its
 * fair share, count / shards.
 *
 * Where the kernel puts the four threads of a 4-thread prodcons cell on
 * two CPUs decides its figure more than the allocator does: a producer
 * and its consumer on one CPU hand a ring of 64 over per sched_yield(),
 * with no line crossing CPUs; on two CPUs every item's lines cross.  So
 * the unpinned cells print how much each producer and its consumer ran
 * on the same CPU (together: 1 always, 0 never, sampled every 1024 items),
 * and prodcons-paired and prodcons-crossed pin every thread (pair i's
 * producer on CPU i, its consumer on CPU i or i + 1), so that every
 * implementation is measured in the same placement.  The placement is not
 * a fair coin either: the threads never sleep, so it is where the kernel
 * put them when they were created, which follows the CPU the main thread
 * last woke on, and that repeats with the order of the cells.  The
 * target line of an unpinned cell prints both implementations' together.
 *
 * server-rx, server-tx: the game server's shape, three threads.  rx: one
 * ring thread gets buffers (receives) and hands them in turn to two
 * workers, which put them; tx: the two workers get buffers (snapshots)
 * and the ring thread puts them (the sends completed).
 *
 * Each cell is run --runs times, the implementations interleaved, and
 * medians are reported, with the median of the per-run ratios; compare
 * ratios within one run (the machine is shared).
 *
 * --pairs=N --impl=I: only N get/put pairs on one thread in a noinline
 * function (pairs_pool, pairs_malloc, pairs_none), for counting
 * instructions under callgrind (tools/bench/poolbench-insns.sh).
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

enum impl { I_POOL1, I_NOCACHE16, I_POOL16, I_ORIGIN16, I_MALLOC, I_NR };

static const char *const impl_names[I_NR] = {
	[I_POOL1] = "pool-1",	[I_NOCACHE16] = "pool-16-nocache",
	[I_POOL16] = "pool-16", [I_ORIGIN16] = "pool-16-origin",
	[I_MALLOC] = "malloc",
};

static int opt_threads[8] = { 1, 2, 4, 8 };
static int opt_nthreads = 4;
static size_t opt_size = 2048;
static uint32_t opt_count = 4096;
static long opt_pairs = -1;
static const char *opt_impl = "pool-16";

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* Keep the compiler from seeing through malloc/free or the buffer. */
#define escape(p) __asm__ __volatile__("" : : "r"(p) : "memory")

static struct ao_bufpool *make_pool(int kind, uint32_t count)
{
	struct ao_bufpool_params p = {
		.buf_size = opt_size,
		.count = count,
		.shards = kind == I_POOL1 ? 1 : 16,
		.flags = (kind == I_ORIGIN16 ? AO_BUFPOOL_RETURN_ORIGIN : 0) |
			 (kind == I_POOL1 || kind == I_NOCACHE16 ?
				  AO_BUFPOOL_NO_CACHE :
				  0),
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

	if (!strcmp(impl, "pool-16") || !strcmp(impl, "pool-1") ||
	    !strcmp(impl, "pool-16-nocache")) {
		pool = make_pool(!strcmp(impl, "pool-1") ? I_POOL1 :
				 !strcmp(impl, "pool-16-nocache") ?
							   I_NOCACHE16 :
							   I_POOL16,
				 1024);
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
	struct ring *rings[2]; /* a producer's or a consumer's */
	int nrings;
	uint64_t ops;
	uint64_t nulls;
	uint64_t samples, on0; /* CPU samples; of them on CPU 0 */
} __ao_cacheline_aligned;

static void wait_go(struct worker *w)
{
	if (w->cpu >= 0 && bench_pin(w->cpu))
		fprintf(stderr, "poolbench: cannot pin to CPU %d\n", w->cpu);
	__atomic_fetch_add(&w->ctl->ready, 1, __ATOMIC_RELAXED);
	/* Acquire: pairs with the release store of go in start(). */
	while (!__atomic_load_n(&w->ctl->go, __ATOMIC_ACQUIRE))
		sched_yield();
}

/* Every 1024 items: which CPU the thread is on (for together). */
static inline void sample_cpu(struct worker *w, uint64_t n)
{
	if (!(n & 1023)) {
		w->samples++;
		w->on0 += sched_getcpu() == 0;
	}
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

/* Gets and fills buffers, and hands them to its rings in turn (a ring
 * thread receiving for several workers when it has more than one). */
static void *producer(void *arg)
{
	struct worker *w = arg;
	uint32_t head[2] = { 0, 0 };
	uint64_t n = 0;
	int k = 0;

	wait_go(w);
	while (!stopped(w)) {
		struct ring *r;
		void *p;
		int tries = 0;

		/* Acquire: the consumer is done with the slot; pairs with
		 * its release store of tail. */
		while (tries < w->nrings &&
		       head[k] - __atomic_load_n(&w->rings[k]->tail,
						 __ATOMIC_ACQUIRE) ==
			       RING) {
			k = (k + 1) % w->nrings;
			tries++;
		}
		if (tries == w->nrings) {
			sched_yield();
			continue;
		}
		r = w->rings[k];
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
		r->slot[head[k] % RING] = p;
		/* Release: the slot and the buffer's bytes are visible
		 * before the new head; pairs with the consumer's acquire. */
		__atomic_store_n(&r->head, ++head[k], __ATOMIC_RELEASE);
		k = (k + 1) % w->nrings;
		n++;
		sample_cpu(w, n);
	}
	w->ops = n;
	/* Release: pairs with the consumer's acquire of producers_left. */
	__atomic_fetch_sub(&w->ctl->producers_left, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Reads and puts what its rings bring, until every producer stopped and
 * the rings are empty. */
static void *consumer(void *arg)
{
	struct worker *w = arg;
	uint32_t tail[2] = { 0, 0 };
	uint64_t n = 0, sum = 0;

	wait_go(w);
	for (;;) {
		bool got = false;

		for (int k = 0; k < w->nrings; k++) {
			struct ring *r = w->rings[k];
			void *p;

			/* Acquire: pairs with the producer's release. */
			if (__atomic_load_n(&r->head, __ATOMIC_ACQUIRE) ==
			    tail[k])
				continue;
			p = r->slot[tail[k] % RING];
			if (w->kind == I_MALLOC) {
				sum += ((unsigned char *)p)[63];
				free(p);
			} else {
				sum += ((unsigned char *)((struct ao_buf *)p)
						->data)[63];
				ao_buf_put(p);
			}
			/* Release: we are done with the slot; pairs with
			 * the producer's acquire of tail. */
			__atomic_store_n(&r->tail, ++tail[k], __ATOMIC_RELEASE);
			n++;
			sample_cpu(w, n);
			got = true;
		}
		if (got)
			continue;
		if (!__atomic_load_n(&w->ctl->producers_left,
				     __ATOMIC_ACQUIRE)) {
			bool empty = true;

			for (int k = 0; k < w->nrings; k++)
				if (__atomic_load_n(&w->rings[k]->head,
						    __ATOMIC_ACQUIRE) !=
				    tail[k])
					empty = false;
			if (empty)
				break;
			continue;
		}
		sched_yield();
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
	double together; /* prodcons: producer and consumer on one CPU */
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

enum shape {
	S_PAIRS, /* each thread gets and puts */
	S_PRODCONS, /* T/2 producer -> consumer pairs */
	S_RX, /* one ring thread gets, two workers put */
	S_TX, /* two workers get, one ring thread puts */
	S_PAIRED, /* prodcons, each pair pinned to one CPU */
	S_CROSSED, /* prodcons, each producer and consumer on two CPUs */
};

static bool is_prodcons(enum shape shape)
{
	return shape == S_PRODCONS || shape == S_PAIRED || shape == S_CROSSED;
}

static void run_cell(int kind, int threads, enum shape shape, double seconds,
		     struct cell *c)
{
	struct ctl ctl = { 0 };
	struct worker *w = calloc((size_t)threads, sizeof(*w));
	void *(*fn[16])(void *);
	struct ring *rings = NULL;
	struct ao_bufpool *pool = NULL;
	uint64_t t0, ops = 0;
	double fill;

	bool prodcons = shape != S_PAIRS;
	int nrings = is_prodcons(shape) ? threads / 2 : 2;

	memset(c, 0, sizeof(*c));
	if (kind != I_MALLOC)
		pool = make_pool(kind, opt_count);
	if (prodcons) {
		if (posix_memalign((void **)&rings, AO_CACHELINE_SIZE,
				   sizeof(*rings) * (size_t)nrings))
			exit(1);
		memset(rings, 0, sizeof(*rings) * (size_t)nrings);
		ctl.producers_left = shape == S_RX ? 1 :
				     shape == S_TX ? 2 :
						     threads / 2;
	}
	for (int i = 0; i < threads; i++) {
		w[i].ctl = &ctl;
		w[i].kind = kind;
		w[i].pool = pool;
		w[i].cpu = -1;
		fn[i] = pair_worker;
		if (is_prodcons(shape)) {
			w[i].rings[0] = &rings[i / 2];
			w[i].nrings = 1;
			fn[i] = i % 2 ? consumer : producer;
			/* Pair p: the producer on CPU p, its consumer on
			 * the same CPU or the next (bench_pin wraps). */
			if (shape != S_PRODCONS)
				w[i].cpu =
					i / 2 + (shape == S_CROSSED && i % 2);
		} else if (prodcons) {
			/* Thread 0 is the ring thread, 1 and 2 the workers. */
			bool ring_thread = i == 0;

			w[i].rings[0] = &rings[ring_thread ? 0 : i - 1];
			w[i].rings[1] = &rings[1];
			w[i].nrings = ring_thread ? 2 : 1;
			fn[i] = ring_thread == (shape == S_RX) ? producer :
								 consumer;
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
		if (fn[i] != producer)
			ops += w[i].ops;
		c->nulls += w[i].nulls;
	}
	c->ops_per_s = (double)ops * 1e9 / (double)t0;
	if (is_prodcons(shape)) {
		/* Each pair: 1 - |producer's share on CPU 0 - consumer's|. */
		double sum = 0;

		for (int i = 0; i + 1 < threads; i += 2) {
			double p =
				ratio((double)w[i].on0, (double)w[i].samples);
			double q = ratio((double)w[i + 1].on0,
					 (double)w[i + 1].samples);

			sum += 1 - (p > q ? p - q : q - p);
		}
		c->together = sum / (threads / 2);
	}
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
	"  --impl=I        pool-16, pool-16-nocache, pool-1, malloc, none";

/* ---- output ---- */

#define MAXT 8
#define NSHAPES 6

static const char *const shape_names[NSHAPES] = {
	[S_PAIRS] = "pairs",
	[S_PRODCONS] = "prodcons",
	[S_RX] = "server-rx",
	[S_TX] = "server-tx",
	[S_PAIRED] = "prodcons-paired",
	[S_CROSSED] = "prodcons-crossed",
};

/* The order of the sections: the placements next to the unpinned cells. */
static const enum shape shape_order[NSHAPES] = {
	S_PAIRS, S_PRODCONS, S_PAIRED, S_CROSSED, S_RX, S_TX,
};

/* Per shape and thread-count index: medians, and medians of the ratios
 * of cells run back to back (pool-16 against pool-1, pool-16 against
 * malloc), so that both saw about the same load. */
static struct cell res[NSHAPES][MAXT][I_NR];
static bool res_ok[NSHAPES][MAXT][I_NR];
static double r_pool1[NSHAPES][MAXT], r_malloc[NSHAPES][MAXT];
static double lo_malloc[NSHAPES][MAXT], hi_malloc[NSHAPES][MAXT];

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
	MED(together);
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

/* Median of the per-run ratios a[r] / b[r]; the lowest and highest too. */
static double run_ratio(const struct cell *a, const struct cell *b, int n,
			double *lo, double *hi)
{
	double v[64] = { 0 };

	for (int r = 0; r < n; r++)
		v[r] = ratio(a[r].ops_per_s, b[r].ops_per_s);
	*lo = *hi = v[0];
	for (int r = 1; r < n; r++) {
		*lo = v[r] < *lo ? v[r] : *lo;
		*hi = v[r] > *hi ? v[r] : *hi;
	}
	return bench_median(v, (size_t)n);
}

static void run_section(const struct bench_opts *o, enum shape sh)
{
	static const char *const heads[NSHAPES] = {
		[S_PAIRS] =
			"\npairs: each thread loops get, write a byte, put\n"
			"thr impl            Mpairs/s  vs-1shard  vs-malloc"
			"  lock fast/p1/p2/p3 %\n",
		[S_PRODCONS] =
			"\nprodcons: T/2 producer -> consumer pairs (get "
			"on one thread, put on another)\n",
		[S_RX] = "\nserver-rx: one ring thread gets (receives), two "
			 "workers put\n",
		[S_TX] = "\nserver-tx: two workers get (snapshots), one ring "
			 "thread puts (send done)\n",
		[S_PAIRED] = "\nprodcons-paired: the same, pair i pinned to "
			     "CPU i (producer and consumer on one CPU)\n",
		[S_CROSSED] = "\nprodcons-crossed: the same, pair i's producer "
			      "pinned to CPU i, its consumer to CPU i + 1\n",
	};
	char name[96];

	if (!o->json) {
		printf("%s", heads[sh]);
		if (sh != S_PAIRS)
			printf("thr impl            Mitems/s  vs-1shard  "
			       "vs-malloc %s steals/k  spills/k  max-fill  lock "
			       "fast/p1/p2/p3 %%\n",
			       is_prodcons(sh) ? " together " : "");
	}
	for (int ti = 0; ti < opt_nthreads; ti++) {
		int t = opt_threads[ti];
		struct cell runs[I_NR][64];

		if (is_prodcons(sh) && (t < 2 || t % 2))
			continue;
		if ((sh == S_RX || sh == S_TX) && ti)
			continue; /* three threads, once */
		if (sh == S_RX || sh == S_TX)
			t = 3;
		for (int r = 0; r < o->runs; r++)
			for (int i = 0; i < I_NR; i++) {
				if (sh == S_PAIRS && i == I_ORIGIN16)
					continue; /* no cross-thread put */
				snprintf(name, sizeof(name), "%s/%s/t%d",
					 shape_names[sh], impl_names[i], t);
				if (!bench_selected(o, name))
					continue;
				run_cell(i, t, sh, o->seconds, &runs[i][r]);
				res_ok[sh][ti][i] = true;
			}
		if (res_ok[sh][ti][I_POOL16] && res_ok[sh][ti][I_POOL1]) {
			double lo, hi;

			r_pool1[sh][ti] = run_ratio(runs[I_POOL16],
						    runs[I_POOL1], o->runs, &lo,
						    &hi);
		}
		if (res_ok[sh][ti][I_POOL16] && res_ok[sh][ti][I_MALLOC])
			r_malloc[sh][ti] = run_ratio(runs[I_POOL16],
						     runs[I_MALLOC], o->runs,
						     &lo_malloc[sh][ti],
						     &hi_malloc[sh][ti]);
		for (int i = 0; i < I_NR; i++)
			if (res_ok[sh][ti][i])
				cell_median(runs[i], o->runs, &res[sh][ti][i]);
		for (int i = 0; i < I_NR; i++) {
			const struct cell *c = &res[sh][ti][i];
			const struct cell *p1 = &res[sh][ti][I_POOL1];
			const struct cell *m = &res[sh][ti][I_MALLOC];

			if (!res_ok[sh][ti][i])
				continue;
			if (o->json) {
				bench_json_begin("poolbench");
				bench_json_str("scenario", shape_names[sh]);
				bench_json_str("impl", impl_names[i]);
				bench_json_int("threads", t);
				bench_json_int("size", (long long)opt_size);
				bench_json_num(sh == S_PAIRS ? "pairs_per_s" :
							       "items_per_s",
					       c->ops_per_s);
				bench_json_num("vs_pool1",
					       ratio(c->ops_per_s,
						     p1->ops_per_s));
				bench_json_num("vs_malloc",
					       ratio(c->ops_per_s,
						     m->ops_per_s));
				if (is_prodcons(sh))
					bench_json_num("together", c->together);
				if (i != I_MALLOC) {
					if (sh != S_PAIRS) {
						bench_json_num("steals_per_k",
							       c->steals_k);
						bench_json_num("spills_per_k",
							       c->spills_k);
						bench_json_num("max_fill",
							       c->max_fill);
					}
					json_phases(c);
				}
				bench_json_end();
				continue;
			}
			printf("%3d %-15s %9.2f %9.2fx %9.2fx", t,
			       impl_names[i], c->ops_per_s / 1e6,
			       ratio(c->ops_per_s, p1->ops_per_s),
			       ratio(c->ops_per_s, m->ops_per_s));
			if (is_prodcons(sh))
				printf(" %9.2f", c->together);
			if (i != I_MALLOC && sh != S_PAIRS)
				printf(" %9.1f %9.1f %8.1fx ", c->steals_k,
				       c->spills_k, c->max_fill);
			if (i != I_MALLOC)
				printf("  %.2f/%.2f/%.3f/%.3f",
				       100 * share(&c->st, 0),
				       100 * share(&c->st, 1),
				       100 * share(&c->st, 2),
				       100 * share(&c->st, 3));
			putchar('\n');
		}
	}
}

static void print_targets(const struct bench_opts *o)
{
	double la[1] = { -1 };

	if (!o->json)
		printf("\nTargets, within this run (pool-16: the default pool, "
		       "16 shards and thread caches; ratios are medians of "
		       "per-run ratios, [lowest-highest]):\n");
	for (int k = 0; k < NSHAPES; k++) {
		enum shape sh = shape_order[k];

		for (int ti = 0; ti < opt_nthreads; ti++) {
			int t = sh == S_RX || sh == S_TX ? 3 : opt_threads[ti];
			const struct cell *p16 = &res[sh][ti][I_NOCACHE16];
			double fp1 = share(&p16->st, 0) + share(&p16->st, 1);
			bool vs_m = res_ok[sh][ti][I_POOL16] &&
				    res_ok[sh][ti][I_MALLOC];
			bool vs_1 = res_ok[sh][ti][I_POOL16] &&
				    res_ok[sh][ti][I_POOL1];
			char where[64];

			if (!vs_m && !vs_1)
				continue;
			if (o->json) {
				bench_json_begin("poolbench");
				bench_json_str("scenario", "target");
				bench_json_str("shape", shape_names[sh]);
				bench_json_int("threads", t);
				if (vs_1)
					bench_json_num("pool16_vs_pool1",
						       r_pool1[sh][ti]);
				if (vs_m)
					bench_json_num("pool16_vs_malloc",
						       r_malloc[sh][ti]);
				if (sh == S_PRODCONS && vs_m) {
					bench_json_num(
						"pool16_together",
						res[sh][ti][I_POOL16].together);
					bench_json_num(
						"malloc_together",
						res[sh][ti][I_MALLOC].together);
				}
				if (sh == S_PAIRS &&
				    res_ok[sh][ti][I_NOCACHE16])
					bench_json_num("nocache16_fast_or_"
						       "phase1",
						       fp1);
				if (getloadavg(la, 1) == 1)
					bench_json_num("loadavg", la[0]);
				bench_json_end();
				continue;
			}
			if (sh == S_PAIRS && vs_m)
				bench_target(
					r_malloc[sh][ti] >= 1.5,
					"t%-2d pairs: pool-16 %.2fx malloc "
					"[%.2f-%.2f] (>= 1.5)",
					t, r_malloc[sh][ti], lo_malloc[sh][ti],
					hi_malloc[sh][ti]);
			if (sh == S_PAIRS && vs_1 && t >= 4)
				bench_target(
					r_pool1[sh][ti] >= 2.0,
					"t%-2d pairs: pool-16 %.2fx pool-1 "
					"(the seed's one lock; >= 2)",
					t, r_pool1[sh][ti]);
			if (sh == S_PAIRS && t == 8 &&
			    res_ok[sh][ti][I_NOCACHE16])
				bench_target(fp1 > 0.99,
					     "t8  pairs, 16 shards without "
					     "caches: %.3f%% of lock "
					     "acquisitions fast or phase 1 "
					     "(> 99%%)",
					     100.0 * fp1);
			/* Unpinned, the placement can differ between the two
			 * (see the top of this file): say so in the line. */
			where[0] = '\0';
			if (sh == S_PRODCONS)
				snprintf(where, sizeof(where),
					 "; together: pool-16 %.2f, malloc "
					 "%.2f",
					 res[sh][ti][I_POOL16].together,
					 res[sh][ti][I_MALLOC].together);
			if (sh != S_PAIRS && vs_m)
				bench_target(r_malloc[sh][ti] >= 1.0,
					     "t%-2d %s: pool-16 %.2fx malloc "
					     "[%.2f-%.2f] (>= 1.0%s)",
					     t, shape_names[sh],
					     r_malloc[sh][ti],
					     lo_malloc[sh][ti],
					     hi_malloc[sh][ti], where);
		}
	}
	if (!o->json) {
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
		       "%.2f\n"
		       "pool-1: one shard, no thread caches (the seed's one "
		       "lock); pool-16-nocache: 16 shards, no caches;\n"
		       "pool-16: 16 shards and thread caches (the default); "
		       "pool-16-origin: the same, puts spill to the origin\n",
		       sysconf(_SC_NPROCESSORS_ONLN), ao_arch_name(), opt_size,
		       opt_count, o.seconds, o.runs, o.runs > 1 ? "s" : "",
		       la[0]);
	}
	for (int k = 0; k < NSHAPES; k++)
		run_section(&o, shape_order[k]);
	print_targets(&o);
	return 0;
}
