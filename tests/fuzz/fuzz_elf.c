/* libFuzzer target: stackdump's readers of files that belong to the target
 * process -- the ELF reader (headers, notes, build-id, .eh_frame_hdr,
 * symbols, .gnu_debugdata through xz) and the .debug_frame converter.  A
 * corrupt or hostile module must never crash the daemon.
 *
 * The seeds in tests/fuzz/corpus/elf/ are tiny real ELF files (built with
 * -nostdlib and 16-byte page alignment): one with .eh_frame_hdr, one with
 * only .debug_frame, a PIE, a stripped one with MiniDebugInfo, and an ELF
 * header alone.  Inputs that once crashed are kept there as crash-* files. */
#include "stackdump/debugframe.h"
#include "stackdump/elfinfo.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct elfinfo ei;

	if (elfinfo_read_mem(data, size, &ei) == 0) {
		uint64_t start, v;
		/* Look up addresses around every symbol and segment. */
		for (size_t i = 0; i < ei.nsyms && i < 64; i++) {
			elfinfo_symbol(&ei, ei.syms[i].value, &start);
			elfinfo_symbol(&ei, ei.syms[i].value + ei.syms[i].size - 1, &start);
			elfinfo_symbol(&ei, ei.syms[i].value + ei.syms[i].size, &start);
		}
		for (size_t i = 0; i < ei.nloads; i++) {
			elfinfo_vaddr(&ei, ei.loads[i].offset, &v);
			elfinfo_vaddr(&ei, ei.loads[i].offset + ei.loads[i].filesz, &v);
		}
		elfinfo_eh_word(&ei, ei.eh_table_vaddr, &v);
		elfinfo_eh_word(&ei, ei.eh_data_vaddr + ei.eh_data_size - 8, &v);
		elfinfo_free(&ei);
	}

	/* The same bytes as a .debug_frame section. */
	struct debugframe df;
	if (debugframe_convert(data, size, 0x1000, 0x100000, 1u << 20, &df) == 0)
		debugframe_free(&df);
	return 0;
}
