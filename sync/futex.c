// SPDX-License-Identifier: MIT
/*
 * Futex wrapper.  FUTEX_PRIVATE_FLAG: our futexes are never shared between
 * processes, and private ones skip the mm lookup in the kernel.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <aorta/sync/futex.h>

int ao_futex_wait(uint32_t *uaddr, uint32_t val, int64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL;
	long r;

	if (timeout_ns >= 0) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000);
		ts.tv_nsec = (long)(timeout_ns % 1000000000);
		tsp = &ts;
	}
	/* FUTEX_WAIT's timeout is relative (CLOCK_MONOTONIC). */
	r = syscall(SYS_futex, uaddr, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, val, tsp,
		    NULL, 0);
	return r == 0 ? 0 : -errno;
}

int ao_futex_wake(uint32_t *uaddr, int n)
{
	long r;

	if (n <= 0)
		return -EINVAL;
	r = syscall(SYS_futex, uaddr, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL,
		    NULL, 0);
	return r < 0 ? -errno : (int)r;
}
