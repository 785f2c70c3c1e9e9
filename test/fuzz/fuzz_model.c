/* fuzz_model.c - libFuzzer target for JSON model configs: parsing, block
 * expansion, shape inference, planning (make fuzz). */
#include "fuzz_formats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return md_fuzz_model(data, size); }
