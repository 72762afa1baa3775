/* procfs: the parsers on lines pasted from this machine's /proc (Linux
 * 6.18), cut, stretched and hostile; the readers on this process and on a
 * pid that cannot exist. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include "procfs/procfs.h"

#define CAP_ALL     0x000001ffffffffffull   /* root on a 6.x kernel */
#define CAP_PTRACE  (1ull << 19)

/* No pid is ever this large: pid_max is at most 2^22. */
#define NO_PID 0x7ffffff0

/* ---- stat ---- */

/* bash, an interactive shell. */
static const char stat_bash[] =
	"13528 (bash) S 13514 13528 13528 0 -1 4194560 10519 262500 0 20 3 8 648 102 20 0 1 0 "
	"166661 5124096 995 18446744073709551615 93935573286912 93935574076317 140725103257136 "
	"0 0 0 65536 4 1132560123 1 0 0 17 1 0 0 0 0 0 93935574309616 93935574357860 "
	"93936548749312 140725103258426 140725103258441 140725103258441 140725103259626 0\n";

/* python3 after prctl(PR_SET_NAME, "(a) b)"). */
static const char stat_parens[] =
	"29313 ((a) b)) R 29311 29311 13528 0 -1 4194304 2894 6587 3 0 4 2 5 1 20 0 1 0 197042 "
	"17145856 3410 18446744073709551615 94085290643456 94085290643797 140730175534384 0 0 0 "
	"0 16781312 2 0 0 0 17 1 0 0 0 0 0 94085290655152 94085290655768 94085678116864 "
	"140730175543246 140730175543506 140730175543506 140730175545295 0\n";

static const char stat_kthreadd[] =
	"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 25 0 0 18446744073709551615 "
	"0 0 0 0 0 0 0 2147483647 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

static void test_stat_real(void **state)
{
	struct procfs_stat st;
	(void)state;
	assert_int_equal(procfs_parse_stat(stat_bash, &st), 0);
	assert_string_equal(st.comm, "bash");
	assert_int_equal(st.state, 'S');
	assert_int_equal(st.ppid, 13514);
	assert_true(st.flags == 4194560);
	assert_false(st.flags & (PROCFS_PF_KTHREAD | PROCFS_PF_EXITING));
	assert_true(st.start_time == 166661);
	assert_true(st.vsize == 5124096);
	assert_int_equal(st.processor, 1);

	/* The comm ends at the last ')'. */
	assert_int_equal(procfs_parse_stat(stat_parens, &st), 0);
	assert_string_equal(st.comm, "(a) b)");
	assert_int_equal(st.state, 'R');
	assert_int_equal(st.ppid, 29311);
	assert_true(st.start_time == 197042);
	assert_true(st.vsize == 17145856);

	assert_int_equal(procfs_parse_stat(stat_kthreadd, &st), 0);
	assert_true(st.flags & PROCFS_PF_KTHREAD);
	assert_int_equal(st.ppid, 0);
	assert_true(st.vsize == 0);
}

/* Every cut before field 39 ends is refused; from there on the line is
 * whole enough. */
static void test_stat_cut(void **state)
{
	struct procfs_stat st;
	const char *end39 = stat_bash;
	char buf[sizeof stat_bash];
	(void)state;
	for (int spaces = 0; spaces < 39; end39++)
		spaces += *end39 == ' ';
	end39--;                               /* the space after field 39 */
	for (size_t k = 0; k < sizeof stat_bash; k++) {
		memcpy(buf, stat_bash, k);
		buf[k] = '\0';
		assert_int_equal(procfs_parse_stat(buf, &st),
		                 k < (size_t)(end39 - stat_bash) ? -EINVAL : 0);
	}
	assert_int_equal(procfs_parse_stat("", &st), -EINVAL);
	assert_int_equal(procfs_parse_stat("13528 bash S 1", &st), -EINVAL);
	assert_int_equal(procfs_parse_stat("13528 (bash)S 1", &st), -EINVAL);
	assert_int_equal(procfs_parse_stat("13528 )bash( S 1", &st), -EINVAL);
}

/* A copy of stat_bash with field FIELD (4..52) replaced by VALUE. */
static void stat_with(int field, const char *value, char *buf, size_t size)
{
	const char *p = strrchr(stat_bash, ')') + 1, *end;
	int f = 3;

	while (f < field)
		f += *++p == ' ';
	end = strchr(p + 1, ' ');
	snprintf(buf, size, "%.*s %s%s", (int)(p - stat_bash), stat_bash, value, end);
}

static void test_stat_numbers(void **state)
{
	struct procfs_stat st;
	char buf[512], comm[200];
	(void)state;
	stat_with(23, "18446744073709551615", buf, sizeof buf);
	assert_int_equal(procfs_parse_stat(buf, &st), 0);
	assert_true(st.vsize == 18446744073709551615ull);
	assert_true(st.start_time == 166661);
	stat_with(22, "18446744073709551616", buf, sizeof buf);      /* 2^64 */
	assert_int_equal(procfs_parse_stat(buf, &st), -EINVAL);
	stat_with(39, "2147483648", buf, sizeof buf);
	assert_int_equal(procfs_parse_stat(buf, &st), -EINVAL);
	stat_with(4, "-1", buf, sizeof buf);
	assert_int_equal(procfs_parse_stat(buf, &st), 0);
	assert_int_equal(st.ppid, -1);
	stat_with(9, "-1", buf, sizeof buf);
	assert_int_equal(procfs_parse_stat(buf, &st), -EINVAL);
	stat_with(9, "12x", buf, sizeof buf);
	assert_int_equal(procfs_parse_stat(buf, &st), -EINVAL);
	stat_with(39, "0", buf, sizeof buf);
	assert_int_equal(procfs_parse_stat(buf, &st), 0);
	assert_int_equal(st.processor, 0);

	/* A comm longer than any the kernel prints is cut, the rest read. */
	memset(comm, 'k', sizeof comm);
	snprintf(buf, sizeof buf, "7 (%.150s) I%s", comm, strchr(stat_bash, ')') + 3);
	assert_int_equal(procfs_parse_stat(buf, &st), 0);
	assert_int_equal(strlen(st.comm), PROCFS_COMM_MAX - 1);
	assert_int_equal(st.state, 'I');
	assert_int_equal(st.processor, 1);
}

/* ---- status (the assertions of test_doctor's parser tests, moved) ---- */

/* Trimmed from a real /proc/self/status of a unit with
 * AmbientCapabilities=CAP_SYS_PTRACE and a system call filter. */
static const char status_service[] =
	"Name:\tcpumond\n"
	"Umask:\t0027\n"
	"State:\tS (sleeping)\n"
	"Tgid:\t311\n"
	"Pid:\t311\n"
	"PPid:\t1\n"
	"TracerPid:\t0\n"
	"Uid:\t998\t998\t998\t998\n"
	"Gid:\t998\t998\t998\t998\n"
	"CapInh:\t0000000000080000\n"
	"CapPrm:\t0000000000080000\n"
	"CapEff:\t0000000000080000\n"
	"CapBnd:\t0000000000080000\n"
	"CapAmb:\t0000000000080000\n"
	"NoNewPrivs:\t1\n"
	"Seccomp:\t2\n"
	"Seccomp_filters:\t1\n"
	"Speculation_Store_Bypass:\tthread vulnerable\n";

/* The whole /proc/self/status of cat, as root, here. */
static const char status_cat[] =
	"Name:\tcat\nUmask:\t0022\nState:\tR (running)\nTgid:\t20494\nNgid:\t0\nPid:\t20494\n"
	"PPid:\t20491\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t256\n"
	"Groups:\t \nNStgid:\t20494\nNSpid:\t20494\nNSpgid:\t20491\nNSsid:\t13528\nKthread:\t0\n"
	"VmPeak:\t    3060 kB\nVmSize:\t    3060 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n"
	"VmHWM:\t    1708 kB\nVmRSS:\t    1708 kB\nRssAnon:\t     112 kB\nRssFile:\t    1596 kB\n"
	"RssShmem:\t       0 kB\nVmData:\t     360 kB\nVmStk:\t     132 kB\nVmExe:\t      20 kB\n"
	"VmLib:\t    1528 kB\nVmPTE:\t      44 kB\nVmSwap:\t       0 kB\n"
	"HugetlbPages:\t       0 kB\nCoreDumping:\t0\nTHP_enabled:\t1\n"
	"untag_mask:\t0xffffffffffffffff\nThreads:\t1\nSigQ:\t7/96364\n"
	"SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n"
	"SigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\nCapInh:\t0000000000000000\n"
	"CapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\n"
	"CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n"
	"Speculation_Store_Bypass:\tvulnerable\nSpeculationIndirectBranch:\talways enabled\n"
	"Cpus_allowed:\t3\nCpus_allowed_list:\t0-1\n"
	"Mems_allowed:\t00000000,00000000,00000000,00000000,00000000,00000000,00000001\n"
	"Mems_allowed_list:\t0\nvoluntary_ctxt_switches:\t0\nnonvoluntary_ctxt_switches:\t1\n";

static void test_status_service(void **state)
{
	struct procfs_status st;
	(void)state;
	assert_int_equal(procfs_parse_status(status_service, &st), 0);
	assert_int_equal(st.euid, 998);
	assert_true(st.cap_eff == CAP_PTRACE);
	assert_int_equal(st.no_new_privs, 1);
	assert_int_equal(st.seccomp, 2);
	assert_int_equal(st.tracer_pid, 0);
	assert_true(st.cap_amb == CAP_PTRACE);
	assert_int_equal(st.state, 'S');
	assert_int_equal(st.tgid, 311);
	assert_int_equal(st.ppid, 1);
	assert_int_equal(st.nnspid, 0);                  /* absent */
	assert_true(st.voluntary_ctxt_switches == -1);
}

static void test_status_real(void **state)
{
	struct procfs_status st;
	(void)state;
	assert_int_equal(procfs_parse_status(status_cat, &st), 0);
	assert_int_equal(st.state, 'R');
	assert_int_equal(st.tgid, 20494);
	assert_int_equal(st.ppid, 20491);
	assert_int_equal(st.euid, 0);
	assert_int_equal(st.nnspid, 1);
	assert_int_equal(st.nspid[0], 20494);
	assert_true(st.cap_inh == 0);
	assert_true(st.cap_prm == 0x000001fffeffffffull);
	assert_true(st.cap_eff == 0x000001fffeffffffull);
	assert_true(st.cap_bnd == 0x000001fffeffffffull);
	assert_true(st.voluntary_ctxt_switches == 0);
	assert_true(st.nonvoluntary_ctxt_switches == 1);

	/* A thread in a container two pid namespaces down. */
	assert_int_equal(procfs_parse_status("NSpid:\t4242\t7\t1\n", &st), 0);
	assert_int_equal(st.nnspid, 3);
	assert_int_equal(st.nspid[0], 4242);
	assert_int_equal(st.nspid[2], 1);
	assert_int_equal(procfs_parse_status("voluntary_ctxt_switches:\t9223372036854775807\n",
	                                     &st), 0);
	assert_true(st.voluntary_ctxt_switches == 9223372036854775807ll);
}

static void test_status_traced_thread(void **state)
{
	struct procfs_status st;
	(void)state;
	assert_int_equal(procfs_parse_status("Name:\tworker\nTracerPid:\t311\n"
	                                     "Uid:\t1000\t0\t0\t0\n", &st), 0);
	assert_int_equal(st.tracer_pid, 311);
	assert_int_equal(st.euid, 0);             /* the second field: effective */
	assert_int_equal(st.seccomp, -1);         /* absent: unknown */
	assert_int_equal(st.no_new_privs, -1);
}

static void test_status_rejects_junk(void **state)
{
	struct procfs_status st;
	char nspid[512] = "NSpid:";
	(void)state;
	assert_int_equal(procfs_parse_status("TracerPid:\tx\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("CapEff:\tzz\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("Uid:\t0\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("", &st), 0);
	assert_int_equal(procfs_parse_status("no colon here\n", &st), 0);
	/* A number on the next line is not this field's. */
	assert_int_equal(procfs_parse_status("TracerPid:\t\n5\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("TracerPid:\t2147483648\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("NSpid:\t\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("NSpid:\t0\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("State:\t?\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_status("nonvoluntary_ctxt_switches:\t-1\n", &st), -EINVAL);
	for (int i = 0; i <= PROCFS_NSPID_MAX; i++)
		strcat(nspid, "\t7");
	assert_int_equal(procfs_parse_status(nspid, &st), -EINVAL);   /* 33 levels */
}

static void test_capmask(void **state)
{
	uint64_t m;
	(void)state;
	assert_int_equal(procfs_parse_capmask("000001ffffffffff", &m), 0);
	assert_true(m == CAP_ALL);
	assert_int_equal(procfs_parse_capmask("0000000000080000\n", &m), 0);
	assert_true(m == CAP_PTRACE);
	assert_int_equal(procfs_parse_capmask("0000000000000000", &m), 0);
	assert_true(m == 0);
	assert_int_equal(procfs_parse_capmask("00000000000800000", &m), -EINVAL);  /* 17 digits */
	assert_int_equal(procfs_parse_capmask("", &m), -EINVAL);
	assert_int_equal(procfs_parse_capmask("80000g", &m), -EINVAL);
}

/* ---- cgroup, exe, cmdline, comm ---- */

/* This machine: v1 controllers beside the unified hierarchy. */
static const char cgroup_hybrid[] =
	"9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n"
	"4:memory:/process_api/96aee254c7534f677f69e4edeb4f4658\n3:cpuset:/\n2:cpuacct:/\n"
	"1:cpu:/\n0::/\n";

static void test_cgroup(void **state)
{
	char out[64], tiny[8];
	(void)state;
	assert_int_equal(procfs_parse_cgroup(cgroup_hybrid, out, sizeof out), 0);
	assert_string_equal(out, "/");
	assert_int_equal(procfs_parse_cgroup("0::/system.slice/cpumond.service\n", out,
	                                     sizeof out), 0);
	assert_string_equal(out, "/system.slice/cpumond.service");
	/* A name may hold ':'; the last line may lack its newline (a cut read). */
	assert_int_equal(procfs_parse_cgroup("1:cpu:/\n0::/a:b/c", out, sizeof out), 0);
	assert_string_equal(out, "/a:b/c");
	/* v1 only, and a v1 line that looks close. */
	assert_int_equal(procfs_parse_cgroup("4:memory:/x\n10::/y\n", out, sizeof out), -ENOENT);
	assert_string_equal(out, "");
	assert_int_equal(procfs_parse_cgroup("", out, sizeof out), -ENOENT);
	assert_int_equal(procfs_parse_cgroup("0::/system.slice\n", tiny, sizeof tiny),
	                 -ENAMETOOLONG);
	assert_string_equal(tiny, "");
}

/* ---- pressure, cpu.stat ---- */

static void test_pressure(void **state)
{
	struct procfs_pressure p;
	(void)state;
	/* This machine's /proc/pressure/cpu. */
	assert_int_equal(procfs_parse_pressure("some avg10=17.67 avg60=16.22 avg300=23.32 "
	                                       "total=274467529\nfull avg10=0.00 avg60=0.00 "
	                                       "avg300=0.00 total=0\n", &p), 0);
	assert_true(p.some_avg10 > 17.66 && p.some_avg10 < 17.68);
	assert_true(p.some_total_us == 274467529);
	/* Only the some line counts, wherever it is; its last field ends it. */
	assert_int_equal(procfs_parse_pressure("full avg10=1.00 avg60=0.00 avg300=0.00 total=9\n"
	                                       "some avg10=100.00 avg60=0 avg300=0 total=0", &p), 0);
	assert_true(p.some_avg10 == 100.0 && p.some_total_us == 0);
	assert_int_equal(procfs_parse_pressure("", &p), -EINVAL);
	assert_int_equal(procfs_parse_pressure("full avg10=0.00 total=0\n", &p), -EINVAL);
	assert_int_equal(procfs_parse_pressure("some avg10=x avg60=0 avg300=0 total=1\n", &p),
	                 -EINVAL);
	assert_int_equal(procfs_parse_pressure("some avg10=101.00 avg60=0 avg300=0 total=1\n",
	                                       &p), -EINVAL);
	assert_int_equal(procfs_parse_pressure("some avg10=1.00 avg60=0 avg300=0\n", &p), -EINVAL);
	assert_int_equal(procfs_parse_pressure("some avg10=1.00 avg60=0 avg300=0 total=-1\n", &p),
	                 -EINVAL);
	assert_int_equal(procfs_parse_pressure("some avg10=1.00 avg60=0 avg300=0 total=12x\n", &p),
	                 -EINVAL);
	/* Cut before the next line: the next line's total is not taken. */
	assert_int_equal(procfs_parse_pressure("some avg10=1.00 avg60=0\nfull total=3\n", &p),
	                 -EINVAL);
}

static void test_cpu_stat(void **state)
{
	struct procfs_cpu_stat st;
	(void)state;
	assert_int_equal(procfs_parse_cpu_stat("usage_usec 9160324\nuser_usec 6203112\n"
	                                       "system_usec 2957212\nnr_periods 1204\n"
	                                       "nr_throttled 311\nthrottled_usec 15327090\n"
	                                       "nr_bursts 0\nburst_usec 0\n", &st), 0);
	assert_true(st.nr_throttled == 311 && st.throttled_usec == 15327090);
	/* The root cgroup, or no cpu controller: only usage. */
	assert_int_equal(procfs_parse_cpu_stat("usage_usec 1\nuser_usec 1\nsystem_usec 0\n", &st),
	                 0);
	assert_true(st.nr_throttled == -1 && st.throttled_usec == -1);
	assert_int_equal(procfs_parse_cpu_stat("", &st), 0);
	assert_int_equal(procfs_parse_cpu_stat("nr_throttled x\n", &st), -EINVAL);
	assert_int_equal(procfs_parse_cpu_stat("throttled_usec -5\n", &st), -EINVAL);
}

static void test_exe(void **state)
{
	bool deleted;
	(void)state;
	assert_int_equal(procfs_parse_exe("/usr/bin/python3.11", &deleted), 19);
	assert_false(deleted);
	assert_int_equal(procfs_parse_exe("/tmp/x/hotchain (deleted)", &deleted), 15);
	assert_true(deleted);
	assert_int_equal(procfs_parse_exe(" (deleted)", &deleted), 0);
	assert_true(deleted);
	assert_int_equal(procfs_parse_exe("(deleted)", &deleted), 9);
	assert_false(deleted);
}

#define CMDLINE_IS(raw, want, rc) do { \
		char out_[64]; \
		assert_int_equal(procfs_parse_cmdline(raw, sizeof(raw) - 1, out_, sizeof out_), rc); \
		assert_string_equal(out_, want); \
	} while (0)

static void test_cmdline(void **state)
{
	char out[8];
	(void)state;
	CMDLINE_IS("bash\0/dev/fd/3\0", "bash /dev/fd/3", 0);     /* this machine's shell */
	CMDLINE_IS("", "", 0);                                    /* a kernel thread */
	CMDLINE_IS("nginx: worker process", "nginx: worker process", 0);   /* setproctitle */
	CMDLINE_IS("a\0\0b\0", "a  b", 0);                        /* an empty argument */
	CMDLINE_IS("marker\0\xff\xfe\0caf\xe9\0", "marker \xff\xfe caf\xe9", 0);
	CMDLINE_IS("x\ty\\z\n\x1b[2J\x7f\0", "x\\x09y\\\\z\\x0a\\x1b[2J\\x7f", 0);
	/* Cut, never inside an escape. */
	assert_int_equal(procfs_parse_cmdline("abcdefghij", 10, out, sizeof out), -E2BIG);
	assert_string_equal(out, "abcdefg");
	assert_int_equal(procfs_parse_cmdline("abcd\x1b", 5, out, sizeof out), -E2BIG);
	assert_string_equal(out, "abcd");
	assert_int_equal(procfs_parse_cmdline("abcdefg", 7, out, sizeof out), 0);
	assert_string_equal(out, "abcdefg");
	assert_int_equal(procfs_parse_cmdline("a", 1, out, 0), -E2BIG);
}

static void test_comm(void **state)
{
	char out[PROCFS_COMM_MAX], tiny[4];
	(void)state;
	procfs_parse_comm("bash\n", out, sizeof out);
	assert_string_equal(out, "bash");
	procfs_parse_comm("(a) b)\n", out, sizeof out);
	assert_string_equal(out, "(a) b)");
	/* Only the kernel's newline goes: the name's own stays. */
	procfs_parse_comm("x (y) \nQZ\x1b[2J\n", out, sizeof out);
	assert_string_equal(out, "x (y) \nQZ\x1b[2J");
	procfs_parse_comm("", out, sizeof out);
	assert_string_equal(out, "");
	procfs_parse_comm("hotchain\n", tiny, sizeof tiny);
	assert_string_equal(tiny, "hot");
}

/* ---- syscall, wchan ---- */

static void test_syscall(void **state)
{
	struct procfs_syscall sc;
	(void)state;
	/* bash in pselect6. */
	assert_int_equal(procfs_parse_syscall("270 0xfb 0x7ffd1dca46a0 0x0 0x0 0x7ffd1dca45b0 "
	                                      "0x7ffd1dca45c0 0x7ffd1dca4580 0x7fb84e253aec\n",
	                                      &sc), 0);
	assert_false(sc.running);
	assert_int_equal(sc.nr, 270);
	assert_true(sc.args[0] == 0xfb);
	assert_true(sc.args[1] == 0x7ffd1dca46a0ull);
	assert_true(sc.args[5] == 0x7ffd1dca45c0ull);
	assert_true(sc.sp == 0x7ffd1dca4580ull);
	assert_true(sc.pc == 0x7fb84e253aecull);
	/* python reading its own: read(3, ...). */
	assert_int_equal(procfs_parse_syscall("0 0x3 0x559207849c30 0x2000 0x0 0x0 0x0 "
	                                      "0x7ffe4c1f2d48 0x7f9de2f162ad\n", &sc), 0);
	assert_int_equal(sc.nr, 0);
	assert_true(sc.args[2] == 0x2000);
	assert_int_equal(procfs_parse_syscall("-1 0x7ffd1dca4580 0x7fb84e253aec\n", &sc), 0);
	assert_int_equal(sc.nr, -1);
	assert_true(sc.sp == 0x7ffd1dca4580ull);
	assert_true(sc.pc == 0x7fb84e253aecull);
	assert_int_equal(procfs_parse_syscall("running\n", &sc), 0);
	assert_true(sc.running);
	assert_int_equal(sc.nr, -1);
	assert_int_equal(procfs_parse_syscall("0xffffffffffffffff", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("270 0xfb 0x7ffd1dca46a0\n", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("-1 0x7ffd1dca4580\n", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("-2 0x1 0x2\n", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("-1 0x1 0x2 0x3\n", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("-1 0x1 0x10000000000000000\n", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("-1 0x1 0x0x2\n", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("-1 0x1 0xffffffffffffffff\n", &sc), 0);
	assert_true(sc.pc == UINT64_MAX);
	assert_int_equal(procfs_parse_syscall("", &sc), -EINVAL);
	assert_int_equal(procfs_parse_syscall("runnin", &sc), -EINVAL);
}

static void test_kstack(void **state)
{
	char text[] = "[<0>] futex_wait_queue+0x60/0x90\n[<0>] __futex_wait+0x148/0x1b0\n"
	              "garbage\n[<0>] \n[<0>] do_syscall_64+0x82/0x190";
	char empty[] = "";
	const char *f[4];
	(void)state;
	assert_int_equal(procfs_parse_kstack(text, f, 4), 3);
	assert_string_equal(f[0], "futex_wait_queue+0x60/0x90");
	assert_string_equal(f[1], "__futex_wait+0x148/0x1b0");
	assert_string_equal(f[2], "do_syscall_64+0x82/0x190");
	assert_int_equal(procfs_parse_kstack(empty, f, 4), 0);
}

static void test_wchan(void **state)
{
	char out[64], tiny[5];
	(void)state;
	procfs_parse_wchan("poll_schedule_timeout.constprop.0", out, sizeof out);
	assert_string_equal(out, "poll_schedule_timeout.constprop.0");
	procfs_parse_wchan("0", out, sizeof out);
	assert_string_equal(out, "");
	procfs_parse_wchan("do_epoll_wait\n", out, sizeof out);
	assert_string_equal(out, "do_epoll_wait");
	procfs_parse_wchan("do_epoll_wait", tiny, sizeof tiny);
	assert_string_equal(tiny, "do_e");
	procfs_parse_wchan("00", out, sizeof out);
	assert_string_equal(out, "00");
}

/* ---- the readers ---- */

static void test_read_self(void **state)
{
	pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
	struct procfs_status status;
	struct procfs_syscall sc;
	struct procfs_stat st;
	char buf[4096];
	pid_t *tids;
	size_t n;
	long v;
	(void)state;
	assert_int_equal(prctl(PR_SET_NAME, "(a) b)", 0, 0, 0), 0);
	assert_int_equal(procfs_read_stat(pid, tid, &st), 0);
	assert_string_equal(st.comm, "(a) b)");
	assert_int_equal(st.state, 'R');               /* it is reading */
	assert_int_equal(st.ppid, getppid());
	assert_int_equal(procfs_read_comm(pid, tid, buf, sizeof buf), 0);
	assert_string_equal(buf, "(a) b)");
	assert_int_equal(procfs_read_comm(0, 0, buf, sizeof buf), 0);
	assert_string_equal(buf, "(a) b)");

	assert_int_equal(procfs_read_status(0, 0, &status), 0);
	assert_int_equal(status.tgid, pid);
	assert_int_equal(status.state, 'R');
	assert_true(status.nnspid >= 1);
	assert_true(status.voluntary_ctxt_switches >= 0);
	assert_int_equal(procfs_read_status(pid, tid, &status), 0);
	assert_int_equal(status.tgid, pid);

	/* Its own syscall file shows the read that reads it. */
	assert_int_equal(procfs_read_syscall(pid, tid, &sc), 0);
	assert_false(sc.running);
	assert_int_equal(sc.nr, SYS_read);
	assert_int_equal(procfs_read_wchan(pid, tid, buf, sizeof buf), 0);
	assert_string_equal(buf, "");                  /* running: no wait channel */

	assert_int_equal(procfs_read_link(pid, "exe", buf, sizeof buf), 0);
	assert_non_null(strstr(buf, "test_procfs"));
	assert_int_equal(procfs_read_cmdline(pid, buf, sizeof buf), 0);
	assert_non_null(strstr(buf, "test_procfs"));
	int r = procfs_read_cgroup(pid, buf, sizeof buf);
	assert_true(r == 0 || r == -ENOENT);           /* -ENOENT: a v1-only host */
	if (r == 0)
		assert_int_equal(buf[0], '/');

	assert_int_equal(procfs_read_tasks(pid, &tids, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(tids[0], tid);
	free(tids);
	assert_true(procfs_read_file(pid, tid, "schedstat", buf, sizeof buf) > 0);
	assert_int_equal(procfs_read_sysctl("kernel/pid_max", &v), 0);
	assert_true(v > 0 && v < NO_PID);
	assert_int_equal(procfs_read_sysctl("kernel/no_such_setting", &v), -ENOENT);
	assert_int_equal(procfs_read_sysctl("kernel/ostype", &v), -EINVAL);   /* "Linux" */
}

/* Whatever is gone is -ESRCH, and its strings "". */
static void test_read_gone(void **state)
{
	struct procfs_status status;
	struct procfs_syscall sc;
	struct procfs_stat st;
	char buf[64] = "x";
	pid_t *tids;
	size_t n;
	(void)state;
	assert_int_equal(procfs_read_stat(NO_PID, NO_PID, &st), -ESRCH);
	assert_int_equal(procfs_read_stat(NO_PID, 0, &st), -ESRCH);
	assert_int_equal(procfs_read_status(NO_PID, 0, &status), -ESRCH);
	assert_int_equal(status.tracer_pid, -1);
	assert_int_equal(procfs_read_comm(NO_PID, 0, buf, sizeof buf), -ESRCH);
	assert_string_equal(buf, "");
	strcpy(buf, "x");
	assert_int_equal(procfs_read_link(NO_PID, "exe", buf, sizeof buf), -ESRCH);
	assert_string_equal(buf, "");
	assert_int_equal(procfs_read_cmdline(NO_PID, buf, sizeof buf), -ESRCH);
	assert_int_equal(procfs_read_cgroup(NO_PID, buf, sizeof buf), -ESRCH);
	assert_int_equal(procfs_read_syscall(NO_PID, 0, &sc), -ESRCH);
	assert_int_equal(procfs_read_wchan(NO_PID, 0, buf, sizeof buf), -ESRCH);
	assert_int_equal(procfs_read_tasks(NO_PID, &tids, &n), -ESRCH);
	assert_null(tids);
	assert_int_equal(n, 0);
	assert_int_equal(procfs_read_file(NO_PID, 0, "schedstat", buf, sizeof buf), -ESRCH);
	/* A thread of ours that does not exist. */
	assert_int_equal(procfs_read_file(getpid(), NO_PID, "stat", buf, sizeof buf), -ESRCH);
	assert_int_equal(procfs_open(0, 0, "no_such_file", 0), -ESRCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stat_real),
		cmocka_unit_test(test_stat_cut),
		cmocka_unit_test(test_stat_numbers),
		cmocka_unit_test(test_status_service),
		cmocka_unit_test(test_status_real),
		cmocka_unit_test(test_status_traced_thread),
		cmocka_unit_test(test_status_rejects_junk),
		cmocka_unit_test(test_capmask),
		cmocka_unit_test(test_cgroup),
		cmocka_unit_test(test_pressure),
		cmocka_unit_test(test_cpu_stat),
		cmocka_unit_test(test_exe),
		cmocka_unit_test(test_cmdline),
		cmocka_unit_test(test_comm),
		cmocka_unit_test(test_syscall),
		cmocka_unit_test(test_kstack),
		cmocka_unit_test(test_wchan),
		cmocka_unit_test(test_read_self),
		cmocka_unit_test(test_read_gone),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("procfs", tests, NULL, NULL);
}
