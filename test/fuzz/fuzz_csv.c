/* fuzz_csv.c - libFuzzer target for the CSV time-series reader of src/data (make fuzz). */
#include "fuzz_csv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return md_fuzz_csv(data, size); }
