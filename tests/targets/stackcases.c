/* stackcases: threads caught in the places an unwinder gets wrong, for
 * tests/stackdump/test_compare.py (stackdump against gdb, frame by frame).
 *
 *   stackcases --case spin|vdso|signal|altstack|recurse|dlopen|sites
 *              [--depth N] [--lib PATH] [--timeout S]
 *
 *   spin     case_leaf <- case_mid <- case_root <- case_thread, burning CPU
 *   vdso     vdso_loop <- vdso_root <- case_thread, in clock_gettime (the vDSO)
 *   signal   sig_spin <- on_signal <- (signal frame) <- sig_interrupted <-
 *            case_thread: the thread spins inside its own signal handler
 *   altstack sig_spin <- on_signal <- (signal frame) <- alt_interrupted <-
 *            case_thread, the handler running on an alternate signal
 *            stack (sigaltstack), away from the stack it interrupted
 *   recurse  recurse() N times (default 200), spinning at the bottom
 *   dlopen   lib_leaf <- lib_root (from the shared library PATH, which the
 *            test may delete or replace once it is loaded) <- case_thread
 *   sites    sites_leaf <- case_thread, blocked in read(2) by one of two
 *            syscall instructions of sites_leaf itself: site A reads fd 0
 *            (stdin), site B a dup of it; each byte written to stdin moves
 *            the thread to the other site, and EOF ends the case.  A test
 *            that waits in /proc/TID/syscall for the site it wants catches
 *            the innermost frame at a known instruction, whatever the
 *            machine's timing (x86_64 only)
 *
 * One thread runs the case; once it is in place the program prints,
 * flushing stdout:
 *   pid P
 *   tid T
 *   ready
 * and exits on SIGTERM/SIGINT or after S seconds (default 60).  Built
 * without inlining of the chains (noinline, noclone) so that every function
 * named above is a frame; the test builds it with and without frame
 * pointers, with CFI only in .debug_frame, and stripped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__clang__)
#define CHAIN __attribute__((noinline))
#else
#define CHAIN __attribute__((noinline, noclone))
#endif

static const char *which = "spin", *lib_path;
static int depth = 200;
static atomic_int in_place;
static pid_t case_tid;
static volatile uint64_t sink;
static volatile int forever = 1;   /* the loops may end, for the compiler */

/* Called by the case thread once it is where the test wants it. */
static void arrived(void)
{
	if (!atomic_load(&in_place)) {
		case_tid = gettid();
		atomic_store(&in_place, 1);
	}
}

CHAIN static uint64_t case_leaf(uint64_t x)
{
	arrived();
	while (forever) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		x ^= x >> 29;
		__asm__ volatile("" : "+r"(x));
		sink = x;
	}
	return x;
}

CHAIN static uint64_t case_mid(uint64_t x)
{
	uint64_t r = case_leaf(x + 1);
	return r ^ (r >> 7);
}

CHAIN static uint64_t case_root(uint64_t x)
{
	uint64_t r = case_mid(x * 3);
	return r ^ (r >> 11);
}

CHAIN static uint64_t vdso_loop(void)
{
	struct timespec ts;
	uint64_t sum = 0;

	arrived();
	while (forever) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sum += (uint64_t)ts.tv_nsec;
		sink = sum;
	}
	return sum;
}

CHAIN static uint64_t vdso_root(void)
{
	uint64_t r = vdso_loop();
	return r + 1;
}

CHAIN static void sig_spin(void)
{
	uint64_t x = 1;

	arrived();
	while (forever) {
		x = x * 2862933555777941757ull + 3037000493ull;
		__asm__ volatile("" : "+r"(x));
		sink = x;
	}
}

CHAIN static void on_signal(int sig)
{
	(void)sig;
	sig_spin();
	sink++;
}

/* Spins until the signal arrives, then never returns from the handler. */
CHAIN static uint64_t sig_interrupted(void)
{
	uint64_t x = 7;

	pthread_kill(pthread_self(), SIGUSR1);
	while (forever) {
		x += x >> 3;
		__asm__ volatile("" : "+r"(x));
		sink = x;
	}
	return x;
}

/* The same with the handler on an alternate signal stack (SIGUSR2 is
 * installed with SA_ONSTACK). */
CHAIN static uint64_t alt_interrupted(void)
{
	static unsigned char alt[64 * 1024];
	stack_t ss = { .ss_sp = alt, .ss_size = sizeof(alt) };
	uint64_t x = 11;

	if (sigaltstack(&ss, NULL) < 0) {
		perror("stackcases: sigaltstack");
		exit(1);
	}
	pthread_kill(pthread_self(), SIGUSR2);
	while (forever) {
		x += x >> 5;
		__asm__ volatile("" : "+r"(x));
		sink = x;
	}
	return x;
}

CHAIN static uint64_t recurse(int n, uint64_t x)
{
	if (n <= 1)
		return case_leaf(x);
	uint64_t r = recurse(n - 1, x + (uint64_t)n);
	return r ^ (uint64_t)n;
}

#if defined(__x86_64__)
/* read(FD, BUF, 1) by a syscall instruction of the function it is written
 * in (a macro, not a call), so that a thread blocked in it has its pc, and
 * the innermost frame, inside that function. */
#define RAW_READ1(fd, buf) ({                                                 \
	long ret_;                                                            \
	__asm__ volatile("syscall"                                            \
	                 : "=a"(ret_)                                         \
	                 : "0"(0L), "D"((long)(fd)), "S"(buf), "d"(1L)        \
	                 : "rcx", "r11", "memory");                           \
	ret_;                                                                 \
})

CHAIN static uint64_t sites_leaf(int fd_b)
{
	uint64_t bytes = 0;
	char c;

	arrived();
	for (;;) {
		if (RAW_READ1(0, &c) <= 0)          /* site A */
			break;
		bytes++;
		if (RAW_READ1(fd_b, &c) <= 0)       /* site B */
			break;
		bytes++;
	}
	return bytes;
}
#endif

CHAIN static uint64_t lib_call(void)
{
	void *h = dlopen(lib_path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "stackcases: %s\n", dlerror());
		exit(1);
	}
	uint64_t (*root)(void (*)(void)) = (uint64_t (*)(void (*)(void)))dlsym(h, "lib_root");
	if (!root) {
		fprintf(stderr, "stackcases: no lib_root in %s\n", lib_path);
		exit(1);
	}
	uint64_t r = root(arrived);
	return r + 1;
}

static void *case_thread(void *arg)
{
	(void)arg;
	if (strcmp(which, "spin") == 0)
		sink = case_root(5);
	else if (strcmp(which, "vdso") == 0)
		sink = vdso_root();
	else if (strcmp(which, "signal") == 0)
		sink = sig_interrupted();
	else if (strcmp(which, "altstack") == 0)
		sink = alt_interrupted();
	else if (strcmp(which, "recurse") == 0)
		sink = recurse(depth, 1);
	else if (strcmp(which, "dlopen") == 0)
		sink = lib_call();
#if defined(__x86_64__)
	else if (strcmp(which, "sites") == 0)
		sink = sites_leaf(dup(0));
#endif
	return NULL;
}

static void usage(FILE *f)
{
	fputs("usage: stackcases --case spin|vdso|signal|altstack|recurse|dlopen|sites "
	      "[--depth N] [--lib PATH] [--timeout S]\n", f);
}

int main(int argc, char **argv)
{
	int timeout = 60;
	sigset_t sigs;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (i + 1 >= argc) {
			usage(stderr);
			return 2;
		}
		if (strcmp(argv[i], "--case") == 0)
			which = argv[++i];
		else if (strcmp(argv[i], "--depth") == 0)
			depth = atoi(argv[++i]);
		else if (strcmp(argv[i], "--lib") == 0)
			lib_path = argv[++i];
		else if (strcmp(argv[i], "--timeout") == 0)
			timeout = atoi(argv[++i]);
		else {
			usage(stderr);
			return 2;
		}
	}
	if (depth < 1 || depth > 100000 || timeout < 1 ||
	    (strcmp(which, "dlopen") == 0 && !lib_path)) {
		usage(stderr);
		return 2;
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_flags = SA_ONSTACK;
	sigaction(SIGUSR2, &sa, NULL);

	/* Only main takes SIGTERM and SIGINT (sigtimedwait below). */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	pthread_t t;
	int r = pthread_create(&t, NULL, case_thread, NULL);
	if (r != 0) {
		fprintf(stderr, "stackcases: pthread_create: %s\n", strerror(r));
		return 1;
	}
	for (int waited = 0; !atomic_load(&in_place); waited++) {
		if (waited > 10000) {
			fprintf(stderr, "stackcases: case %s never got in place\n", which);
			return 1;
		}
		usleep(1000);
	}
	printf("pid %d\ntid %d\nready\n", (int)getpid(), (int)case_tid);
	fflush(stdout);

	struct timespec ts = { timeout, 0 };
	while (sigtimedwait(&sigs, NULL, &ts) < 0 && errno == EINTR)
		;
	return 0;
}
