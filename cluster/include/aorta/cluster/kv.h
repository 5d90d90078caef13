/* SPDX-License-Identifier: MIT */
/*
 * A directory on JetStream KV: a bucket in memory storage keeping one
 * revision per key, written only by compare-and-set, so that two nodes can
 * never both own a key.
 *
 *	struct ao_kv *dir;
 *	ao_kv_open(node, "AO_ROOMS", true, &dir);	(blocks: setup)
 *	ao_kv_create(dir, "room.7", val, len, &room->strand, on_claim, room);
 *	...
 *	static void on_claim(int err, const struct ao_kv_entry *e, void *arg)
 *	{
 *		err == 0: ours, at revision e->revision
 *		err == -EEXIST: somebody else's: read it with ao_kv_get()
 *	}
 *
 * cnats' KV calls block on the network.  The asynchronous forms run them
 * on a thread of the node's own and complete on the caller's strand; the
 * _sync forms block the calling thread: never call them from a ring
 * thread, a tick or any strand that must stay responsive.
 *
 * Errors: -ENOENT (no such key, or deleted), -EEXIST (create of a key that
 * exists), -ESTALE (update or delete at a revision that is not the key's
 * last), -ENOTCONN (the bus is down), -ETIMEDOUT, -EINVAL, -ENOMEM, -EIO
 * (anything else the server said).
 */
#ifndef AORTA_CLUSTER_KV_H
#define AORTA_CLUSTER_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <aorta/compiler.h>

struct ao_node;
struct ao_strand;
struct ao_kv;

/* Longest key, with its NUL; keys are [A-Za-z0-9_=./-]+. */
#define AO_KV_KEY_MAX 256u

/* One entry, lent for the callback. */
struct ao_kv_entry {
	const char *key;
	const void *value; /* NULL for a delete or an error */
	size_t len;
	uint64_t revision; /* the key's revision after the operation */
};

/* An operation's completion, on the caller's strand. */
typedef void (*ao_kv_fn)(int err, const struct ao_kv_entry *e, void *arg);
/* ao_kv_keys()' completion: n keys (lent for the call). */
typedef void (*ao_kv_keys_fn)(int err, const char *const *keys, size_t n,
			      void *arg);

/* Open bucket (memory storage, history 1, no TTL), creating it if create
 * and it is missing.  Blocks.  -ENOENT (missing and !create), -ENOTCONN. */
AO_API int ao_kv_open(struct ao_node *node, const char *bucket, bool create,
		      struct ao_kv **out);
/* Forget the handle (the bucket stays).  Waits for its operations to
 * complete: never call it from a strand one of them completes on. */
AO_API void ao_kv_close(struct ao_kv *kv);
/* Delete the bucket on the server.  Blocks.  Then close the handle. */
AO_API int ao_kv_destroy_bucket(struct ao_kv *kv);

/* Asynchronous forms: 0 and fn runs exactly once on strand s (NULL: the
 * node's strand), or a negative errno and fn is not called (-ENOMEM,
 * -EINVAL, -ESHUTDOWN). */

/* Read a key: its value and revision. */
AO_API int ao_kv_get(struct ao_kv *kv, const char *key, struct ao_strand *s,
		     ao_kv_fn fn, void *arg);
/* Write a key only if it does not exist (or was deleted). */
AO_API int ao_kv_create(struct ao_kv *kv, const char *key, const void *data,
			size_t len, struct ao_strand *s, ao_kv_fn fn,
			void *arg);
/* Write a key only if its last revision is rev. */
AO_API int ao_kv_update(struct ao_kv *kv, const char *key, const void *data,
			size_t len, uint64_t rev, struct ao_strand *s,
			ao_kv_fn fn, void *arg);
/* Delete a key only if its last revision is rev (0: whatever it is). */
AO_API int ao_kv_delete(struct ao_kv *kv, const char *key, uint64_t rev,
			struct ao_strand *s, ao_kv_fn fn, void *arg);
/* List the live keys. */
AO_API int ao_kv_keys(struct ao_kv *kv, struct ao_strand *s, ao_kv_keys_fn fn,
		      void *arg);

/* Synchronous forms: they block (see above). */

/* Read into buf (cap bytes): *len gets the value's length (-EMSGSIZE if
 * larger than cap, *len still set), *rev its revision (either may be
 * NULL). */
AO_API int ao_kv_get_sync(struct ao_kv *kv, const char *key, void *buf,
			  size_t cap, size_t *len, uint64_t *rev);
/* Create; *rev (may be NULL) gets the new revision. */
AO_API int ao_kv_create_sync(struct ao_kv *kv, const char *key,
			     const void *data, size_t len, uint64_t *rev);
/* Update at rev; *new_rev (may be NULL) gets the new revision. */
AO_API int ao_kv_update_sync(struct ao_kv *kv, const char *key,
			     const void *data, size_t len, uint64_t rev,
			     uint64_t *new_rev);
/* Delete at rev (0: whatever it is). */
AO_API int ao_kv_delete_sync(struct ao_kv *kv, const char *key, uint64_t rev);
/* The live keys: *keys is one malloc'ed block (free() it), *n of them. */
AO_API int ao_kv_keys_sync(struct ao_kv *kv, char ***keys, size_t *n);

#endif /* AORTA_CLUSTER_KV_H */
