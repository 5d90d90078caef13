/* SPDX-License-Identifier: MIT */
/*
 * The sharded buffer pool: one arena of fixed-size buffers spread over
 * (by default) 16 shards, each with its own three-phase lock and free
 * stack, so that threads on different CPUs never queue at the same lock
 * ("16 toilets instead of one").  See core/bufpool.c for the design.
 *
 *	struct ao_bufpool *pool;
 *	struct ao_bufpool_params p = { .buf_size = 2048, .count = 4096 };
 *
 *	if (ao_bufpool_create(&pool, &p) < 0) ...
 *	struct ao_buf *b = ao_buf_get(pool);	NULL + ENOBUFS when empty
 *	memcpy(b->data, pkt, n); b->len = n;
 *	ao_buf_ref(b);				one more holder
 *	ao_buf_put(b); ao_buf_put(b);		the last put returns it
 *	ao_bufpool_destroy(pool);		-EBUSY if buffers are out
 */
#ifndef AORTA_CORE_BUFPOOL_H
#define AORTA_CORE_BUFPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <aorta/compiler.h>
#include <aorta/sync/spinlock.h>

#define AO_BUFPOOL_DEFAULT_SHARDS 16u
#define AO_BUFPOOL_MAX_SHARDS 1024u
#define AO_BUFPOOL_MAX_COUNT (1u << 24)
/* Threads that can have a cache in a pool at once (others use the shards). */
#define AO_BUFPOOL_CACHES 64u
/* Default and largest buffers per thread cache. */
#define AO_BUFPOOL_CACHE_DEFAULT 32u
#define AO_BUFPOOL_CACHE_MAX 4096u

/* Flags for struct ao_bufpool_params. */
#define AO_BUFPOOL_HUGE 0x1u /* try MAP_HUGETLB first, fall back to 4K */
#define AO_BUFPOOL_RETURN_ORIGIN 0x2u /* a put goes to the buffer's origin */
#define AO_BUFPOOL_THREAD_HOME 0x4u /* home shard per thread, not per CPU */
#define AO_BUFPOOL_NO_CACHE \
	0x8u /* no thread caches: every get and put
				  * goes to a shard */

struct ao_bufpool;

/* One buffer.  data, cap and index never change; len is the user's.  With
 * a pool's headroom, data starts that many bytes into the buffer's slot:
 * the bytes before it are io/'s, for a frame header written once and sent
 * with the payload (see io/ws.c). */
struct ao_buf {
	void *data; /* cap bytes inside the pool's arena */
	uint32_t len; /* bytes in use (0 after ao_buf_get) */
	uint32_t cap; /* capacity: the pool's buffer size */
	uint32_t index; /* data == arena + index * stride */
	uint32_t refs; /* reference count: use ao_buf_ref/put */
	struct ao_bufpool *pool; /* the pool it belongs to */
	/* Private to the pool. */
	struct ao_buf *next; /* free-stack link while free */
	uint32_t origin; /* the shard it started in */
	uint32_t magic; /* live/free marker, checked in debug builds */
	uint32_t owner; /* cache slot + 1 that handed it out; 0: a shard */
	uint32_t headroom; /* bytes before data in its slot (the pool's) */
	uint64_t frame; /* atomic, private to io/: the header in the
			 * headroom (0 when handed out) */
} __ao_cacheline_aligned;

/* How to create a pool. */
struct ao_bufpool_params {
	size_t buf_size; /* bytes per buffer, > 0 */
	uint32_t count; /* buffers, 1 .. AO_BUFPOOL_MAX_COUNT */
	uint32_t shards; /* power of two <= MAX_SHARDS; 0: 16 */
	uint32_t high_water; /* free buffers a home shard keeps before a
			      * put spills to the origin; 0: default */
	unsigned int flags; /* AO_BUFPOOL_* */
	uint32_t cache; /* buffers per thread cache, 2 .. CACHE_MAX, and
			 * CACHES * cache <= count / 2; 0: min(32, count /
			 * 128), no caches below 8 */
	uint32_t headroom; /* bytes reserved before each buffer's data (for
			    * a frame header), rounded up to 16, at most
			    * AO_BUFPOOL_MAX_HEADROOM; 0: none */
};

#define AO_BUFPOOL_MAX_HEADROOM 256u

/* The arena, for registering it with io_uring. */
struct ao_bufpool_info {
	void *arena; /* page-aligned, contiguous */
	size_t arena_len; /* mapped length (multiple of the page size) */
	size_t stride; /* distance between buffers (64-byte multiple) */
	size_t headroom; /* bytes before each buffer's data */
	size_t buf_size; /* capacity of each buffer */
	uint32_t count; /* buffers */
	uint32_t shards; /* shards */
	uint32_t high_water; /* per-shard spill threshold in use */
	bool huge; /* arena is on huge pages */
	uint32_t cache; /* buffers per thread cache; 0: no caches */
	uint32_t cache_batch; /* buffers a refill or flush moves */
};

/* Counters of one shard (racy snapshot while the pool is in use). */
struct ao_bufpool_shard_stats {
	uint64_t gets; /* buffers handed out from this shard */
	uint64_t puts; /* buffers returned to this shard */
	uint64_t steals; /* gets homed here served by another shard */
	uint64_t stolen; /* buffers other shards' threads took from here */
	uint64_t misses; /* gets that found this (home) shard empty */
	uint64_t spills; /* puts homed here sent on to the origin shard */
	uint32_t nfree; /* buffers free in this shard now */
	struct ao_spin_stats lock; /* the shard lock's phase counts */
};

/* Totals over every shard, plus the pool-wide counters. */
struct ao_bufpool_stats {
	struct ao_bufpool_shard_stats sum; /* nfree: free in the shards */
	uint64_t exhausted; /* gets that returned NULL with ENOBUFS */
	uint64_t waits; /* ao_buf_get_wait() calls that slept */
	uint64_t timeouts; /* ao_buf_get_wait() calls that timed out */
	uint32_t in_use; /* buffers out now */
	/* Thread caches (0 without them).  Added before the first release:
	 * callers compiled against the older, shorter struct must be
	 * rebuilt. */
	uint32_t cached; /* free buffers in thread caches and remote lists */
	uint64_t cache_gets; /* gets through a thread cache */
	uint64_t cache_hits; /* of those, served by the thread's own list */
	uint64_t cache_puts; /* last puts through a thread cache */
	uint64_t remote_frees; /* of those, sent to the getter's cache */
	uint64_t cache_refills; /* batches caches took from the shards */
	uint64_t cache_flushes; /* batches caches gave back to the shards */
};

/* Create a pool; 0 or -EINVAL (bad params), -ENOMEM. */
AO_API int ao_bufpool_create(struct ao_bufpool **poolp,
			     const struct ao_bufpool_params *params);
/* Destroy a pool with every buffer back: 0.  Otherwise print a leak report
 * to stderr, leave the pool intact and return -EBUSY.  NULL: 0. */
AO_API int ao_bufpool_destroy(struct ao_bufpool *pool);
/* Describe the arena and the shape of the pool. */
AO_API void ao_bufpool_info(const struct ao_bufpool *pool,
			    struct ao_bufpool_info *info);
/* The buffer with this index, or NULL when out of range. */
AO_API struct ao_buf *ao_bufpool_buf(struct ao_bufpool *pool, uint32_t index);
/* Buffers currently out (got and not yet put for the last time). */
AO_API uint32_t ao_bufpool_in_use(const struct ao_bufpool *pool);
/* Statistics of one shard; 0 or -EINVAL for a bad shard number. */
AO_API int ao_bufpool_shard_stats(const struct ao_bufpool *pool, uint32_t shard,
				  struct ao_bufpool_shard_stats *st);
/* Totals over every shard. */
AO_API void ao_bufpool_stats(const struct ao_bufpool *pool,
			     struct ao_bufpool_stats *st);
/* Print the statistics and every buffer still out to f; returns in_use. */
AO_API uint32_t ao_bufpool_report(const struct ao_bufpool *pool, FILE *f);

/* A buffer with refs 1 and len 0, or NULL with errno = ENOBUFS. */
AO_API struct ao_buf *ao_buf_get(struct ao_bufpool *pool);
/* Like ao_buf_get, but wait up to timeout_ns (>= 0) for a put; NULL with
 * errno = ETIMEDOUT after it, or EINVAL for a negative timeout. */
AO_API struct ao_buf *ao_buf_get_wait(struct ao_bufpool *pool,
				      int64_t timeout_ns);
/* Take one more reference on a buffer the caller holds; returns buf. */
AO_API struct ao_buf *ao_buf_ref(struct ao_buf *buf);
/* Drop a reference; the last one returns the buffer to its pool (NULL:
 * nothing). */
AO_API void ao_buf_put(struct ao_buf *buf);

/* The buffer's index in the arena (its io_uring buffer id). */
static inline uint32_t ao_buf_index(const struct ao_buf *buf)
{
	return buf->index;
}

/* Scope guard: the buffer is put when the variable goes out of scope. */
static inline void ao__buf_put_cleanup(struct ao_buf **bp)
{
	ao_buf_put(*bp);
}
#define __ao_buf_auto __attribute__((cleanup(ao__buf_put_cleanup)))

#endif /* AORTA_CORE_BUFPOOL_H */
