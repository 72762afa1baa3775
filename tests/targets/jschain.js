// jschain: a node target with a known chain of JavaScript functions, for
// tests/integration/test_languages.py.
//
//     node --perf-basic-prof --interpreted-frames-native-stack jschain.js
//
// The main thread burns CPU forever in root -> mid -> leaf and never returns
// from leaf, whose loop V8 compiles on the stack (on-stack replacement):
// every sample is the same chain.  --perf-basic-prof makes V8 write
// /tmp/perf-PID.map, --interpreted-frames-native-stack gives each function
// the interpreter runs (mid, root) a frame of its own there.  Prints
//     pid P
//     hot T
//     ready
// (T is the main thread, P itself) and exits after 120 s.
'use strict';

function leaf(n) {
    let x = 0;
    for (;;) {
        x = (x * 31 + n) % 1000003;
        n++;
    }
}

function mid(n) {
    return leaf(n) + 1;
}

function root() {
    return mid(7);
}

setTimeout(() => process.exit(0), 120000).unref();
process.stdout.write(`pid ${process.pid}\nhot ${process.pid}\nready\n`, () => root());
