/* fuzz_idx.c - libFuzzer target for the IDX parser of src/data (make fuzz). */
#include "fuzz_one.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return md_fuzz_idx(data, size); }
