// SPDX-License-Identifier: MIT
/* Built against the installed tree by tests/install-test.sh. */
#include <stdio.h>
#include <aorta/clock.h>
#include <aorta/sync/spinlock.h>

static struct ao_spinlock lock = AO_SPINLOCK_INIT;

int main(void)
{
	ao_spin_lock(&lock);
	ao_spin_unlock(&lock);
	printf("aorta %s on %s: lock ok, %llu cycles/s\n", AO_VERSION,
	       ao_arch_name(), (unsigned long long)ao_cycles_per_sec());
	return 0;
}
