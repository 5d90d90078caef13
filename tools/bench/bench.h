/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers for the benchmarks in tools/bench: options, clocks,
 * percentiles, and one-JSON-object-per-line output.
 */
#ifndef AORTA_BENCH_H
#define AORTA_BENCH_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bench_opts {
	bool json; /* --json: one JSON object per result line */
	bool quick; /* --quick: short runs (the demo, CI smoke) */
	double seconds; /* --seconds=S: length of one timed cell */
	int runs; /* --runs=N: repetitions (medians are reported) */
	const char *only; /* --only=NAME: run only cells whose name has NAME */
};

/*
 * Parse the common options; usage is printed for --help or a bad option
 * (exit 0 / 2).  extra_usage describes benchmark-specific options, which
 * the caller handles when extra() returns true for them.
 */
void bench_parse(int argc, char **argv, struct bench_opts *o,
		 double default_seconds, int default_runs,
		 const char *extra_usage, bool (*extra)(const char *arg));

/* Does this cell pass --only? */
bool bench_selected(const struct bench_opts *o, const char *cell);

uint64_t bench_now_ns(void); /* CLOCK_MONOTONIC */
uint64_t bench_proc_cpu_ns(void); /* this process, user + system */
uint64_t bench_thread_cpu_ns(void); /* this thread, user + system */
long bench_peak_rss_kib(void); /* VmHWM */
long bench_rss_kib(void); /* VmRSS */
double bench_loadavg(void); /* 1-minute load average, -1 if unknown */
/* CPU seconds every CPU spent busy (steal included: the hypervisor took
 * the CPU), from /proc/stat; -1 if unknown. */
double bench_busy_cpu_s(void);
/* The same in clock ticks, of the CPUs in only (NULL: every CPU); -1 if
 * unknown. */
long long bench_busy_ticks(const cpu_set_t *only);
long bench_clk_tck(void); /* _SC_CLK_TCK, 100 if unknown */

/* Unless path is set already, rel from the folder this program is in
 * ("../echo/ao-echo"). */
void bench_default_path(char *path, size_t n, const char *rel);
/* Raise the soft RLIMIT_NOFILE to the hard one; the soft one after. */
unsigned long long bench_raise_nofile(void);
/* The first usable CPU into first, the others into rest; false (both
 * empty) with fewer than two usable CPUs. */
bool bench_split_cpus(cpu_set_t *first, cpu_set_t *rest);

/* Pin the calling thread to cpu (mod the CPUs we may use); 0 or -errno. */
int bench_pin(int cpu);

/* Sort v[0..n) ascending. */
void bench_sort_u64(uint64_t *v, size_t n);
void bench_sort_double(double *v, size_t n);
/* The p-th percentile (0..100) of a sorted array. */
uint64_t bench_pct_u64(const uint64_t *sorted, size_t n, double p);
/* Median of v[0..n) (sorts v). */
double bench_median(double *v, size_t n);

/* JSON line: bench_json_begin("lockbench"); bench_json_str("lock", "x");
 * bench_json_num("ops", 1.0); ... bench_json_end(); */
void bench_json_begin(const char *bench);
void bench_json_str(const char *key, const char *val);
void bench_json_num(const char *key, double val);
void bench_json_int(const char *key, long long val);
void bench_json_end(void);

/* Print one target line, "  [ok] ..." or "  [MISS] ...", and count misses
 * in bench_misses. */
void bench_target(bool ok, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
extern int bench_misses;

/*
 * The targets and the closing summary, the same in every benchmark that
 * takes them: bench_begin() first, bench_goal() per target, bench_end()
 * last.
 */
struct bench_run {
	const char *name; /* "execbench": the JSON objects' "bench" */
	bool json; /* --json */
	int width; /* the text's target names are padded to it */
	bool measured; /* the targets' JSON says "measured":1 */
	const char *seconds_key; /* the summary's run time ("seconds") */
	uint64_t t_start; /* by bench_begin() */
	double load0; /* the load average at the start */
};

/* Note the start: the time and the load average. */
void bench_begin(struct bench_run *r);

/*
 * One target, counted in bench_misses when missed: in text "  [ok] NAME
 * TEXT", NAME padded to r->width (no NAME: TEXT alone); with --json an
 * object with the target's name (or TEXT), pass, and value and limit
 * unless NaN.
 */
void bench_goal(const struct bench_run *r, const char *name, bool pass,
		double value, double limit, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* What a benchmark counts besides the missed targets, for bench_end(). */
struct bench_count {
	const char *key; /* in the JSON summary */
	long long n;
	const char *one, *many; /* the text after n: "run failed" */
};

/*
 * The summary: the targets missed, counts[0..n), the run's seconds and
 * the load average at its start and end; in text one line (the time on
 * a second one when there are counts), with --json one object.
 */
void bench_end(const struct bench_run *r, const struct bench_count *counts,
	       int n);

/* Spin for about ns nanoseconds of CPU without touching shared memory. */
void bench_spin_ns(uint64_t ns);
/* Calibrate bench_spin_ns (called by bench_parse). */
void bench_spin_calibrate(void);

#endif /* AORTA_BENCH_H */
