/* cfi: a validator of call frame information, for libunwind's sake.
 *
 * Internal to stackdump/.  libunwind 1.6's DWARF interpreter trusts the
 * CFI it runs: DW_CFA_register's second register indexes its register
 * locations unchecked, a DWARF expression whose DW_OP_skip or DW_OP_bra
 * jumps backwards loops for ever, and DW_OP_div computes INT64_MIN / -1
 * (SIGFPE).  The CFI comes from the target's binaries, which may be
 * hostile: so every FDE is checked here before libunwind is shown it, and
 * one that could do harm is never shown.
 *
 * The check decodes the FDE and its CIE exactly as libunwind 1.6.2 does
 * (where it is stricter than DWARF, so are we) and accepts only what both
 * decode the same way: every instruction, every expression operation and
 * every operand must lie inside its entry, and every branch of an
 * expression must land forward on the start of an operation.  Pure code:
 * no allocation, no I/O.
 */
#ifndef CPUMOND_STACKDUMP_CFI_H
#define CPUMOND_STACKDUMP_CFI_H

#include <stddef.h>

/* Room for a reason, with its terminating NUL. */
#define CFI_WHY_SIZE 48

/* libunwind's x86-64 DWARF_NUM_PRESERVED_REGS: registers 0-16 (rax..rip). */
#define CFI_NUM_REGS 17

/* Checks the FDE whose length field is at offset OFF of the SIZE bytes at
 * BUF, laid out as .eh_frame (CIE pointers relative to themselves, CIE id
 * 0), and its CIE, which must lie in BUF too.  Returns 0 when libunwind
 * may run them, else -EINVAL with a short reason in WHY (when not NULL),
 * such as "DW_CFA_register to register 40" or "backward DW_OP_skip". */
int cfi_check_fde(const unsigned char *buf, size_t size, size_t off,
                  char why[CFI_WHY_SIZE]);

#endif
