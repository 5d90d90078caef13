/* SPDX-License-Identifier: MIT */
/*
 * Process-private futex wait and wake: the only way anything in aorta
 * sleeps.
 */
#ifndef AORTA_SYNC_FUTEX_H
#define AORTA_SYNC_FUTEX_H

#include <stdint.h>
#include <aorta/compiler.h>

/*
 * Sleep while *uaddr == val, for at most timeout_ns (< 0: no timeout).
 * Returns 0 when woken (or spuriously), -EAGAIN when *uaddr != val already,
 * -ETIMEDOUT, or -EINTR.  Callers re-check their condition in every case.
 */
AO_API int ao_futex_wait(uint32_t *uaddr, uint32_t val, int64_t timeout_ns);
/* Wake up to n sleepers on uaddr; returns how many woke, or -errno. */
AO_API int ao_futex_wake(uint32_t *uaddr, int n);

#endif /* AORTA_SYNC_FUTEX_H */
