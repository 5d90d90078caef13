// SPDX-License-Identifier: MIT
/*
 * arch/: the cycle counter and its calibration, cpu_relax and barriers,
 * and the compiler helpers.
 */
#include <string.h>
#include <aorta/clock.h>
#include <aorta/compiler.h>
#include "helpers.h"

static void test_calibration(void **state)
{
	uint64_t c0, c1, t0, t1, ns;

	(void)state;
	assert_int_equal(ao_clock_calibrate(), 0);
	assert_true(ao_cycles_per_sec() > 1000000);
	assert_true(ao_relax_ns16() > 0);
	/* Over a 20 ms sleep the converted cycle count matches the clock.
	 * The bound is loose (a factor of 2): it catches a wrong scale or a
	 * unit error, not jitter. */
	t0 = ao_now_ns();
	c0 = ao_cycles();
	t_sleep_ns(20000000);
	c1 = ao_cycles();
	t1 = ao_now_ns();
	ns = ao_cycles_to_ns(c1 - c0);
	assert_true(ns > (t1 - t0) / 2);
	assert_true(ns < (t1 - t0) * 2);
}

static void test_conversions(void **state)
{
	uint64_t x = 123456789;
	uint64_t back;

	(void)state;
	assert_int_equal(ao_cycles_to_ns(0), 0);
	assert_int_equal(ao_ns_to_cycles(0), 0);
	back = ao_cycles_to_ns(ao_ns_to_cycles(x));
	assert_true(back > x - x / 100 && back < x + x / 100);
	/* Monotonic. */
	for (int i = 0; i < 1000; i++) {
		uint64_t a = ao_cycles(), b = ao_cycles();

		assert_true(b >= a);
	}
	{
		uint64_t a = ao_now_ns(), b = ao_now_ns();

		assert_true(b >= a);
	}
}

static void test_arch_name(void **state)
{
	(void)state;
	assert_non_null(ao_arch_name());
	assert_string_equal(ao_arch_name(), AO_ARCH_NAME);
}

struct outer {
	int a;
	long b;
	char c[3];
};

static void test_compiler_helpers(void **state)
{
	struct outer o;
	int arr[7];
	long v = 0;

	(void)state;
	assert_ptr_equal(container_of(&o.b, struct outer, b), &o);
	assert_ptr_equal(container_of(&o.c[0], struct outer, c), &o);
	assert_int_equal(ARRAY_SIZE(arr), 7);
	WRITE_ONCE(v, 42);
	assert_int_equal(READ_ONCE(v), 42);
	assert_true(likely(1));
	assert_false(unlikely(0));
	/* They must execute (and not fault) on this architecture. */
	cpu_relax();
	ao_mb();
	ao_rmb();
	ao_wmb();
	barrier();
	assert_int_equal(AO_CACHELINE_SIZE & (AO_CACHELINE_SIZE - 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_calibration),
		cmocka_unit_test(test_conversions),
		cmocka_unit_test(test_arch_name),
		cmocka_unit_test(test_compiler_helpers),
	};

	return cmocka_run_group_tests_name("arch", tests, NULL, NULL);
}
