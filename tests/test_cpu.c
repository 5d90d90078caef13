// SPDX-License-Identifier: MIT
/*
 * Pool sizing: ao_cpu_count() follows a restricted affinity mask and a
 * cgroup v2 cpu.max quota (parsed, and found up a fake cgroup tree);
 * ao_pool_size_io() is cores * (1 + wait / compute).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <aorta/core/cpu.h>
#include "../core/cpu_priv.h"
#include "helpers.h"

static void test_count_sane(void **state)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	assert_true(ao_cpu_count() >= 1);
	assert_true(ao_cpu_count() <= ao_cpu_count_affinity());
	assert_true((long)ao_cpu_count_affinity() <= online);
	if (ao_cpu_quota())
		assert_true(ao_cpu_count() <= ao_cpu_quota());
}

static void test_affinity_mask(void **state)
{
	cpu_set_t old, one;
	int first = -1;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(old), &old), 0);
	for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
		if (CPU_ISSET(c, &old))
			first = c;
	assert_true(first >= 0);
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	assert_int_equal(ao_cpu_count_affinity(), 1);
	assert_int_equal(ao_cpu_count(), 1);
	/* One CPU, I/O-bound 3:1: 1 * (1 + 3) = 4 workers. */
	assert_int_equal(ao_pool_size_io(3.0, 1.0), 4);
	assert_int_equal(sched_setaffinity(0, sizeof(old), &old), 0);
	assert_int_equal(ao_cpu_count_affinity(), (unsigned)CPU_COUNT(&old));
}

static void test_cpu_max_parse(void **state)
{
	(void)state;
	assert_int_equal(ao__cpu_max_parse("max 100000\n"), 0);
	assert_int_equal(ao__cpu_max_parse("100000 100000\n"), 1);
	assert_int_equal(ao__cpu_max_parse("150000 100000\n"), 2);
	assert_int_equal(ao__cpu_max_parse("50000 100000"), 1);
	assert_int_equal(ao__cpu_max_parse("400000 100000\n"), 4);
	assert_int_equal(ao__cpu_max_parse(""), 0);
	assert_int_equal(ao__cpu_max_parse("garbage"), 0);
	assert_int_equal(ao__cpu_max_parse("100 0"), 0);
	assert_int_equal(ao__cpu_max_parse(NULL), 0);
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_quota_tree(void **state)
{
	char root[] = "/tmp/ao-cgroup-XXXXXX";
	char p[256];

	(void)state;
	assert_non_null(mkdtemp(root));
	snprintf(p, sizeof(p), "%s/a", root);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/a/b", root);
	assert_int_equal(mkdir(p, 0700), 0);
	/* No cpu.max anywhere: no quota. */
	assert_int_equal(ao__cpu_quota_at(root, "/a/b"), 0);
	/* A limit on the leaf. */
	snprintf(p, sizeof(p), "%s/a/b/cpu.max", root);
	put(p, "300000 100000\n");
	assert_int_equal(ao__cpu_quota_at(root, "/a/b"), 3);
	assert_int_equal(ao__cpu_quota_at(root, "/a/b/"), 3);
	/* A tighter one on an ancestor wins. */
	snprintf(p, sizeof(p), "%s/a/cpu.max", root);
	put(p, "120000 100000\n");
	assert_int_equal(ao__cpu_quota_at(root, "/a/b"), 2);
	/* "max" is no limit; the other level still counts. */
	put(p, "max 100000\n");
	assert_int_equal(ao__cpu_quota_at(root, "/a/b"), 3);
	assert_int_equal(ao__cpu_quota_at(root, "/"), 0);
	snprintf(p, sizeof(p), "%s/a/b/cpu.max", root);
	unlink(p);
	snprintf(p, sizeof(p), "%s/a/cpu.max", root);
	unlink(p);
	snprintf(p, sizeof(p), "%s/a/b", root);
	rmdir(p);
	snprintf(p, sizeof(p), "%s/a", root);
	rmdir(p);
	rmdir(root);
}

static void test_pool_size_io(void **state)
{
	int n = (int)ao_cpu_count();

	(void)state;
	/* CPU-bound: the cores. */
	assert_int_equal(ao_pool_size_io(0, 1), n);
	/* Waits as long as it computes: twice the cores. */
	assert_int_equal(ao_pool_size_io(10, 10), 2 * n);
	assert_int_equal(ao_pool_size_io(90, 10), 10 * n);
	assert_int_equal(ao_pool_size_io(1, 0), -EINVAL);
	assert_int_equal(ao_pool_size_io(-1, 1), -EINVAL);
	assert_int_equal(ao_pool_size_io(1e12, 1), AO_POOL_SIZE_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_count_sane),
		cmocka_unit_test(test_affinity_mask),
		cmocka_unit_test(test_cpu_max_parse),
		cmocka_unit_test(test_quota_tree),
		cmocka_unit_test(test_pool_size_io),
	};

	return cmocka_run_group_tests_name("cpu", tests, NULL, NULL);
}
