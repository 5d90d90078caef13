// SPDX-License-Identifier: MIT
/* Shared benchmark helpers (tools may use libc freely). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "bench.h"

static void usage(const char *prog, const char *extra, int code)
{
	fprintf(code ? stderr : stdout,
		"usage: %s [--json] [--quick] [--seconds=S] [--runs=N] "
		"[--only=NAME]%s%s\n"
		"  --json        one JSON object per result line on stdout\n"
		"  --quick       short runs (demo and CI smoke test)\n"
		"  --seconds=S   length of one timed cell\n"
		"  --runs=N      repetitions; medians are reported\n"
		"  --only=NAME   run only the cells whose name contains NAME\n",
		prog, extra ? "\n" : "", extra ? extra : "");
	exit(code);
}

void bench_parse(int argc, char **argv, struct bench_opts *o,
		 double default_seconds, int default_runs,
		 const char *extra_usage, bool (*extra)(const char *arg))
{
	memset(o, 0, sizeof(*o));
	o->seconds = default_seconds;
	o->runs = default_runs;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--json"))
			o->json = true;
		else if (!strcmp(a, "--quick"))
			o->quick = true;
		else if (!strncmp(a, "--seconds=", 10))
			o->seconds = atof(a + 10);
		else if (!strncmp(a, "--runs=", 7))
			o->runs = atoi(a + 7);
		else if (!strncmp(a, "--only=", 7))
			o->only = a + 7;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			usage(argv[0], extra_usage, 0);
		else if (!extra || !extra(a)) {
			fprintf(stderr, "%s: unknown option '%s'\n", argv[0],
				a);
			usage(argv[0], extra_usage, 2);
		}
	}
	if (o->seconds <= 0 || o->runs <= 0) {
		fprintf(stderr, "%s: --seconds and --runs must be > 0\n",
			argv[0]);
		exit(2);
	}
	bench_spin_calibrate();
}

bool bench_selected(const struct bench_opts *o, const char *cell)
{
	return !o->only || strstr(cell, o->only);
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bench_now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t bench_proc_cpu_ns(void)
{
	return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

uint64_t bench_thread_cpu_ns(void)
{
	return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

static long status_kib(const char *key)
{
	char line[256];
	long v = -1;
	size_t n = strlen(key);
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n)) {
			v = atol(line + n);
			break;
		}
	fclose(f);
	return v;
}

long bench_peak_rss_kib(void)
{
	return status_kib("VmHWM:");
}

long bench_rss_kib(void)
{
	return status_kib("VmRSS:");
}

double bench_loadavg(void)
{
	double l;

	return getloadavg(&l, 1) == 1 ? l : -1;
}

long bench_clk_tck(void)
{
	long hz = sysconf(_SC_CLK_TCK);

	return hz > 0 ? hz : 100;
}

long long bench_busy_ticks(const cpu_set_t *only)
{
	unsigned long long v[8];
	long long sum = 0;
	char line[512];
	FILE *f = fopen("/proc/stat", "r");
	int cpu;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		/* The "cpuN" lines, one per CPU. */
		if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9')
			continue;
		if (sscanf(line + 3,
			   "%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu,
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
			   &v[7]) != 9)
			continue;
		if (only && cpu < CPU_SETSIZE && !CPU_ISSET(cpu, only))
			continue;
		/* user nice system idle iowait irq softirq steal */
		sum += (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
	}
	fclose(f);
	return sum;
}

double bench_busy_cpu_s(void)
{
	long long t = bench_busy_ticks(NULL);

	return t < 0 ? -1 : (double)t / (double)bench_clk_tck();
}

void bench_default_path(char *path, size_t n, const char *rel)
{
	char self[4096], *slash;
	ssize_t k;

	if (path[0])
		return;
	k = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (k <= 0)
		k = snprintf(self, sizeof(self), ".");
	self[k] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(path, n, "%s/%s", self, rel);
}

unsigned long long bench_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 0;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur;
}

bool bench_split_cpus(cpu_set_t *first, cpu_set_t *rest)
{
	cpu_set_t all;
	bool one = false;

	CPU_ZERO(first);
	CPU_ZERO(rest);
	if (sched_getaffinity(0, sizeof(all), &all) || CPU_COUNT(&all) < 2)
		return false;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &all))
			continue;
		CPU_SET(c, one ? rest : first);
		one = true;
	}
	return true;
}

int bench_pin(int cpu)
{
	cpu_set_t allowed, one;
	int n, k = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -errno;
	n = CPU_COUNT(&allowed);
	if (n <= 0)
		return -EINVAL;
	cpu %= n;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &allowed))
			continue;
		if (k++ == cpu) {
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			return -pthread_setaffinity_np(pthread_self(),
						       sizeof(one), &one);
		}
	}
	return -EINVAL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void bench_sort_u64(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
}

void bench_sort_double(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

uint64_t bench_pct_u64(const uint64_t *sorted, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return sorted[i < n ? i : n - 1];
}

double bench_median(double *v, size_t n)
{
	if (!n)
		return 0;
	bench_sort_double(v, n);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int json_first;

void bench_json_begin(const char *bench)
{
	json_first = 1;
	putchar('{');
	bench_json_str("bench", bench);
}

static void json_key(const char *key)
{
	printf("%s\"%s\":", json_first ? "" : ",", key);
	json_first = 0;
}

void bench_json_str(const char *key, const char *val)
{
	json_key(key);
	putchar('"');
	for (const char *p = val; *p; p++) {
		if (*p == '"' || *p == '\\')
			putchar('\\');
		putchar(*p);
	}
	putchar('"');
}

void bench_json_num(const char *key, double val)
{
	json_key(key);
	printf("%.6g", val);
}

void bench_json_int(const char *key, long long val)
{
	json_key(key);
	printf("%lld", val);
}

void bench_json_end(void)
{
	puts("}");
	fflush(stdout);
}

static double spin_iters_per_ns = 1.0;

void bench_spin_calibrate(void)
{
	volatile uint64_t sink = 0;
	uint64_t best = UINT64_MAX;
	const uint64_t iters = 200000;

	for (int r = 0; r < 5; r++) {
		uint64_t t = bench_now_ns();

		for (uint64_t i = 0; i < iters; i++)
			sink = sink + i;
		t = bench_now_ns() - t;
		if (t < best)
			best = t;
	}
	spin_iters_per_ns = (double)iters / (double)(best ? best : 1);
}

void bench_spin_ns(uint64_t ns)
{
	volatile uint64_t sink = 0;
	uint64_t n = (uint64_t)((double)ns * spin_iters_per_ns);

	for (uint64_t i = 0; i < n; i++)
		sink = sink + i;
}

int bench_misses;

void bench_target(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("  [%s] ", ok ? "ok" : "MISS");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	bench_misses += !ok;
}

void bench_begin(struct bench_run *r)
{
	r->t_start = bench_now_ns();
	r->load0 = bench_loadavg();
}

void bench_goal(const struct bench_run *r, const char *name, bool pass,
		double value, double limit, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (!r->json) {
		if (name)
			bench_target(pass, "%-*s %s", r->width, name, text);
		else
			bench_target(pass, "%s", text);
		return;
	}
	bench_misses += !pass;
	bench_json_begin(r->name);
	bench_json_str("target", name ? name : text);
	if (r->measured)
		bench_json_int("measured", 1);
	bench_json_int("pass", pass);
	if (!isnan(value))
		bench_json_num("value", value);
	if (!isnan(limit))
		bench_json_num("limit", limit);
	bench_json_end();
}

void bench_end(const struct bench_run *r, const struct bench_count *counts,
	       int n)
{
	double secs = (double)(bench_now_ns() - r->t_start) / 1e9;

	if (r->json) {
		bench_json_begin(r->name);
		bench_json_int("targets_missed", bench_misses);
		for (int i = 0; i < n; i++)
			bench_json_int(counts[i].key, counts[i].n);
		bench_json_num(r->seconds_key ? r->seconds_key : "seconds",
			       secs);
		bench_json_num("loadavg_start", r->load0);
		bench_json_num("loadavg_end", bench_loadavg());
		bench_json_end();
		return;
	}
	printf("\n%d target%s missed", bench_misses,
	       bench_misses == 1 ? "" : "s");
	for (int i = 0; i < n; i++)
		printf("; %lld %s", counts[i].n,
		       counts[i].n == 1 ? counts[i].one : counts[i].many);
	printf("%s%.1f s in all; load average %.2f at the start, %.2f at the "
	       "end\n",
	       n ? "\n" : "; ", secs, r->load0, bench_loadavg());
}
