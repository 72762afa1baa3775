// gospin: a Go thread burning CPU in a known chain, for
// tests/stackdump/test_compare.py (stackdump against gdb, frame by frame).
//
//	gospin [--timeout S]
//
// One goroutine, locked to its OS thread (runtime.LockOSThread), spins in
// main.burn <- main.spin <- main.worker.  main.burn is a frameless leaf:
// a loop without calls, which the compiler gives no frame (no stack
// check, no saved frame pointer; `go tool objdump -s main.burn` shows no
// SUBQ/PUSHQ of RBP), so a frame-pointer walk from it skips main.spin:
// only the CFI of Go's .debug_frame unwinds it.  A default `go build`
// keeps that .debug_frame compressed (SHF_COMPRESSED) and emits no
// .eh_frame for Go code.
//
// Once the thread is in the loop the program prints, on stdout:
//
//	pid P
//	tid T
//	ready
//
// and exits on SIGTERM/SIGINT or after S seconds (default 60).
//
// The loop never leaves main.burn: the program runs itself again with
// GODEBUG=asyncpreemptoff=1, so that the runtime's sysmon does not
// interrupt it with SIGURG every 10 ms (asynchronous preemption would put
// runtime frames on top of it), and a loop without calls has no
// synchronous preemption point.  So every sample of the thread is in
// main.burn, by construction.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	sink    uint64
	inPlace int32
	stop    int32 // never set: the loop may end, for the compiler
)

//go:noinline
func burn(x uint64) uint64 {
	atomic.StoreInt32(&inPlace, 1)
	for atomic.LoadInt32(&stop) == 0 {
		x = x*6364136223846793005 + 1442695040888963407
		x ^= x >> 29
	}
	return x
}

//go:noinline
func spin(seed uint64) uint64 {
	return burn(seed*3+1) + 1
}

//go:noinline
func worker(tid chan<- int) {
	runtime.LockOSThread()
	tid <- syscall.Gettid()
	sink = spin(uint64(time.Now().UnixNano()))
}

func main() {
	timeout := flag.Int("timeout", 60, "exit after `S` seconds")
	flag.Parse()
	if *timeout < 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: gospin [--timeout S]")
		os.Exit(2)
	}
	if !strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff=1") {
		env := append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, os.Args, env)
		}
		fmt.Fprintln(os.Stderr, "gospin: cannot run itself again:", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	fmt.Printf("pid %d\n", os.Getpid())
	tids := make(chan int)
	go worker(tids)
	fmt.Printf("tid %d\n", <-tids)
	for atomic.LoadInt32(&inPlace) == 0 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("ready")

	select {
	case <-sigs:
	case <-time.After(time.Duration(*timeout) * time.Second):
	}
}
