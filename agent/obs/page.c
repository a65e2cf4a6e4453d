/* The page served at / (issue 31): agent/obs/page.html, embedded into the
 * binary at build time by the assembler's .incbin.
 *
 * Why .incbin and not a C string or a generated file: the page is HTML,
 * CSS and JavaScript that people edit and read as such (a C string of it
 * would be 600 lines of escaped quotes); a file generated under $(BUILD)
 * would have to be taught to every build that compiles the library on its
 * own (the Makefile's flavours, scripts/fuzz.sh, which lists the module
 * folders' *.c), while this file is found by the same wildcard as every
 * other source, and the assembler reads the page wherever this is
 * compiled — every build runs from the repository root, which the path is
 * relative to.  The Makefile names page.html as a prerequisite of this
 * object (the compiler's -MMD cannot see an .incbin).  A NUL follows the
 * page so it is a C string too.
 */
#include "obs.h"

#include <stdint.h>

/* clang-format off */
__asm__(".pushsection .rodata\n"
        ".balign 16\n"
        ".globl ea__page_bytes\n"
        ".hidden ea__page_bytes\n"
        "ea__page_bytes:\n"
        ".incbin \"agent/obs/page.html\"\n"
        "ea__page_bytes_end:\n"
        ".byte 0\n"
        ".balign 8\n"
        ".globl ea__page_size\n"
        ".hidden ea__page_size\n"
        "ea__page_size:\n"
        ".quad ea__page_bytes_end - ea__page_bytes\n"
        ".popsection\n");
/* clang-format on */

extern const char ea__page_bytes[];
extern const uint64_t ea__page_size;

const char *ea__page_html(size_t *len) {
  *len = (size_t)ea__page_size;
  return ea__page_bytes;
}
