/* spinexec: a target whose hot thread execs, for the fault suite's perf
 * episodes (tests/faults/test_perf.py).
 *
 *   spinexec [--spin-ms MS] [--execs N]
 *
 * One thread, the main one, burns CPU in spin_main -> spin_leaf for MS ms
 * (default 3000) of wall time, then execs its own executable again with N
 * - 1 (default 3), keeping its pid and tid; the last one, after its burn,
 * prints "done" and sleeps until SIGTERM or 60 s.  The first prints, flushing
 * stdout: "pid P", "hot P", "ready".
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "number.h"

static volatile uint64_t sink;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

__attribute__((noinline)) static uint64_t spin_leaf(uint64_t x)
{
	for (int i = 0; i < 100000; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	return x;
}

__attribute__((noinline)) static void spin_main(int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms, x = 1;

	while (now_ms() < end)
		x = spin_leaf(x);
	sink = x;
}

int main(int argc, char **argv)
{
	int ms = 3000, execs = 3;
	bool again = false;
	char msbuf[16], nbuf[16];

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--spin-ms") == 0 && i + 1 < argc)
			ms = target_number("spinexec", argv[++i], 1, 600000, "--spin-ms");
		else if (strcmp(argv[i], "--execs") == 0 && i + 1 < argc)
			execs = target_number("spinexec", argv[++i], 0, 1000, "--execs");
		else if (strcmp(argv[i], "--again") == 0)
			again = true;
		else {
			fprintf(stderr, "usage: spinexec [--spin-ms MS] [--execs N]\n");
			return 2;
		}
	}
	if (!again) {
		printf("pid %d\nhot %d\nready\n", (int)getpid(), (int)getpid());
		fflush(stdout);
	}
	spin_main(ms);
	if (execs > 0) {
		snprintf(msbuf, sizeof msbuf, "%d", ms);
		snprintf(nbuf, sizeof nbuf, "%d", execs - 1);
		execl("/proc/self/exe", argv[0], "--spin-ms", msbuf, "--execs", nbuf, "--again",
		      (char *)NULL);
		perror("spinexec: exec");
		return 1;
	}
	printf("done\n");
	fflush(stdout);
	sleep(60);
	return 0;
}
