/* fuzz_jpeg.c - libFuzzer target for the JPEG parser of src/data (make fuzz). */
#include "fuzz_one.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return md_fuzz_jpeg(data, size); }
