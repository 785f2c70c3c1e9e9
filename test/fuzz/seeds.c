/* seeds.c - writes the seed corpora of the fuzz targets: seeds DIR makes
 * DIR/idx, DIR/cifar, DIR/jpeg, DIR/csv, DIR/safetensors and DIR/model with
 * valid inputs to start from. */
#include <stdio.h>
#include <sys/stat.h>

#include "fuzz_csv.h"
#include "fuzz_formats.h"
#include "fuzz_one.h"

static void put(const char *dir, const char *sub, const char *name, const uint8_t *b, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(p, "wb");
    if (!f) { perror(p); return; }
    fwrite(b, 1, n, f);
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: seeds DIR\n"); return 2; }
    static uint8_t b[1 << 16];
    mkdir(argv[1], 0755);
    put(argv[1], "idx", "images", b, md_fuzz_seed_idx(b, 1));
    put(argv[1], "idx", "labels", b, md_fuzz_seed_idx(b, 0));
    put(argv[1], "cifar", "c10", b, md_fuzz_seed_cifar(b, 0));
    put(argv[1], "cifar", "c100", b, md_fuzz_seed_cifar(b, 1));
    put(argv[1], "jpeg", "baseline", b, md_fuzz_seed_jpeg(b, sizeof b, 0));
    put(argv[1], "jpeg", "progressive", b, md_fuzz_seed_jpeg(b, sizeof b, 1));
    put(argv[1], "csv", "plain", b, md_fuzz_seed_csv(b, sizeof b, 0));
    put(argv[1], "csv", "crlf_bom_quotes", b, md_fuzz_seed_csv(b, sizeof b, 1));
    put(argv[1], "safetensors", "checkpoint", b, md_fuzz_seed_safetensors(b, sizeof b));
    put(argv[1], "model", "blocks", b, md_fuzz_seed_model(b, sizeof b));
    return 0;
}
