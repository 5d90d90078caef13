/* SPDX-License-Identifier: MIT */
/*
 * <liburing.h>, clean under sparse.  liburing.h includes glibc's
 * <sys/uio.h> and then <linux/fs.h>, which define RWF_* differently; gcc
 * is silent about that in system headers, sparse is not.  Let the
 * kernel's definitions stand.  Not installed (not under aorta/): for
 * io/uring.c and the tools' io_uring engine.
 */
#ifndef AORTA_LIBURING_SPARSE_H
#define AORTA_LIBURING_SPARSE_H

#ifdef __CHECKER__
#include <sys/uio.h>
#undef RWF_HIPRI
#undef RWF_DSYNC
#undef RWF_SYNC
#undef RWF_NOWAIT
#undef RWF_APPEND
#endif
#include <liburing.h>

#endif /* AORTA_LIBURING_SPARSE_H */
