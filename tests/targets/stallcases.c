/* stallcases: threads that stop making progress, and threads that only
 * wait idly, for tests/integration/test_stall.py.
 *
 *   stallcases [--vfork-seconds S] [--timeout S]
 *
 * One process, its threads named (comm) for the test:
 *   waiter   blocked in pthread_mutex_lock on a mutex that
 *   owner    holds and sleeps in nanosleep (an idle wait of its own)
 *   dl-a, dl-b  a lock cycle: each holds one mutex and waits on the other's
 *   vforker  calls vfork_outer <- vfork_middle <- vfork_inner, which vforks
 *            a child that sleeps S seconds (default 4) before it exits: the
 *            thread is in D all that while; then again, forever; each
 *            return prints "vforked N"
 *   condvar, epoll, pipe, sleep  idle: pthread_cond_wait, epoll_wait on an
 *            empty epoll set, read of a pipe nobody writes, nanosleep
 * Prints "pid P", then "stuck TID NAME" for waiter, dl-a, dl-b and vforker,
 * "owner TID" and "idle TID NAME" for the others, then "ready".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER, lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t both_hold;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int nstarted;
static int vfork_seconds = 4;

static void say(const char *word, const char *name)
{
	pthread_mutex_lock(&out_lock);
	printf("%s %d %s\n", word, (int)gettid(), name);
	fflush(stdout);
	nstarted++;
	pthread_mutex_unlock(&out_lock);
}

static void sleep_forever(void)
{
	for (;;) {
		struct timespec ts = { 3600, 0 };
		nanosleep(&ts, NULL);
	}
}

static void *owner(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "owner");
	pthread_mutex_lock(&held);
	say("owner", "owner");
	sleep_forever();
	return NULL;
}

static void *waiter(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "waiter");
	say("stuck", "waiter");
	pthread_mutex_lock(&held);          /* never: the owner sleeps with it */
	return NULL;
}

static void *cycle(void *arg)
{
	int a = arg != NULL;

	pthread_setname_np(pthread_self(), a ? "dl-a" : "dl-b");
	pthread_mutex_lock(a ? &lock_a : &lock_b);
	say("stuck", a ? "dl-a" : "dl-b");
	pthread_barrier_wait(&both_hold);
	pthread_mutex_lock(a ? &lock_b : &lock_a);
	return NULL;
}

/* The caller chain the stall's user stack must name. */
__attribute__((noinline)) static pid_t vfork_inner(void)
{
	pid_t c = vfork();

	if (c == 0) {
		struct timespec ts = { vfork_seconds, 0 };
		nanosleep(&ts, NULL);
		_exit(0);
	}
	__asm__ volatile("" ::: "memory");
	return c;
}

__attribute__((noinline)) static pid_t vfork_middle(void)
{
	pid_t c = vfork_inner();

	__asm__ volatile("" ::: "memory");
	return c;
}

__attribute__((noinline)) static void vfork_outer(void)
{
	for (int n = 1;; n++) {
		pid_t c = vfork_middle();

		if (c > 0)
			waitpid(c, NULL, 0);
		pthread_mutex_lock(&out_lock);
		printf("vforked %d\n", n);
		fflush(stdout);
		pthread_mutex_unlock(&out_lock);
	}
}

static void *vforker(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "vforker");
	say("stuck", "vforker");
	vfork_outer();
	return NULL;
}

static void *idle(void *arg)
{
	const char *what = arg;

	pthread_setname_np(pthread_self(), what);
	say("idle", what);
	if (strcmp(what, "condvar") == 0) {
		pthread_mutex_lock(&cv_lock);
		for (;;)
			pthread_cond_wait(&cv, &cv_lock);
	} else if (strcmp(what, "epoll") == 0) {
		struct epoll_event ev;
		int ep = epoll_create1(0);
		for (;;)
			epoll_wait(ep, &ev, 1, -1);
	} else if (strcmp(what, "pipe") == 0) {
		int fds[2];
		char c;
		if (pipe(fds) == 0)
			for (;;)
				if (read(fds[0], &c, 1) <= 0)
					break;
	}
	sleep_forever();
	return NULL;
}

int main(int argc, char **argv)
{
	static char idles[][8] = { "condvar", "epoll", "pipe", "sleep" };
	int timeout = 120, want = 0;
	pthread_t t;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--vfork-seconds") == 0)
			vfork_seconds = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--timeout") == 0)
			timeout = atoi(argv[i + 1]);
		else {
			fputs("usage: stallcases [--vfork-seconds S] [--timeout S]\n", stderr);
			return 2;
		}
	}
	printf("pid %d\n", (int)getpid());
	pthread_barrier_init(&both_hold, NULL, 2);
	pthread_create(&t, NULL, owner, NULL);
	want++;
	/* The waiter comes after the owner holds the mutex. */
	for (;;) {
		pthread_mutex_lock(&out_lock);
		int n = nstarted;
		pthread_mutex_unlock(&out_lock);
		if (n == want)
			break;
		usleep(1000);
	}
	pthread_create(&t, NULL, waiter, NULL);
	pthread_create(&t, NULL, cycle, &lock_a);
	pthread_create(&t, NULL, cycle, NULL);
	pthread_create(&t, NULL, vforker, NULL);
	want += 4;
	for (size_t i = 0; i < sizeof idles / sizeof idles[0]; i++, want++)
		pthread_create(&t, NULL, idle, idles[i]);
	for (;;) {
		pthread_mutex_lock(&out_lock);
		int n = nstarted;
		if (n == want) {
			puts("ready");
			fflush(stdout);
		}
		pthread_mutex_unlock(&out_lock);
		if (n == want)
			break;
		usleep(1000);
	}
	sleep((unsigned)timeout);
	return 0;
}
