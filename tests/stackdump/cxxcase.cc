// A C++ target for test_compare.py: the case thread (a std::thread) spins in a
// function called from a catch block, through an always-inlined helper and
// a member of a class template in a namespace, so the stack holds an
// exception landing pad (often in a .cold section with its own FDE and
// symbol), inlined code, and names that read as gdb prints them only when
// demangled (demo::Spinner<unsigned long>::burn(unsigned long)).  Prints "pid P", "tid T",
// "ready" like stackcases and exits after 60 s or on SIGTERM.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <unistd.h>

static std::atomic<int> in_place{0};
static pid_t case_tid;
static volatile uint64_t sink;

static inline __attribute__((always_inline)) uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	return x * 0x9e3779b97f4a7c15ull;
}

[[gnu::noinline]] static uint64_t cxx_leaf(uint64_t x)
{
	case_tid = gettid();
	in_place = 1;
	for (;;) {
		x = mix(x) + 1;
		__asm__ volatile("" : "+r"(x));
		sink = x;
	}
	return x;
}

namespace demo {
template <typename T> struct Spinner {
	T seed;
	[[gnu::noinline]] T burn(T x);
};

template <typename T> T Spinner<T>::burn(T x)
{
	T r = cxx_leaf(x + seed);
	__asm__ volatile("" : "+r"(r));
	return r;
}
template struct Spinner<uint64_t>;
} // namespace demo

[[gnu::noinline]] static void cxx_thrower(uint64_t x)
{
	if (x != 0)
		throw std::runtime_error("hot path failed");
}

[[gnu::noinline]] static uint64_t cxx_catcher(uint64_t x)
{
	try {
		cxx_thrower(x);
	} catch (const std::exception &e) {
		return demo::Spinner<uint64_t>{3}.burn(x + std::strlen(e.what()));
	}
	return 0;
}

int main()
{
	std::thread t([] { sink = cxx_catcher(42); });
	while (!in_place)
		usleep(1000);
	std::printf("pid %d\ntid %d\nready\n", (int)getpid(), (int)case_tid);
	std::fflush(stdout);
	sleep(60);
	std::_Exit(0);
}
