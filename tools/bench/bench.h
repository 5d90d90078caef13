/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers for the benchmarks in tools/bench: options, clocks,
 * percentiles, and one-JSON-object-per-line output.
 */
#ifndef AORTA_BENCH_H
#define AORTA_BENCH_H

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
 * the CPU), from /proc/stat, in clock ticks; -1 if unknown. */
double bench_busy_cpu_s(void);

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

/* Spin for about ns nanoseconds of CPU without touching shared memory. */
void bench_spin_ns(uint64_t ns);
/* Calibrate bench_spin_ns (called by bench_parse). */
void bench_spin_calibrate(void);

#endif /* AORTA_BENCH_H */
