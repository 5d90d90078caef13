// SPDX-License-Identifier: MIT
/* The log-linear latency histogram of ao-load and ao-bots: see hist.h. */
#include <errno.h>
#include <string.h>
#include "hist.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

void hist_init(struct hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

unsigned int hist_index(uint64_t v)
{
	unsigned int shift;

	if (v < 2 * HIST_SUB)
		return (unsigned int)v;
	shift = 63 - __builtin_clzll(v) - HIST_SUB_BITS;
	return shift * HIST_SUB + (unsigned int)(v >> shift);
}

uint64_t hist_bucket_low(unsigned int idx)
{
	unsigned int shift;

	if (idx < 2 * HIST_SUB)
		return idx;
	shift = idx / HIST_SUB - 1;
	return (uint64_t)(idx - shift * HIST_SUB) << shift;
}

uint64_t hist_bucket_high(unsigned int idx)
{
	unsigned int shift;

	if (idx < 2 * HIST_SUB)
		return idx;
	shift = idx / HIST_SUB - 1;
	return hist_bucket_low(idx) + ((uint64_t)1 << shift) - 1;
}

/* Single writer: plain read-modify-write, published with relaxed stores. */
void hist_record(struct hist *h, uint64_t v)
{
	unsigned int i = hist_index(v);

	STORE(h->counts[i], h->counts[i] + 1);
	STORE(h->total, h->total + 1);
	STORE(h->sum, h->sum + v);
	if (v < h->min)
		STORE(h->min, v);
	if (v > h->max)
		STORE(h->max, v);
}

void hist_merge(struct hist *dst, const struct hist *src)
{
	uint64_t n = 0, c, mn, mx;
	unsigned int i;

	for (i = 0; i < HIST_BUCKETS; i++) {
		c = LOAD(src->counts[i]);
		dst->counts[i] += c;
		n += c;
	}
	/* Count what the buckets hold, so a racing snapshot stays whole. */
	dst->total += n;
	dst->sum += LOAD(src->sum);
	mn = LOAD(src->min);
	mx = LOAD(src->max);
	if (n && mn < dst->min)
		dst->min = mn;
	if (n && mx > dst->max)
		dst->max = mx;
}

uint64_t hist_percentile(const struct hist *h, double p)
{
	uint64_t want, cum = 0, v;
	unsigned int i;

	if (!h->total)
		return 0;
	if (p >= 100.0)
		return h->max;
	/* Rounded to the nearest count, as HdrHistogram does. */
	want = (uint64_t)(p / 100.0 * (double)h->total + 0.5);
	if (want < 1)
		want = 1;
	if (want > h->total)
		want = h->total;
	for (i = 0; i < HIST_BUCKETS; i++) {
		cum += h->counts[i];
		if (cum >= want)
			break;
	}
	if (i == HIST_BUCKETS)
		return h->max;
	v = hist_bucket_high(i);
	if (v > h->max)
		v = h->max;
	if (v < h->min)
		v = h->min;
	return v;
}

double hist_mean(const struct hist *h)
{
	return h->total ? (double)h->sum / (double)h->total : 0.0;
}

int hist_write_csv(const struct hist *h, FILE *f)
{
	uint64_t cum = 0;
	unsigned int i;

	fprintf(f, "low_ns,high_ns,count,cumulative,percentile\n");
	for (i = 0; i < HIST_BUCKETS; i++) {
		if (!h->counts[i])
			continue;
		cum += h->counts[i];
		fprintf(f, "%llu,%llu,%llu,%llu,%.6f\n",
			(unsigned long long)hist_bucket_low(i),
			(unsigned long long)hist_bucket_high(i),
			(unsigned long long)h->counts[i],
			(unsigned long long)cum,
			100.0 * (double)cum / (double)h->total);
	}
	if (fflush(f) || ferror(f)) {
		if (!errno)
			errno = EIO;
		return -1;
	}
	return 0;
}
