/* areas.c - which feature areas are built (each stage file answers). */
#include "cli/job.h"

const char *md_area_pending(md_area a)
{
    switch (a) {
    case MD_AREA_NN: return md_nn_pending();
    case MD_AREA_DATA: return md_data_pending();
    case MD_AREA_TRAIN: return md_train_pending();
    case MD_AREA_BENCH: return md_bench_pending();
    default: return NULL;
    }
}
