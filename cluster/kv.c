// SPDX-License-Identifier: MIT
/*
 * The directory on JetStream KV (aorta/cluster/kv.h).
 *
 * Every write is a compare-and-set: a JetStream publish to $KV.<bucket>.<key>
 * with the header that says which revision (stream sequence of the key's
 * last message) the writer expects, 0 for "none".  The server refuses a
 * wrong one with error 10071 (wrong last sequence): -EEXIST for a create,
 * -ESTALE for an update or a delete.  A create over a delete tombstone is
 * an update at the tombstone's revision, as cnats' own kvStore_Create does.
 *
 * cnats' calls block until the server's ack: the asynchronous forms run
 * them on the node's KV thread (a one-worker executor of its own, never a
 * ring thread or a tick) and complete on the caller's strand.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <aorta/core/exec.h>
#include "cluster_priv.h"

/* How long a KV call waits for the server's answer. */
#define KV_WAIT_MS 2000
#define KV_OP_HEADER "KV-Operation"

struct ao_kv {
	struct ao_node *node;
	kvStore *store;
	int pending; /* atomic: asynchronous operations in flight */
	char bucket[64];
	char stream[72]; /* KV_<bucket> */
};

enum kv_kind { KV_GET, KV_CREATE, KV_UPDATE, KV_DELETE, KV_KEYS };

struct kv_op {
	struct ao_work work; /* on the KV thread, then on s */
	struct ao_kv *kv;
	enum kv_kind kind;
	struct ao_strand *s;
	ao_kv_fn fn;
	ao_kv_keys_fn keys_fn;
	void *arg;
	uint64_t rev;
	int err;
	void *value; /* get: the value read (malloc'ed) */
	size_t len;
	char **keys; /* keys: the list */
	size_t nkeys;
	void *data; /* create, update: the value to write */
	char key[AO_KV_KEY_MAX];
};

static bool valid_key(const char *key)
{
	size_t n = 0;

	if (!key)
		return false;
	for (; key[n]; n++) {
		char c = key[n];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
		      c == '=' || c == '/' || c == '.'))
			return false;
	}
	return n > 0 && n < AO_KV_KEY_MAX && key[0] != '.' && key[n - 1] != '.';
}

static bool valid_bucket(const char *b)
{
	size_t n = 0;

	if (!b)
		return false;
	for (; b[n]; n++) {
		char c = b[n];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return n > 0 && n < 64;
}

static int kv_errno(natsStatus s, jsErrCode jerr, int conflict)
{
	if (s == NATS_OK)
		return 0;
	if (jerr == JSStreamWrongLastSequenceErr)
		return conflict;
	return ao__nats_errno(s);
}

static void kv_count(struct ao_node *node, int err)
{
	node_count(node, kv_ops, 1);
	if (err == -EEXIST || err == -ESTALE)
		node_count(node, kv_conflicts, 1);
	else if (err && err != -ENOENT)
		node_count(node, kv_errors, 1);
}

static int kv_ready(struct ao_kv *kv)
{
	if (!kv)
		return -EINVAL;
	if (!ao_node_connected(kv->node))
		return -ENOTCONN;
	return 0;
}

int ao_kv_open(struct ao_node *node, const char *bucket, bool create,
	       struct ao_kv **out)
{
	struct ao_kv *kv;
	kvConfig cfg;
	natsStatus s;
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!node || !valid_bucket(bucket))
		return -EINVAL;
	if (!node->js || !ao_node_connected(node))
		return -ENOTCONN;
	err = ao__node_kv_exec(node);
	if (err)
		return err;
	kv = calloc(1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->node = node;
	snprintf(kv->bucket, sizeof(kv->bucket), "%s", bucket);
	snprintf(kv->stream, sizeof(kv->stream), "KV_%s", bucket);
	s = js_KeyValue(&kv->store, node->js, bucket);
	if (s == NATS_NOT_FOUND && create) {
		kvConfig_Init(&cfg);
		cfg.Bucket = bucket;
		cfg.History = 1;
		cfg.StorageType = js_MemoryStorage;
		cfg.Replicas = 1;
		s = js_CreateKeyValue(&kv->store, node->js, &cfg);
	}
	if (s != NATS_OK) {
		free(kv);
		return ao__nats_errno(s);
	}
	*out = kv;
	return 0;
}

void ao_kv_close(struct ao_kv *kv)
{
	struct timespec ms = { 0, 1000000 };

	if (!kv)
		return;
	/* Acquire: pairs with the release in kv_done(). */
	while (__atomic_load_n(&kv->pending, __ATOMIC_ACQUIRE))
		nanosleep(&ms, NULL);
	kvStore_Destroy(kv->store);
	free(kv);
}

int ao_kv_destroy_bucket(struct ao_kv *kv)
{
	int err = kv_ready(kv);

	if (err)
		return err;
	return ao__nats_errno(js_DeleteKeyValue(kv->node->js, kv->bucket));
}

static void pub_options(jsPubOptions *po, uint64_t rev)
{
	jsPubOptions_Init(po);
	po->MaxWait = KV_WAIT_MS;
	if (rev)
		po->ExpectLastSubjectSeq = rev;
	else
		po->ExpectNoMessage = true;
}

/* Write data at revision rev (0: the key must not exist). */
static int kv_put(struct ao_kv *kv, const char *key, const void *data,
		  size_t len, uint64_t rev, uint64_t *new_rev, int conflict)
{
	char subject[AO_KV_KEY_MAX + 80];
	jsPubAck *pa = NULL;
	jsErrCode jerr = 0;
	jsPubOptions po;
	natsStatus s;
	int err;

	snprintf(subject, sizeof(subject), "$KV.%s.%s", kv->bucket, key);
	pub_options(&po, rev);
	s = js_Publish(&pa, kv->node->js, subject, data, (int)len, &po, &jerr);
	err = kv_errno(s, jerr, conflict);
	if (!err && new_rev)
		*new_rev = pa->Sequence;
	jsPubAck_Destroy(pa);
	return err;
}

/* The key's last message is a delete or purge marker: its revision. */
static int kv_tombstone(struct ao_kv *kv, const char *key, uint64_t *rev)
{
	char subject[AO_KV_KEY_MAX + 80];
	natsMsg *m = NULL;
	jsErrCode jerr = 0;
	const char *op = NULL;
	jsOptions o;
	natsStatus s;
	int err = -EEXIST;

	snprintf(subject, sizeof(subject), "$KV.%s.%s", kv->bucket, key);
	jsOptions_Init(&o);
	o.Wait = KV_WAIT_MS;
	s = js_GetLastMsg(&m, kv->node->js, kv->stream, subject, &o, &jerr);
	if (s != NATS_OK)
		return s == NATS_NOT_FOUND ? -EAGAIN : ao__nats_errno(s);
	if (natsMsgHeader_Get(m, KV_OP_HEADER, &op) == NATS_OK && op &&
	    (!strcmp(op, "DEL") || !strcmp(op, "PURGE"))) {
		*rev = natsMsg_GetSequence(m);
		err = 0;
	}
	natsMsg_Destroy(m);
	return err;
}

static int do_create(struct ao_kv *kv, const char *key, const void *data,
		     size_t len, uint64_t *rev)
{
	uint64_t tomb;
	int err, tries;

	for (tries = 0; tries < 3; tries++) {
		err = kv_put(kv, key, data, len, 0, rev, -EEXIST);
		if (err != -EEXIST)
			return err;
		/* Exists: live, or only a delete marker? */
		err = kv_tombstone(kv, key, &tomb);
		if (err == -EAGAIN)
			continue; /* gone meanwhile: try again */
		if (err)
			return err;
		err = kv_put(kv, key, data, len, tomb, rev, -EEXIST);
		if (err != -EEXIST)
			return err;
	}
	return -EEXIST;
}

static int do_get(struct ao_kv *kv, const char *key, void **value, size_t *len,
		  uint64_t *rev)
{
	kvEntry *e = NULL;
	natsStatus s;

	s = kvStore_Get(&e, kv->store, key);
	if (s != NATS_OK)
		return ao__nats_errno(s);
	*len = (size_t)kvEntry_ValueLen(e);
	*rev = kvEntry_Revision(e);
	*value = malloc(*len ? *len : 1);
	if (!*value) {
		kvEntry_Destroy(e);
		return -ENOMEM;
	}
	memcpy(*value, kvEntry_Value(e), *len);
	kvEntry_Destroy(e);
	return 0;
}

static int do_delete(struct ao_kv *kv, const char *key, uint64_t rev)
{
	char subject[AO_KV_KEY_MAX + 80];
	natsMsg *m = NULL;
	jsErrCode jerr = 0;
	jsPubOptions po;
	natsStatus s;

	snprintf(subject, sizeof(subject), "$KV.%s.%s", kv->bucket, key);
	s = natsMsg_Create(&m, subject, NULL, NULL, 0);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, KV_OP_HEADER, "DEL");
	jsPubOptions_Init(&po);
	po.MaxWait = KV_WAIT_MS;
	po.ExpectLastSubjectSeq = rev;
	if (s == NATS_OK)
		s = js_PublishMsg(NULL, kv->node->js, m, &po, &jerr);
	natsMsg_Destroy(m);
	return kv_errno(s, jerr, -ESTALE);
}

static int do_keys(struct ao_kv *kv, char ***keys, size_t *n)
{
	kvKeysList list = { 0 };
	kvWatchOptions wo;
	size_t bytes = 0, i;
	natsStatus s;
	char **out, *p;

	*keys = NULL;
	*n = 0;
	kvWatchOptions_Init(&wo);
	wo.Timeout = KV_WAIT_MS;
	s = kvStore_Keys(&list, kv->store, &wo);
	if (s == NATS_NOT_FOUND)
		return 0;
	if (s != NATS_OK)
		return ao__nats_errno(s);
	for (i = 0; i < (size_t)list.Count; i++)
		bytes += strlen(list.Keys[i]) + 1;
	/* One block: the pointers, then the strings. */
	out = malloc(list.Count * sizeof(char *) + bytes + 1);
	if (!out) {
		kvKeysList_Destroy(&list);
		return -ENOMEM;
	}
	p = (char *)(out + list.Count);
	for (i = 0; i < (size_t)list.Count; i++) {
		size_t l = strlen(list.Keys[i]) + 1;

		memcpy(p, list.Keys[i], l);
		out[i] = p;
		p += l;
	}
	*keys = out;
	*n = (size_t)list.Count;
	kvKeysList_Destroy(&list);
	return 0;
}

/* ---------------------------------------------------------------------
 * Synchronous forms
 */

int ao_kv_get_sync(struct ao_kv *kv, const char *key, void *buf, size_t cap,
		   size_t *len, uint64_t *rev)
{
	void *value = NULL;
	size_t l = 0;
	uint64_t r = 0;
	int err = kv_ready(kv);

	if (!err && !valid_key(key))
		err = -EINVAL;
	if (!err)
		err = do_get(kv, key, &value, &l, &r);
	if (!err) {
		if (len)
			*len = l;
		if (rev)
			*rev = r;
		if (l > cap)
			err = -EMSGSIZE;
		else if (l)
			memcpy(buf, value, l);
	}
	free(value);
	if (kv)
		kv_count(kv->node, err == -EMSGSIZE ? 0 : err);
	return err;
}

int ao_kv_create_sync(struct ao_kv *kv, const char *key, const void *data,
		      size_t len, uint64_t *rev)
{
	int err = kv_ready(kv);

	if (!err && (!valid_key(key) || (len && !data) || len > INT32_MAX))
		err = -EINVAL;
	if (!err)
		err = do_create(kv, key, data, len, rev);
	if (kv)
		kv_count(kv->node, err);
	return err;
}

int ao_kv_update_sync(struct ao_kv *kv, const char *key, const void *data,
		      size_t len, uint64_t rev, uint64_t *new_rev)
{
	int err = kv_ready(kv);

	if (!err &&
	    (!valid_key(key) || (len && !data) || len > INT32_MAX || !rev))
		err = -EINVAL;
	if (!err)
		err = kv_put(kv, key, data, len, rev, new_rev, -ESTALE);
	if (kv)
		kv_count(kv->node, err);
	return err;
}

int ao_kv_delete_sync(struct ao_kv *kv, const char *key, uint64_t rev)
{
	int err = kv_ready(kv);

	if (!err && !valid_key(key))
		err = -EINVAL;
	if (!err)
		err = do_delete(kv, key, rev);
	if (kv)
		kv_count(kv->node, err);
	return err;
}

int ao_kv_keys_sync(struct ao_kv *kv, char ***keys, size_t *n)
{
	int err;

	if (!keys || !n)
		return -EINVAL;
	*keys = NULL;
	*n = 0;
	err = kv_ready(kv);
	if (!err)
		err = do_keys(kv, keys, n);
	if (kv)
		kv_count(kv->node, err);
	return err;
}

/* ---------------------------------------------------------------------
 * Asynchronous forms
 */

static void kv_done(struct ao_work *w)
{
	struct kv_op *op = container_of(w, struct kv_op, work);
	struct ao_kv *kv = op->kv;

	if (op->kind == KV_KEYS) {
		op->keys_fn(op->err, (const char *const *)op->keys,
			    op->err ? 0 : op->nkeys, op->arg);
	} else {
		struct ao_kv_entry e = {
			.key = op->key,
			.value = op->err ? NULL : op->value,
			.len = op->err ? 0 : op->len,
			.revision = op->rev,
		};

		op->fn(op->err, &e, op->arg);
	}
	free(op->keys);
	free(op->value);
	free(op->data);
	free(op);
	/* Release: ao_kv_close() may free kv once it reads 0. */
	__atomic_sub_fetch(&kv->pending, 1, __ATOMIC_RELEASE);
}

/* On the KV thread: block in cnats, then go to the caller's strand. */
static void kv_run(struct ao_work *w)
{
	struct kv_op *op = container_of(w, struct kv_op, work);
	struct ao_kv *kv = op->kv;
	int err = kv_ready(kv);

	if (!err) {
		switch (op->kind) {
		case KV_GET:
			err = do_get(kv, op->key, &op->value, &op->len,
				     &op->rev);
			break;
		case KV_CREATE:
			err = do_create(kv, op->key, op->data, op->len,
					&op->rev);
			break;
		case KV_UPDATE:
			err = kv_put(kv, op->key, op->data, op->len, op->rev,
				     &op->rev, -ESTALE);
			break;
		case KV_DELETE:
			err = do_delete(kv, op->key, op->rev);
			break;
		case KV_KEYS:
			err = do_keys(kv, &op->keys, &op->nkeys);
			break;
		}
	}
	kv_count(kv->node, err);
	op->err = err;
	ao_work_init(&op->work, kv_done);
	if (ao_strand_submit(op->s, &op->work) < 0)
		kv_done(&op->work); /* shutting down: here, not lost */
}

static int kv_submit(struct ao_kv *kv, struct kv_op *op, struct ao_strand *s)
{
	int err;

	op->kv = kv;
	op->s = s ? s : &kv->node->strand;
	__atomic_add_fetch(&kv->pending, 1, __ATOMIC_RELAXED);
	ao_work_init(&op->work, kv_run);
	err = ao_exec_submit(kv->node->kv_exec, &op->work);
	if (err) {
		__atomic_sub_fetch(&kv->pending, 1, __ATOMIC_RELAXED);
		free(op->data);
		free(op);
	}
	return err;
}

static struct kv_op *op_new(enum kv_kind kind, const char *key,
			    const void *data, size_t len)
{
	struct kv_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->kind = kind;
	if (key)
		snprintf(op->key, sizeof(op->key), "%s", key);
	if (kind == KV_CREATE || kind == KV_UPDATE) {
		op->data = malloc(len ? len : 1);
		if (!op->data) {
			free(op);
			return NULL;
		}
		if (len)
			memcpy(op->data, data, len);
		op->len = len;
	}
	return op;
}

static int kv_async(struct ao_kv *kv, enum kv_kind kind, const char *key,
		    const void *data, size_t len, uint64_t rev,
		    struct ao_strand *s, ao_kv_fn fn, void *arg)
{
	struct kv_op *op;

	if (!kv || !fn || !valid_key(key) || (len && !data) || len > INT32_MAX)
		return -EINVAL;
	op = op_new(kind, key, data, len);
	if (!op)
		return -ENOMEM;
	op->rev = rev;
	op->fn = fn;
	op->arg = arg;
	return kv_submit(kv, op, s);
}

int ao_kv_get(struct ao_kv *kv, const char *key, struct ao_strand *s,
	      ao_kv_fn fn, void *arg)
{
	return kv_async(kv, KV_GET, key, NULL, 0, 0, s, fn, arg);
}

int ao_kv_create(struct ao_kv *kv, const char *key, const void *data,
		 size_t len, struct ao_strand *s, ao_kv_fn fn, void *arg)
{
	return kv_async(kv, KV_CREATE, key, data, len, 0, s, fn, arg);
}

int ao_kv_update(struct ao_kv *kv, const char *key, const void *data,
		 size_t len, uint64_t rev, struct ao_strand *s, ao_kv_fn fn,
		 void *arg)
{
	if (!rev)
		return -EINVAL;
	return kv_async(kv, KV_UPDATE, key, data, len, rev, s, fn, arg);
}

int ao_kv_delete(struct ao_kv *kv, const char *key, uint64_t rev,
		 struct ao_strand *s, ao_kv_fn fn, void *arg)
{
	return kv_async(kv, KV_DELETE, key, NULL, 0, rev, s, fn, arg);
}

int ao_kv_keys(struct ao_kv *kv, struct ao_strand *s, ao_kv_keys_fn fn,
	       void *arg)
{
	struct kv_op *op;

	if (!kv || !fn)
		return -EINVAL;
	op = op_new(KV_KEYS, NULL, NULL, 0);
	if (!op)
		return -ENOMEM;
	op->keys_fn = fn;
	op->arg = arg;
	return kv_submit(kv, op, s);
}
