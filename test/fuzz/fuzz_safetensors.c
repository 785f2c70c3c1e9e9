/* fuzz_safetensors.c - libFuzzer target for the safetensors reader and the
 * checkpoint-metadata checks (make fuzz). */
#include "fuzz_formats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return md_fuzz_safetensors(data, size); }
