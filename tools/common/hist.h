/* SPDX-License-Identifier: MIT */
/*
 * A log-linear latency histogram (HdrHistogram-like): values below 1024 are
 * counted exactly, larger ones in 512 linear sub-buckets per power of two,
 * so any recorded value is known to within 1/512 (0.2%): 33 µs at 25 ms,
 * fine enough to tell apart two medians of a 20 Hz game 0.1 ms apart.  The
 * whole 64-bit range fits in HIST_BUCKETS counters (224 KiB); histograms
 * merge by adding counters.
 *
 * One thread records into a histogram; another may read it at the same
 * time (hist_snapshot()) for a progress line: the counters are written
 * and read with relaxed atomics, so the reader sees each counter whole.
 */
#ifndef AO_LOAD_HIST_H
#define AO_LOAD_HIST_H

#include <stdint.h>
#include <stdio.h>

#define HIST_SUB_BITS 9
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS) * HIST_SUB + HIST_SUB)

struct hist {
	uint64_t total; /* values recorded */
	uint64_t min, max; /* exact; min is UINT64_MAX when empty */
	uint64_t sum; /* for the mean (wraps after ~584 years of ns) */
	uint64_t counts[HIST_BUCKETS];
};

void hist_init(struct hist *h);
void hist_record(struct hist *h, uint64_t v);
/* dst += src; src may be written concurrently by its one recorder. */
void hist_merge(struct hist *dst, const struct hist *src);

/* Bucket index of v, and the range [low, high] of values in a bucket. */
unsigned int hist_index(uint64_t v);
uint64_t hist_bucket_low(unsigned int idx);
uint64_t hist_bucket_high(unsigned int idx);

/*
 * The p-th percentile (0 < p <= 100): the highest value equivalent to the
 * smallest recorded value with p% of the values (rounded to the nearest
 * count, at least one) at or below it, clamped to [min, max].  0 when
 * empty.
 */
uint64_t hist_percentile(const struct hist *h, double p);
double hist_mean(const struct hist *h);

/*
 * The distribution as CSV, one line per non-empty bucket:
 * low_ns,high_ns,count,cumulative,percentile
 * (percentile is the share of values at or below high_ns, 0..100).
 * Returns 0 or -1 (errno set) on a write error.
 */
int hist_write_csv(const struct hist *h, FILE *f);
/*
 * hist_write_csv() into the file at path (created or truncated), as the
 * tools' --hist does: 0, or -1 after a message on stderr,
 * "<who>: --hist: cannot open|write <path>: <why>".
 */
int hist_write_file(const struct hist *h, const char *path, const char *who);

#endif /* AO_LOAD_HIST_H */
