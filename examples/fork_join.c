// SPDX-License-Identifier: MIT
/*
 * fork_join: a parallel merge sort with groups on the work-stealing
 * executor.
 *
 *	fork_join [N [WORKERS]]		(default 1000000 numbers, one worker
 *					 per CPU)
 *
 * Each call splits its range in two, submits the left half to the
 * executor as a group item (the fork), sorts the right half itself, and
 * waits for the group (the join) before merging.  The groups live on the
 * stack of the call that waits for them.
 *
 * A wait on one of the executor's workers does not block the worker: it
 * runs other queued items meanwhile (often its own left half, which no
 * thief took), so waiting for children can never deadlock the pool, even
 * with one worker.  With AO_EXEC_STEAL a worker pushes its forks on its
 * own deque and idle workers steal the oldest, biggest halves.
 *
 * It checks the result against qsort() and prints both times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/clock.h>
#include <aorta/core/exec.h>
#include <aorta/core/group.h>

#define CUTOFF 4096 /* below this, sort serially: a task costs more */

struct sort {
	struct ao_group_work gw; /* the item: runs sort_run() */
	struct ao_exec *ex;
	int *v, *tmp;
	size_t n;
};

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

static void merge(int *v, int *tmp, size_t mid, size_t n)
{
	size_t i = 0, j = mid, k = 0;

	while (i < mid && j < n)
		tmp[k++] = v[j] < v[i] ? v[j++] : v[i++];
	while (i < mid)
		tmp[k++] = v[i++];
	while (j < n)
		tmp[k++] = v[j++];
	memcpy(v, tmp, n * sizeof(*v));
}

static void sort_run(struct ao_work *w);

static void sort(struct ao_exec *ex, int *v, int *tmp, size_t n)
{
	struct sort left;
	struct ao_group g;
	size_t mid = n / 2;

	if (n <= CUTOFF) {
		qsort(v, n, sizeof(*v), cmp_int);
		return;
	}
	/* Fork: the left half becomes an item of this call's group. */
	left = (struct sort){ .ex = ex, .v = v, .tmp = tmp, .n = mid };
	ao_group_init(&g, ex);
	ao_group_work_init(&left.gw, sort_run);
	if (ao_group_submit(&g, &left.gw))
		sort(ex, v, tmp, mid); /* refused (shutting down): do it here */
	sort(ex, v + mid, tmp + mid, n - mid);
	/* Join: on a worker, runs queued items until the left half is done. */
	ao_group_wait(&g);
	merge(v, tmp, mid, n);
}

static void sort_run(struct ao_work *w)
{
	struct ao_group_work *gw = container_of(w, struct ao_group_work, work);
	struct sort *s = container_of(gw, struct sort, gw);

	sort(s->ex, s->v, s->tmp, s->n);
}

int main(int argc, char **argv)
{
	struct ao_exec_config cfg = AO_EXEC_CONFIG_INIT;
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
	struct ao_exec_stats st;
	struct ao_exec *ex;
	struct ao_group root;
	struct sort top;
	int *v, *check, *tmp;
	uint64_t t0, t1, t2;
	int err;

	cfg.kind = AO_EXEC_STEAL;
	cfg.workers = argc > 2 ? (unsigned int)atoi(argv[2]) : 0;
	v = malloc(n * sizeof(*v));
	check = malloc(n * sizeof(*v));
	tmp = malloc(n * sizeof(*v));
	if (!v || !check || !tmp || n < 1)
		return 1;
	srand(42);
	for (size_t i = 0; i < n; i++)
		v[i] = check[i] = rand();
	err = ao_exec_create(&cfg, &ex);
	if (err) {
		fprintf(stderr, "fork_join: %s\n", strerror(-err));
		return 1;
	}

	/* The root task runs on a worker too, so that every wait below it
	 * helps instead of blocking; main waits for it with a group. */
	t0 = ao_now_ns();
	top = (struct sort){ .ex = ex, .v = v, .tmp = tmp, .n = n };
	ao_group_init(&root, ex);
	ao_group_work_init(&top.gw, sort_run);
	if (ao_group_submit(&root, &top.gw))
		return 1;
	ao_group_wait(&root);
	t1 = ao_now_ns();
	qsort(check, n, sizeof(*check), cmp_int);
	t2 = ao_now_ns();

	ao_exec_stats(ex, &st);
	printf("fork_join: %zu numbers, %u workers: %.1f ms (qsort %.1f ms), "
	       "%llu tasks, %llu stolen\n",
	       n, st.workers, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6,
	       (unsigned long long)st.executed, (unsigned long long)st.stolen);
	err = memcmp(v, check, n * sizeof(*v)) != 0;
	if (err)
		fprintf(stderr, "fork_join: the result is not sorted\n");
	ao_exec_destroy(ex);
	free(v);
	free(check);
	free(tmp);
	return err;
}
