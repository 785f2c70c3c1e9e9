/* loader_bench.c - JPEG decode and loader throughput (scripts/bench/loader_bench.sh).
 *
 *   loader_bench make DIR N W H          write N synthetic W x H JPEGs in 10 class folders
 *   loader_bench run DIR SIZE EPOCHS W.. decode rate, then loader rate per worker count
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "core/log.h"
#include "core/timer.h"
#include "data/data.h"
#include "data/data_impl.h"

static int make(const char *dir, int n, int w, int h)
{
    mkdir(dir, 0755);
    unsigned char *rgb = malloc((size_t)w * h * 3);
    tjhandle tj = tjInitCompress();
    for (int i = 0; i < n; i++) {
        int k = i % 10;
        char p[4096];
        snprintf(p, sizeof p, "%s/class%d", dir, k);
        mkdir(p, 0755);
        int32_t lab;
        uint8_t *planar = malloc((size_t)w * h * 3);
        md_synth_sample(7, i, 10, 3, h, w, planar, &lab);
        for (int q = 0; q < w * h; q++)
            for (int c = 0; c < 3; c++) rgb[q * 3 + c] = planar[(size_t)c * w * h + q];
        free(planar);
        unsigned char *jpg = NULL;
        unsigned long len = 0;
        tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &len, TJSAMP_420, 90, 0);
        snprintf(p, sizeof p, "%s/class%d/img%05d.jpg", dir, k, i);
        FILE *f = fopen(p, "wb");
        if (!f) { perror(p); return 1; }
        fwrite(jpg, 1, len, f);
        fclose(f);
        tjFree(jpg);
    }
    tjDestroy(tj);
    free(rgb);
    return 0;
}

static int run(const char *dir, int size, int epochs, int argc, char **argv)
{
    struct md_data_opts o;
    md_data_opts_default(&o);
    snprintf(o.dataset, sizeof o.dataset, "jpeg");
    snprintf(o.data_dir, sizeof o.data_dir, "%s", dir);
    o.image_size = size;
    o.val_split = 0;
    md_log_init(MD_QUIET);
    struct md_data *d = NULL;
    double t0 = md_now();
    if (md_data_open(&o, NULL, &d) != MD_OK) { fprintf(stderr, "%s\n", md_errmsg()); return 1; }
    long long n = md_data_count(d, MD_SPLIT_TRAIN);
    printf("open (header check of %lld files + mean/std): %.2f s\n", n, md_now() - t0);
    printf("%-8s %12s %12s %12s %10s\n", "workers", "samples/s", "batches/s", "decode/s", "wait %");
    for (int a = 0; a < argc; a++) {
        int w = atoi(argv[a]);
        struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 64, .shuffle = 1, .augment = 1,
                                    .num_workers = w, .prefetch = 4, .seed = 1};
        struct md_loader *l = NULL;
        if (md_loader_create(d, &lo, &l) != MD_OK) { fprintf(stderr, "%s\n", md_errmsg()); return 1; }
        for (int e = 0; e < epochs; e++) {
            md_loader_start_epoch(l, e);
            struct md_batch *b;
            while (md_loader_next(l, &b) == MD_OK && b) md_loader_release(l, b);
        }
        struct md_loader_stats s;
        md_loader_stats(l, &s);
        printf("%-8d %12.0f %12.1f %12.0f %9.0f%%\n", w, s.samples_per_s, s.batches_per_s, s.decode_per_s,
               100.0 * s.wait_s / s.wall_s);
        md_loader_free(l);
    }
    md_data_free(d);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "make") == 0) return make(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (argc >= 6 && strcmp(argv[1], "run") == 0)
        return run(argv[2], atoi(argv[3]), atoi(argv[4]), argc - 5, argv + 5);
    fprintf(stderr, "usage: loader_bench make DIR N W H | run DIR SIZE EPOCHS WORKERS...\n");
    return 2;
}
