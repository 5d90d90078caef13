// SPDX-License-Identifier: MIT
/* ao-echo's main(), apart from echo.c so that a test can link the rest. */
#include "load.h"

int main(int argc, char **argv)
{
	return load_main(argc, argv);
}
