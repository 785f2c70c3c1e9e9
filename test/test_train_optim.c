/* test_train_optim.c - optimizer steps through md_k_optim on the CPU device
 * against hand-computed values (PyTorch's SGD and AdamW formulas). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "train/optim.h"
#include "train/scaler.h"

/* The CPU device when its table has the optim kernel, plus the reference
 * backend (always): each test body runs on both. */
static int open_dev(int i, md_device **dev)
{
    static const char *const names[] = {"cpu", "ref"};
    if (i >= 2) return 0;
    struct md_device_opts o = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find(names[i]), 0, &o, dev), MD_OK, "%s", md_errmsg());
    if (!md_dev_supports(*dev, 22 /* optim */)) {
        fprintf(stderr, "  %s: no optim kernel yet; checked on ref only\n", names[i]);
        md_device_close(*dev);
        *dev = NULL;
    }
    return 1;
}
#define EACH_DEVICE(dev)                                                                                     \
    for (int di_ = 0; open_dev(di_, &(dev)); di_++)                                                          \
        if (dev)

static void check3(const float *got, const double *want, const char *what)
{
    for (int i = 0; i < 3; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-6 + 1e-6 * fabs(want[i]), "%s[%d]: %.9g, want %.9g", what, i,
                  got[i], want[i]);
}

/* params (3): the first two decayed, the third (a "bias") not; ranges given
 * out of order to exercise the merge. */
static const struct md_optim_range ranges[] = {{2, 1, 0, 1, 0}, {0, 1, 1, 1, 0}, {1, 1, 1, 1, 0}};

Test(optim, sgd_momentum_weight_decay_by_hand)
{
    md_device *dev;
    EACH_DEVICE(dev) {
    float *p, *g;
    cr_assert_eq(md_dev_alloc(dev, 3 * sizeof(float), (void **)&p, "p"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 3 * sizeof(float), (void **)&g, "g"), MD_OK);
    const float p0[3] = {1.0f, -2.0f, 0.5f}, g0[3] = {0.1f, 0.2f, -0.3f};
    md_dev_upload(dev, p, p0, sizeof p0);
    md_dev_upload(dev, g, g0, sizeof g0);
    struct md_optim_cfg cfg = {.kind = MD_OPT_SGD, .momentum = 0.9f, .weight_decay = 0.01f};
    md_optim *o;
    cr_assert_eq(md_optim_create(dev, &cfg, 3, ranges, 3, &o), MD_OK, "%s", md_errmsg());
    size_t dec, plain;
    md_optim_counts(o, &dec, &plain);
    cr_assert(dec == 2 && plain == 1);
    /* step 1: g' = g + wd p = (0.11, 0.18, -0.3); buf = g'; p -= 0.1 buf */
    cr_assert_eq(md_optim_step(o, p, g, 0.1f, 1.0f, NULL, NULL, MD_F32), MD_OK, "%s", md_errmsg());
    float got[3];
    md_dev_download(dev, got, p, sizeof got);
    check3(got, (const double[]){0.989, -2.018, 0.53}, "sgd step 1");
    /* step 2: g' = (0.10989, 0.17982, -0.3); buf = 0.9 buf + g' = (0.20889, 0.34182, -0.57) */
    cr_assert_eq(md_optim_step(o, p, g, 0.1f, 1.0f, NULL, NULL, MD_F32), MD_OK);
    md_dev_download(dev, got, p, sizeof got);
    check3(got, (const double[]){0.968111, -2.052182, 0.587}, "sgd step 2");
    md_dev_download(dev, got, md_optim_m(o), sizeof got);
    check3(got, (const double[]){0.20889, 0.34182, -0.57}, "momentum buffer");
    cr_assert_eq(md_optim_steps(o), 2);
    md_optim_free(o);
    md_dev_free(dev, p);
    md_dev_free(dev, g);
    md_device_close(dev);
    }
}

Test(optim, sgd_nesterov_and_grad_scale)
{
    md_device *dev;
    EACH_DEVICE(dev) {
    float *p, *g, *scale;
    md_dev_alloc(dev, 12, (void **)&p, "p");
    md_dev_alloc(dev, 12, (void **)&g, "g");
    md_dev_alloc(dev, 4, (void **)&scale, "scale");
    const float p0[3] = {1.0f, -2.0f, 0.5f}, g4[3] = {0.4f, 0.8f, -1.2f}, quarter = 0.25f;
    md_dev_upload(dev, p, p0, 12);
    md_dev_upload(dev, g, g4, 12); /* 4 x the gradient; the device scalar 0.25 scales it back */
    md_dev_upload(dev, scale, &quarter, 4);
    struct md_optim_cfg cfg = {.kind = MD_OPT_SGD, .momentum = 0.9f, .nesterov = 1, .weight_decay = 0.01f};
    md_optim *o;
    cr_assert_eq(md_optim_create(dev, &cfg, 3, ranges, 3, &o), MD_OK);
    cr_assert_eq(md_optim_step(o, p, g, 0.1f, 1.0f, scale, NULL, MD_F32), MD_OK, "%s", md_errmsg());
    float got[3];
    md_dev_download(dev, got, p, 12);
    /* nesterov step 1: buf = g' = (0.11, 0.18, -0.3); p -= lr (g' + 0.9 buf) = lr 1.9 g' */
    check3(got, (const double[]){1 - 0.1 * 1.9 * 0.11, -2 - 0.1 * 1.9 * 0.18, 0.5 + 0.1 * 1.9 * 0.3},
           "nesterov step 1");
    md_optim_free(o);
    md_dev_free(dev, p);
    md_dev_free(dev, g);
    md_dev_free(dev, scale);
    md_device_close(dev);
    }
}

Test(optim, adamw_by_hand)
{
    md_device *dev;
    EACH_DEVICE(dev) {
    float *p, *g;
    md_dev_alloc(dev, 12, (void **)&p, "p");
    md_dev_alloc(dev, 12, (void **)&g, "g");
    const float p0[3] = {1.0f, -2.0f, 0.5f}, g0[3] = {0.1f, 0.2f, -0.3f};
    md_dev_upload(dev, p, p0, 12);
    md_dev_upload(dev, g, g0, 12);
    struct md_optim_cfg cfg = {.kind = MD_OPT_ADAMW, .weight_decay = 0.1f};
    md_optim *o;
    cr_assert_eq(md_optim_create(dev, &cfg, 3, ranges, 3, &o), MD_OK);
    cr_assert_eq(md_optim_config(o)->beta1, 0.9f, "defaults filled");
    cr_assert_eq(md_optim_step(o, p, g, 0.01f, 1.0f, NULL, NULL, MD_F32), MD_OK, "%s", md_errmsg());
    float got[3];
    md_dev_download(dev, got, p, 12);
    /* t = 1: p *= 1 - lr wd; m^ = g, v^ = g^2; p -= lr g / (|g| + eps) */
    double want[3];
    for (int i = 0; i < 3; i++) {
        double wd = i < 2 ? 0.1 : 0.0, gi = g0[i];
        want[i] = p0[i] * (1 - 0.01 * wd) - 0.01 * gi / (fabs(gi) + 1e-8);
    }
    check3(got, want, "adamw step 1");
    /* t = 2 with the same gradient: m = 0.19 g, v = 0.001999 g^2;
     * m^ = m / 0.19 = g, v^ = v / 0.001999 = g^2: the same step again */
    cr_assert_eq(md_optim_step(o, p, g, 0.01f, 1.0f, NULL, NULL, MD_F32), MD_OK);
    md_dev_download(dev, got, p, 12);
    for (int i = 0; i < 3; i++) {
        double wd = i < 2 ? 0.1 : 0.0, gi = g0[i];
        want[i] = want[i] * (1 - 0.01 * wd) - 0.01 * gi / (fabs(gi) + 1e-8);
    }
    check3(got, want, "adamw step 2");
    md_dev_download(dev, got, md_optim_v(o), 12);
    check3(got, (const double[]){0.001999 * 0.01, 0.001999 * 0.04, 0.001999 * 0.09}, "adamw v");
    md_optim_free(o);
    md_dev_free(dev, p);
    md_dev_free(dev, g);
    md_device_close(dev);
    }
}

Test(optim, bad_ranges_are_refused)
{
    md_device *dev;
    EACH_DEVICE(dev) {
    struct md_optim_cfg cfg = {.kind = MD_OPT_SGD};
    const struct md_optim_range over[] = {{0, 2, 1, 1, 0}, {1, 2, 0, 1, 0}};
    md_optim *o = NULL;
    cr_assert_eq(md_optim_create(dev, &cfg, 3, over, 2, &o), MD_ERR_INTERNAL);
    cr_assert_null(o);
    md_optim_free(NULL);
    md_device_close(dev);
    }
}

/* md_optim_step_ctl: lr, t, loss scale and clipping read from device memory,
 * and a non-finite step leaving everything unchanged (what a replayed CUDA
 * graph relies on). Same numbers as the hand-computed SGD steps above. */
Test(optim, device_side_step_values_clip_and_skip)
{
    md_device *dev;
    EACH_DEVICE(dev) {
    float *p, *g;
    struct md_optim_ctl *c;
    cr_assert_eq(md_dev_alloc(dev, 3 * sizeof(float), (void **)&p, "p"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 3 * sizeof(float), (void **)&g, "g"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, sizeof *c, (void **)&c, "ctl"), MD_OK);
    const float p0[3] = {1.0f, -2.0f, 0.5f}, g0[3] = {0.4f, 0.8f, -1.2f}; /* 4x the gradients above */
    md_dev_upload(dev, p, p0, sizeof p0);
    md_dev_upload(dev, g, g0, sizeof g0);
    struct md_optim_cfg cfg = {.kind = MD_OPT_SGD, .momentum = 0.9f, .weight_decay = 0.01f};
    md_optim *o;
    cr_assert_eq(md_optim_create(dev, &cfg, 3, ranges, 3, &o), MD_OK, "%s", md_errmsg());
    /* loss scale 4 undone by grad_scale 0.25; the norm of the unscaled g is
     * 0.3742 < clip 1: step 1 as above */
    struct md_optim_ctl h = {.step = 1, .clip = 1.0, .lr = 0.1f, .grad_scale = 0.25f, .loss_sum = 2.5f,
                             .grad_sumsq = 0.16f + 0.64f + 1.44f};
    md_dev_upload(dev, c, &h, sizeof h);
    cr_assert_eq(md_optim_step_ctl(o, p, g, c, NULL, NULL, MD_F32), MD_OK, "%s", md_errmsg());
    float got[3];
    md_dev_download(dev, got, p, sizeof got);
    check3(got, (const double[]){0.989, -2.018, 0.53}, "ctl step 1");
    cr_assert_eq(md_optim_steps(o), 1);
    /* a non-finite loss, then non-finite gradients: nothing moves */
    h.step = 2;
    h.loss_sum = NAN;
    md_dev_upload(dev, c, &h, sizeof h);
    cr_assert_eq(md_optim_step_ctl(o, p, g, c, NULL, NULL, MD_F32), MD_OK);
    h.loss_sum = 1.0f;
    h.grad_sumsq = INFINITY;
    md_dev_upload(dev, c, &h, sizeof h);
    cr_assert_eq(md_optim_step_ctl(o, p, g, c, NULL, NULL, MD_F32), MD_OK);
    md_dev_download(dev, got, p, sizeof got);
    check3(got, (const double[]){0.989, -2.018, 0.53}, "skipped steps");
    md_dev_download(dev, got, md_optim_m(o), sizeof got);
    check3(got, (const double[]){0.11, 0.18, -0.3}, "momentum untouched by skipped steps");
    /* step 2 with clip 0.1: norm 0.3742 -> g x 0.1 / (0.3742 + 1e-6); lr from the block (0.2) */
    h.grad_sumsq = 0.16f + 0.64f + 1.44f;
    h.clip = 0.1;
    h.lr = 0.2f;
    md_dev_upload(dev, c, &h, sizeof h);
    cr_assert_eq(md_optim_step_ctl(o, p, g, c, NULL, NULL, MD_F32), MD_OK);
    double norm = sqrt((double)(0.16f + 0.64f + 1.44f)) * 0.25, f = 0.25 * 0.1 / (norm + 1e-6);
    double want[3], pm[3] = {0.989, -2.018, 0.53}, buf0[3] = {0.11, 0.18, -0.3}, wd[3] = {0.01, 0.01, 0};
    for (int i = 0; i < 3; i++) {
        double gi = g0[i] * f + wd[i] * pm[i], b = 0.9 * buf0[i] + gi;
        want[i] = pm[i] - 0.2 * b;
    }
    md_dev_download(dev, got, p, sizeof got);
    check3(got, want, "ctl step 2, clipped");
    md_optim_free(o);
    md_dev_free(dev, p);
    md_dev_free(dev, g);
    md_dev_free(dev, c);
    md_device_close(dev);
    }
}

/* The loss scaler decided on the device (kernels.h md_scale_ctl, applied by
 * md_optim_step_ctl's last kernel) against train/scaler.c's md_scaler_update
 * driving host-decided steps, step for step: growth after 3 clean steps up
 * to the 2^24 cap, halving and skipping on non-finite gradients, the count
 * restarting, then halving down to 1 and giving up there. AdamW (t counts
 * the steps taken only), two ranges (the rule runs once per step); the
 * params must match bit for bit. */
Test(optim, device_loss_scaler_matches_the_host_rule)
{
    md_device *dev;
    EACH_DEVICE(dev) {
    float *pd, *ph, *g;
    struct md_optim_ctl *c;
    struct md_scale_ctl *sc;
    cr_assert_eq(md_dev_alloc(dev, 3 * sizeof(float), (void **)&pd, "pd"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 3 * sizeof(float), (void **)&ph, "ph"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 3 * sizeof(float), (void **)&g, "g"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, sizeof *c, (void **)&c, "ctl"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, sizeof *sc, (void **)&sc, "scaler"), MD_OK);
    const float p0[3] = {1.0f, -2.0f, 0.5f}, g0[3] = {4096.0f, -8192.0f, 12288.0f};
    md_dev_upload(dev, pd, p0, sizeof p0);
    md_dev_upload(dev, ph, p0, sizeof p0);
    md_dev_upload(dev, g, g0, sizeof g0);
    struct md_optim_cfg cfg = {.kind = MD_OPT_ADAMW, .weight_decay = 0.01f};
    md_optim *od, *oh;
    cr_assert_eq(md_optim_create(dev, &cfg, 3, ranges, 3, &od), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_optim_create(dev, &cfg, 3, ranges, 3, &oh), MD_OK, "%s", md_errmsg());
    struct md_scaler hs;
    md_scaler_init(&hs, 1);
    hs.scale = 4194304.0f; /* 2^22 */
    hs.growth_interval = 3;
    struct md_scale_ctl s0;
    memset(&s0, 0, sizeof s0);
    s0.scale = hs.scale;
    s0.growth_interval = 3;
    md_dev_upload(dev, sc, &s0, sizeof s0);
    /* F: finite, N: not; then non-finite until the host rule gives up */
    const char *script = "FFFFFFFFFNFFNFFFNNFFFF";
    int gave_up = 0, grew = 0, capped = 0;
    for (int i = 0; i < 200 && !gave_up; i++) {
        int finite = i < (int)strlen(script) ? script[i] == 'F' : 0;
        float used = hs.scale;
        int action = md_scaler_update(&hs, finite);
        grew += hs.scale > used;
        capped += finite && used == 16777216.0f && hs.clean == 0;
        if (action > 0)
            cr_assert_eq(md_optim_step(oh, ph, g, 0.01f, (float)(1.0 / (double)used), NULL, NULL, MD_F32), MD_OK);
        /* ctl->step and ctl->grad_scale are not what the scaler's step reads */
        struct md_optim_ctl h = {.step = 999, .lr = 0.01f, .grad_scale = 0.0f, .loss_sum = 1.0f,
                                 .grad_sumsq = finite ? 1.0f : INFINITY};
        md_dev_upload(dev, c, &h, sizeof h);
        cr_assert_eq(md_optim_step_ctl(od, pd, g, c, sc, NULL, MD_F32), MD_OK, "%s", md_errmsg());
        struct md_scale_ctl s;
        md_dev_download(dev, &s, sc, sizeof s);
        cr_assert_eq(md_dev_sync(dev), MD_OK);
        cr_assert_eq(s.gave_up, action < 0, "step %d: gave up", i);
        gave_up = action < 0;
        cr_assert_eq(s.scale, hs.scale, "step %d: scale %g, host %g", i, (double)s.scale, (double)hs.scale);
        cr_assert_eq(s.clean, hs.clean, "step %d: clean steps", i);
        cr_assert_eq(s.skipped, hs.skipped, "step %d: skipped", i);
        cr_assert_eq(s.taken, md_optim_steps(oh), "step %d: steps taken", i);
        float a[3], b[3];
        md_dev_download(dev, a, pd, sizeof a);
        md_dev_download(dev, b, ph, sizeof b);
        cr_assert(memcmp(a, b, sizeof a) == 0, "step %d: params %.9g %.9g %.9g, host-decided %.9g %.9g %.9g", i,
                  (double)a[0], (double)a[1], (double)a[2], (double)b[0], (double)b[1], (double)b[2]);
    }
    cr_assert(gave_up && grew == 4 && capped == 1, "the script reaches the cap (%d, %d) and the floor", grew, capped);
    cr_assert_eq(hs.scale, 1.0f);
    md_optim_free(od);
    md_optim_free(oh);
    md_dev_free(dev, pd);
    md_dev_free(dev, ph);
    md_dev_free(dev, g);
    md_dev_free(dev, c);
    md_dev_free(dev, sc);
    md_device_close(dev);
    }
}
