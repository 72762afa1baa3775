/* twochains: one hot thread that spends a known share of its time in each
 * of two call chains, for the episode and report tests.
 *
 *   twochains [--percent-a P] [--burn-ms B] [--timeout S]
 *
 * The thread "hot-0" loops forever over parts of work, each part in
 *   chain_a_root -> chain_a_mid -> chain_a_leaf
 * with probability P %, else in
 *   chain_b_root -> chain_b_leaf
 * (default P = 80), for B milliseconds (default: until it exits), then
 * sleeps: a thread that goes idle in the middle of an episode.  A part is
 * the same fixed number of loop iterations in both leaves, so the share of
 * CPU time follows P without any clock read (a clock call would add a frame
 * and split each chain's stack in two).  Each part's chain is drawn from a
 * pseudo-random sequence, not taken in turn: whenever a sample lands, the
 * thread is in chain A with probability P %, independently of the samples
 * before it.  A fixed round (P parts of A, then the rest of B) would lock in
 * phase with a sampler whose interval is a multiple of the round's length,
 * and a quiet machine would then catch one chain only.
 * Prints "pid P", "hot T", "ready"; exits on SIGTERM or after S seconds
 * (default 120).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__clang__)
#define CHAIN __attribute__((noinline))
#else
#define CHAIN __attribute__((noinline, noclone))
#endif

/* About 50 µs per part here: hundreds of independent draws lie between two
 * samples of an episode (10 ms or more apart). */
#define ITERATIONS_PER_PART 20000

static int percent_a = 80;
static long burn_ms;
static volatile uint64_t sink;
static pid_t hot_tid;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cv = PTHREAD_COND_INITIALIZER;

static inline uint64_t work(uint64_t x, long parts)
{
	for (long i = 0; i < parts * ITERATIONS_PER_PART; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		x ^= x >> 29;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

CHAIN static uint64_t chain_a_leaf(uint64_t x, long parts) { return work(x, parts) + 1; }
CHAIN static uint64_t chain_a_mid(uint64_t x, long parts) { return chain_a_leaf(x, parts) ^ 3; }
CHAIN static uint64_t chain_a_root(uint64_t x, long parts) { return chain_a_mid(x, parts) + 5; }
CHAIN static uint64_t chain_b_leaf(uint64_t x, long parts) { return work(x, parts) + 7; }
CHAIN static uint64_t chain_b_root(uint64_t x, long parts) { return chain_b_leaf(x, parts) ^ 11; }

CHAIN static void *hot_main(void *arg)
{
	uint64_t x = 42;
	(void)arg;

	pthread_setname_np(pthread_self(), "hot-0");
	pthread_mutex_lock(&lock);
	hot_tid = (pid_t)syscall(SYS_gettid);
	pthread_cond_signal(&ready_cv);
	pthread_mutex_unlock(&lock);
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (uint64_t draw = 0x9e3779b97f4a7c15ull, parts = 0;; parts++) {
		/* xorshift64: the next draw, no call, no clock */
		draw ^= draw << 13;
		draw ^= draw >> 7;
		draw ^= draw << 17;
		if ((int)(draw % 100) < percent_a)
			x = chain_a_root(x, 1);
		else
			x = chain_b_root(x, 1);
		sink = x;
		/* Every 100 parts, in hot_main: no sample sees the clock call
		 * below a chain. */
		if (parts % 100 != 99)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (burn_ms && (now.tv_sec - start.tv_sec) * 1000 +
		               (now.tv_nsec - start.tv_nsec) / 1000000 >= burn_ms)
			break;
	}
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	int timeout = 120;
	sigset_t sigs;
	pthread_t t;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--percent-a") == 0)
			percent_a = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--timeout") == 0)
			timeout = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--burn-ms") == 0)
			burn_ms = atol(argv[i + 1]);
	}
	if (percent_a < 1 || percent_a > 99 || timeout < 1 || burn_ms < 0 || argc % 2 == 0) {
		fprintf(stderr, "usage: twochains [--percent-a 1..99] [--burn-ms MS] "
		        "[--timeout SECONDS]\n");
		return 2;
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	if (pthread_create(&t, NULL, hot_main, NULL) != 0) {
		perror("twochains: pthread_create");
		return 1;
	}
	pthread_mutex_lock(&lock);
	while (!hot_tid)
		pthread_cond_wait(&ready_cv, &lock);
	pthread_mutex_unlock(&lock);
	printf("pid %d\nhot %d\nready\n", (int)getpid(), (int)hot_tid);
	fflush(stdout);

	struct timespec ts = { timeout, 0 };
	while (sigtimedwait(&sigs, NULL, &ts) < 0 && errno == EINTR)
		;
	return 0;
}
