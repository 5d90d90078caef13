// SPDX-License-Identifier: MIT
/*
 * The cluster API built without cnats (no nats.h): every function that can
 * fail returns -ENOSYS, so that programs link and can say the bus is
 * missing.
 */
#include <errno.h>
#include <stddef.h>
#include <aorta/cluster/kv.h>
#include <aorta/cluster/node.h>

int ao_node_create(const struct ao_node_config *cfg, struct ao_node **out)
{
	(void)cfg;
	if (out)
		*out = NULL;
	return -ENOSYS;
}

int ao_node_start(struct ao_node *node)
{
	(void)node;
	return -ENOSYS;
}

int ao_node_stop(struct ao_node *node)
{
	(void)node;
	return -ENOSYS;
}

int ao_node_destroy(struct ao_node *node)
{
	(void)node;
	return 0;
}

const char *ao_node_name(const struct ao_node *node)
{
	(void)node;
	return "";
}

uint64_t ao_node_epoch(const struct ao_node *node)
{
	(void)node;
	return 0;
}

void ao_node_set_load(struct ao_node *node, uint64_t load)
{
	(void)node;
	(void)load;
}

size_t ao_node_peers(struct ao_node *node, struct ao_peer *out, size_t max)
{
	(void)node;
	(void)out;
	(void)max;
	return 0;
}

int ao_node_peer(struct ao_node *node, const char *name, struct ao_peer *out)
{
	(void)node;
	(void)name;
	(void)out;
	return -ENOSYS;
}

bool ao_node_self_fresh(struct ao_node *node, uint32_t within_ms)
{
	(void)node;
	(void)within_ms;
	return false;
}

bool ao_node_connected(struct ao_node *node)
{
	(void)node;
	return false;
}

void ao_node_stats(struct ao_node *node, struct ao_node_stats *st)
{
	(void)node;
	*st = (struct ao_node_stats){ 0 };
}

int ao_node_subscribe(struct ao_node *node, const char *subject,
		      const char *queue, struct ao_strand *s, ao_msg_fn handler,
		      void *arg, struct ao_sub **out)
{
	(void)node;
	(void)subject;
	(void)queue;
	(void)s;
	(void)handler;
	(void)arg;
	if (out)
		*out = NULL;
	return -ENOSYS;
}

int ao_sub_close(struct ao_sub *sub)
{
	(void)sub;
	return -ENOSYS;
}

int ao_node_publish(struct ao_node *node, const char *subject, const void *data,
		    size_t len)
{
	(void)node;
	(void)subject;
	(void)data;
	(void)len;
	return -ENOSYS;
}

int ao_node_publish_buf(struct ao_node *node, const char *subject,
			const struct ao_buf *buf)
{
	(void)node;
	(void)subject;
	(void)buf;
	return -ENOSYS;
}

int ao_node_request(struct ao_node *node, const char *subject, const void *data,
		    size_t len, uint32_t timeout_ms, struct ao_strand *s,
		    ao_reply_fn reply, void *arg)
{
	(void)node;
	(void)subject;
	(void)data;
	(void)len;
	(void)timeout_ms;
	(void)s;
	(void)reply;
	(void)arg;
	return -ENOSYS;
}

int ao_node_respond(struct ao_node *node, const struct ao_msg *msg,
		    const void *data, size_t len)
{
	(void)node;
	(void)msg;
	(void)data;
	(void)len;
	return -ENOSYS;
}

int ao_kv_open(struct ao_node *node, const char *bucket, bool create,
	       struct ao_kv **out)
{
	(void)node;
	(void)bucket;
	(void)create;
	if (out)
		*out = NULL;
	return -ENOSYS;
}

void ao_kv_close(struct ao_kv *kv)
{
	(void)kv;
}

int ao_kv_destroy_bucket(struct ao_kv *kv)
{
	(void)kv;
	return -ENOSYS;
}

int ao_kv_get(struct ao_kv *kv, const char *key, struct ao_strand *s,
	      ao_kv_fn fn, void *arg)
{
	(void)kv;
	(void)key;
	(void)s;
	(void)fn;
	(void)arg;
	return -ENOSYS;
}

int ao_kv_create(struct ao_kv *kv, const char *key, const void *data,
		 size_t len, struct ao_strand *s, ao_kv_fn fn, void *arg)
{
	(void)kv;
	(void)key;
	(void)data;
	(void)len;
	(void)s;
	(void)fn;
	(void)arg;
	return -ENOSYS;
}

int ao_kv_update(struct ao_kv *kv, const char *key, const void *data,
		 size_t len, uint64_t rev, struct ao_strand *s, ao_kv_fn fn,
		 void *arg)
{
	(void)kv;
	(void)key;
	(void)data;
	(void)len;
	(void)rev;
	(void)s;
	(void)fn;
	(void)arg;
	return -ENOSYS;
}

int ao_kv_delete(struct ao_kv *kv, const char *key, uint64_t rev,
		 struct ao_strand *s, ao_kv_fn fn, void *arg)
{
	(void)kv;
	(void)key;
	(void)rev;
	(void)s;
	(void)fn;
	(void)arg;
	return -ENOSYS;
}

int ao_kv_keys(struct ao_kv *kv, struct ao_strand *s, ao_kv_keys_fn fn,
	       void *arg)
{
	(void)kv;
	(void)s;
	(void)fn;
	(void)arg;
	return -ENOSYS;
}

int ao_kv_get_sync(struct ao_kv *kv, const char *key, void *buf, size_t cap,
		   size_t *len, uint64_t *rev)
{
	(void)kv;
	(void)key;
	(void)buf;
	(void)cap;
	(void)len;
	(void)rev;
	return -ENOSYS;
}

int ao_kv_create_sync(struct ao_kv *kv, const char *key, const void *data,
		      size_t len, uint64_t *rev)
{
	(void)kv;
	(void)key;
	(void)data;
	(void)len;
	(void)rev;
	return -ENOSYS;
}

int ao_kv_update_sync(struct ao_kv *kv, const char *key, const void *data,
		      size_t len, uint64_t rev, uint64_t *new_rev)
{
	(void)kv;
	(void)key;
	(void)data;
	(void)len;
	(void)rev;
	(void)new_rev;
	return -ENOSYS;
}

int ao_kv_delete_sync(struct ao_kv *kv, const char *key, uint64_t rev)
{
	(void)kv;
	(void)key;
	(void)rev;
	return -ENOSYS;
}

int ao_kv_keys_sync(struct ao_kv *kv, char ***keys, size_t *n)
{
	(void)kv;
	if (keys)
		*keys = NULL;
	if (n)
		*n = 0;
	return -ENOSYS;
}
