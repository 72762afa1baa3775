/* JavaChain: a HotSpot target with a known chain of Java methods, for
 * tests/integration/test_languages.py.
 *
 *     javac -d DIR JavaChain.java
 *     java -XX:+PreserveFramePointer -Xbatch -XX:CompileCommand=quiet \
 *          -XX:CompileCommand=dontinline,JavaChain::* \
 *          -XX:CompileCommand=exclude,JavaChain::root -cp DIR JavaChain
 *
 * Thread "hot-0" burns CPU forever in root -> mid -> leaf.  Before it
 * starts, the main thread calls mid 20,000 times, past the thresholds of
 * C2, the last tier (-Xbatch: each compilation is done before the call
 * goes on), so that the perf map `jcmd PID Compiler.perfmap` writes then
 * names leaf and mid for good; root is never compiled (the Interpreter
 * runs it) and nothing is inlined: every sample is the same chain.
 * -XX:+PreserveFramePointer keeps the frame pointer chain through the
 * compiled code, which has no unwind tables.  Prints
 *     pid P
 *     hot T
 *     ready
 * and exits after 120 s. */
import java.nio.file.Files;
import java.nio.file.Path;

public class JavaChain {
    static volatile long sink;

    static long leaf(long x) {
        for (int i = 0; i < 10000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long mid(long x) {
        return leaf(x) + 1;
    }

    static void root() {
        long x = 1;
        while (true) {
            x = mid(x);
            sink = x;
        }
    }

    /* The thread's id as the kernel knows it: the task named NAME. */
    static String tid(String name) throws Exception {
        try (var tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path t : (Iterable<Path>) tasks::iterator)
                if (Files.readString(t.resolve("comm")).strip().equals(name))
                    return t.getFileName().toString();
        }
        return "?";
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i < 20000; i++)
            sink = mid(i);
        Thread hot = new Thread(JavaChain::root, "hot-0");
        hot.setDaemon(true);
        hot.start();
        String t = "?";
        for (int i = 0; i < 100 && t.equals("?"); i++) {
            Thread.sleep(20);
            t = tid("hot-0");
        }
        System.out.println("pid " + ProcessHandle.current().pid() + "\nhot " + t + "\nready");
        System.out.flush();
        Thread.sleep(120000);
    }
}
