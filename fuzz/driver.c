/* driver.c — libFuzzer glue: compiled once per target with -DFUZZ_ENTRY=ink_fuzz_<target>. */
#include "fuzz.h"

#ifndef FUZZ_ENTRY
#error "compile with -DFUZZ_ENTRY=ink_fuzz_<target>"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    FUZZ_ENTRY(data, n);
    return 0;
}
