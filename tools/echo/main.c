// SPDX-License-Identifier: MIT
/* ao-echo's main(), apart from echo.c so that a test can link the rest. */
#include "echo.h"

int main(int argc, char **argv)
{
	return echo_main(argc, argv);
}
