/* test_data_loader.c - the loader: same batches for any worker count,
 * determinism under a seed, augmentation correctness (crop and mirror),
 * layouts, partial batches, errors from workers, statistics. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "core/mem.h"
#include "data/data.h"
#include "data/data_impl.h"
#include "helpers.h"
#include "test_data_files.h"

static struct md_data_opts synth_opts(void)
{
    struct md_data_opts o;
    md_data_opts_default(&o);
    snprintf(o.dataset, sizeof o.dataset, "synthetic");
    o.max_samples = 200;
    return o;
}

/* Every batch of one epoch, concatenated: inputs[0], labels and n per batch. */
struct epoch { float *x; int32_t *y; int nb; int sizes[256]; long long total; };

static struct epoch run_epoch(struct md_data *d, struct md_loader_opts lo, int epoch)
{
    struct md_loader *l = NULL;
    cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_loader_start_epoch(l, epoch), MD_OK);
    size_t el = md_data_input_elems(d, 0);
    long long n = md_data_count(d, lo.split);
    struct epoch e = {malloc((size_t)n * el * sizeof(float)), malloc((size_t)n * sizeof(int32_t)), 0, {0}, 0};
    for (;;) {
        struct md_batch *b = NULL;
        cr_assert_eq(md_loader_next(l, &b), MD_OK, "%s", md_errmsg());
        if (!b) break;
        cr_assert_eq(b->batch, e.nb, "in order");
        cr_assert_eq(b->epoch, epoch);
        memcpy(e.x + e.total * el, b->inputs[0], (size_t)b->n * el * sizeof(float));
        memcpy(e.y + e.total, b->labels, (size_t)b->n * sizeof(int32_t));
        e.sizes[e.nb++] = b->n;
        e.total += b->n;
        md_loader_release(l, b);
    }
    cr_assert_eq(e.nb, md_loader_num_batches(l));
    md_loader_free(l);
    return e;
}

static int same_epoch(const struct epoch *a, const struct epoch *b, size_t el)
{
    if (a->nb != b->nb || a->total != b->total) return 0;
    if (memcmp(a->sizes, b->sizes, sizeof a->sizes)) return 0;
    return memcmp(a->x, b->x, (size_t)a->total * el * sizeof(float)) == 0 &&
           memcmp(a->y, b->y, (size_t)a->total * sizeof(int32_t)) == 0;
}

static void free_epoch(struct epoch *e) { free(e->x); free(e->y); }

Test(loader, workers_0_1_2_4_give_identical_batches)
{
    struct md_data_opts o = synth_opts();
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    size_t el = md_data_input_elems(d, 0);
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 7, .shuffle = 1, .augment = 1,
                                .prefetch = 2, .seed = 42};
    struct epoch ref = run_epoch(d, lo, 3);
    cr_assert_eq(ref.total, 200);
    cr_assert_eq(ref.sizes[ref.nb - 1], 200 % 7, "the last, partial batch is delivered");
    int workers[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        lo.num_workers = workers[i];
        lo.prefetch = 1 + i;
        struct epoch e = run_epoch(d, lo, 3);
        cr_assert(same_epoch(&ref, &e, el), "%d workers differ from the main thread", workers[i]);
        free_epoch(&e);
    }
    free_epoch(&ref);
    md_data_free(d);
}

Test(loader, jpeg_workers_identical)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 3, 6, 0, 20, 20);
    struct md_data_opts o;
    md_data_opts_default(&o);
    snprintf(o.dataset, sizeof o.dataset, "jpeg");
    snprintf(o.data_dir, sizeof o.data_dir, "%s", dir);
    o.image_size = 12;
    o.val_split = 0;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 4, .shuffle = 1, .augment = 1,
                                .prefetch = 2, .seed = 5};
    struct epoch a = run_epoch(d, lo, 0);
    lo.num_workers = 4;
    struct epoch b = run_epoch(d, lo, 0);
    cr_assert(same_epoch(&a, &b, md_data_input_elems(d, 0)));
    free_epoch(&a);
    free_epoch(&b);
    md_data_free(d);
    th_tmpdir_free(dir);
}

Test(loader, seed_and_epoch_decide_the_order)
{
    struct md_data_opts o = synth_opts();
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK);
    size_t el = md_data_input_elems(d, 0);
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 32, .shuffle = 1, .prefetch = 2, .seed = 9,
                                .num_workers = 2};
    struct epoch a = run_epoch(d, lo, 0), b = run_epoch(d, lo, 0), c = run_epoch(d, lo, 1);
    lo.seed = 10;
    struct epoch e = run_epoch(d, lo, 0);
    cr_assert(same_epoch(&a, &b, el), "same seed and epoch: same batches");
    cr_assert(!same_epoch(&a, &c, el), "another epoch: another order");
    cr_assert(!same_epoch(&a, &e, el), "another seed: another order");
    /* every sample once per epoch */
    lo.seed = 9;
    lo.shuffle = 0;
    struct epoch s = run_epoch(d, lo, 0);
    int lab[10] = {0}, lab2[10] = {0};
    for (long long i = 0; i < a.total; i++) { lab[a.y[i]]++; lab2[s.y[i]]++; }
    cr_assert_eq(memcmp(lab, lab2, sizeof lab), 0, "a shuffled epoch has the same labels");
    free_epoch(&a); free_epoch(&b); free_epoch(&c); free_epoch(&e); free_epoch(&s);
    md_data_free(d);
}

Test(loader, augmentation_is_a_crop_or_its_mirror)
{
    struct md_data_opts o = synth_opts();
    struct md_data_request req = {.num_inputs = 1, .inputs = {{.c = 2, .h = 12, .w = 16}}};
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &req, &d), MD_OK, "%s", md_errmsg());
    int pad = md_data_aug_pad(d);
    cr_assert_eq(pad, 2, "pad = side/8 rounded");
    cr_assert(md_data_aug_flip(d));
    const int C = 2, H = 12, W = 16;
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 64, .prefetch = 1, .seed = 3};
    struct epoch plain = run_epoch(d, lo, 0);
    lo.augment = 1;
    struct epoch aug = run_epoch(d, lo, 0);
    const float *m = md_data_mean(d, 0), *s = md_data_std(d, 0);
    int flips = 0, shifts = 0;
    for (int i = 0; i < 64; i++) {
        const float *p = plain.x + (size_t)i * C * H * W, *a = aug.x + (size_t)i * C * H * W;
        struct md_aug g = md_data_aug_draw(d, 3, 0, i);
        int found = 0;
        /* the augmented sample must be exactly one crop of the zero-padded
         * image, mirrored or not, and the one the draw says */
        for (int fl = 0; fl < 2 && !found; fl++)
            for (int dy = 0; dy <= 2 * pad && !found; dy++)
                for (int dx = 0; dx <= 2 * pad && !found; dx++) {
                    int ok = 1;
                    for (int c = 0; c < C && ok; c++)
                        for (int y = 0; y < H && ok; y++)
                            for (int x = 0; x < W && ok; x++) {
                                int sy = y + dy - pad, sx = (fl ? W - 1 - x : x) + dx - pad;
                                float want = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? p[(c * H + sy) * W + sx]
                                                                                        : (0.0f - m[c]) / s[c];
                                ok = a[(c * H + y) * W + x] == want;
                            }
                    if (ok) {
                        found = 1;
                        cr_assert(fl == g.flip && dy == g.dy && dx == g.dx, "sample %d: not the drawn augmentation", i);
                        flips += fl;
                        shifts += dy != pad || dx != pad;
                    }
                }
        cr_assert(found, "sample %d is no crop/flip of the original", i);
        cr_assert_eq(plain.y[i], aug.y[i]);
    }
    cr_assert(flips > 10 && flips < 54, "flips %d of 64", flips);
    cr_assert(shifts > 32, "shifts %d of 64", shifts);
    free_epoch(&plain);
    free_epoch(&aug);
    md_data_free(d);
}

Test(loader, nhwc_is_nchw_transposed)
{
    struct md_data_opts o = synth_opts();
    struct md_data_request req = {.num_inputs = 1, .inputs = {{.c = 3, .h = 5, .w = 4}}};
    struct md_data *a = NULL, *b = NULL;
    cr_assert_eq(md_data_open(&o, &req, &a), MD_OK);
    req.layout = MD_NHWC;
    cr_assert_eq(md_data_open(&o, &req, &b), MD_OK);
    cr_assert_eq(md_data_layout(b), MD_NHWC);
    struct md_loader_opts lo = {.split = MD_SPLIT_VAL, .batch_size = 8, .prefetch = 1, .seed = 1};
    struct epoch x = run_epoch(a, lo, 0), y = run_epoch(b, lo, 0);
    for (long long i = 0; i < x.total; i++)
        for (int c = 0; c < 3; c++)
            for (int h = 0; h < 5; h++)
                for (int w = 0; w < 4; w++)
                    cr_assert_eq(x.x[((i * 3 + c) * 5 + h) * 4 + w], y.x[((i * 5 + h) * 4 + w) * 3 + c]);
    free_epoch(&x);
    free_epoch(&y);
    md_data_free(a);
    md_data_free(b);
}

Test(loader, drop_last_abandon_and_stats)
{
    struct md_data_opts o = synth_opts();
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK);
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 64, .drop_last = 1, .prefetch = 2,
                                .num_workers = 2, .seed = 1, .shuffle = 1};
    struct md_loader *l = NULL;
    cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK);
    cr_assert_eq(md_loader_num_batches(l), 3, "200 / 64 without the partial batch");
    /* abandon an epoch half way, holding a batch; the next one starts clean */
    cr_assert_eq(md_loader_start_epoch(l, 0), MD_OK);
    struct md_batch *b = NULL;
    cr_assert_eq(md_loader_next(l, &b), MD_OK);
    struct md_batch *old = b;
    cr_assert_eq(md_loader_start_epoch(l, 1), MD_OK);
    usleep(20000);                /* let the workers refill slot 0 */
    md_loader_release(l, old);    /* a late release of the abandoned epoch's batch: ignored */
    int got = 0;
    for (;;) {
        cr_assert_eq(md_loader_next(l, &b), MD_OK);
        if (!b) break;
        cr_assert_eq(b->n, 64);
        cr_assert_eq(b->pinned, 0);
        got++;
        md_loader_release(l, b);
    }
    cr_assert_eq(got, 3);
    struct md_loader_stats st;
    md_loader_stats(l, &st);
    cr_assert_eq(st.batches, 4);
    cr_assert(st.samples >= 4 * 64 && st.samples <= 6 * 64, "samples %lld", st.samples);
    cr_assert(st.wall_s > 0 && st.samples_per_s > 0 && st.decode_per_s > 0 && st.prepare_s > 0);
    cr_assert(st.wait_s >= 0 && st.wait_s <= st.wall_s + 1e-3);
    md_loader_stats_reset(l);
    md_loader_stats(l, &st);
    cr_assert_eq(st.batches, 0);
    md_loader_free(l);
    md_data_free(d);
}

Test(loader, pinned_batches_through_the_device)
{
    const md_backend *be = md_backend_find("cpu");
    md_device *dev = NULL;
    struct md_device_opts dopts = {.threads = 1};
    cr_assert_eq(md_device_open(be, 0, &dopts, &dev), MD_OK, "%s", md_errmsg());
    struct md_data_opts o = synth_opts();
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK);
    struct md_loader_opts lo = {.split = MD_SPLIT_VAL, .batch_size = 16, .prefetch = 2, .num_workers = 1,
                                .seed = 1, .pin_dev = dev};
    struct md_loader *l = NULL;
    cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK);
    cr_assert_eq(md_loader_start_epoch(l, 0), MD_OK);
    struct md_batch *b = NULL;
    cr_assert_eq(md_loader_next(l, &b), MD_OK);
    cr_assert_eq(b->pinned, md_device_get_info(dev)->benefits_from_pinned);
    md_loader_release(l, b);
    md_loader_free(l);
    md_data_free(d);
    md_device_close(dev);
}

/* A noisy JPEG with an intact header and a cut body: open succeeds, decoding fails. */
static void cut_jpeg(const char *path)
{
    enum { W = 64, H = 64 };
    static uint8_t rgb[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)((i * 2654435761u) >> 24);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    tjCompress2(tj, rgb, W, 0, H, TJPF_RGB, &jpg, &len, TJSAMP_444, 95, 0);
    tf_put(path, jpg, len, 0);
    tjFree(jpg);
    tjDestroy(tj);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    cr_assert_eq(truncate(path, n * 2 / 3), 0);
}

Test(loader, decode_errors_fail_or_skip)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 4, 0, 64, 64);
    char p[1200];
    snprintf(p, sizeof p, "%s/classb/img002.jpg", dir);
    for (int skip = 0; skip < 2; skip++) {
        for (int workers = 0; workers <= 2; workers += 2) {
            /* sound at open (which decodes every file), cut afterwards: the
             * loader meets the damage */
            uint8_t rgb[3];
            tf_class_rgb(1, rgb);
            tf_write_jpeg(p, 64, 64, rgb[0], rgb[1], rgb[2]);
            struct md_data_opts o;
            md_data_opts_default(&o);
            snprintf(o.dataset, sizeof o.dataset, "jpeg");
            snprintf(o.data_dir, sizeof o.data_dir, "%s", dir);
            o.skip_bad = skip;
            o.image_size = 64; /* full-size decode: the cut reaches the decoder */
            o.val_split = 0;
            struct md_data *d = NULL;
            cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
            cut_jpeg(p);
            struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 3, .prefetch = 2,
                                        .num_workers = workers, .seed = 1};
            struct md_loader *l = NULL;
            cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK);
            cr_assert_eq(md_loader_start_epoch(l, 0), MD_OK);
            md_status st = MD_OK;
            int total = 0;
            for (;;) {
                struct md_batch *b = NULL;
                st = md_loader_next(l, &b);
                if (st != MD_OK || !b) break;
                total += b->n;
                md_loader_release(l, b);
            }
            if (skip) {
                cr_assert_eq(st, MD_OK, "%s", md_errmsg());
                cr_assert_eq(total, 7, "one sample dropped");
                cr_assert_eq(md_data_skipped(d), 1);
                cr_assert(strstr(md_data_first_bad(d), "img002.jpg"), "%s", md_data_first_bad(d));
            } else {
                cr_assert_eq(st, MD_ERR_DATA, "workers %d", workers);
                cr_assert(strstr(md_errmsg(), "classb/img002.jpg"), "%s", md_errmsg());
            }
            md_loader_free(l);
            md_data_free(d);
        }
    }
    th_tmpdir_free(dir);
}
