/* test_seeds.c - the seeds' models (configs/models) and the diagnostics run.
 *
 * Parameter counts are pinned against sums worked out by hand from the
 * architectures (README "The seeds' models and the diagnostics run" gives the
 * breakdown), so a change to a config or to the loader's counting shows up.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "nn/model.h"

struct count_case {
    const char *name;
    size_t params, params_reduced; /* 0: not pinned */
    int inputs, classes;
};

/* Worked out from the architectures:
 *  base_multi_channel: per pathway 3 stages x (2 conv3x3 + 2 BN) at 32/64/128:
 *    colour 286,560 + 896 BN = 287,456; brightness 285,984 + 896 = 286,880;
 *    weighted_add 2; linear 128*100 + 100 = 12,900          -> 587,238
 *  base_multi_channel_large: 4 stages at 64/128/256/512: colour 4,683,456 +
 *    3,840 BN; brightness 4,682,304 + 3,840; concat 1024 -> linear 102,500 -> 9,475,940
 *  multi_channel_resnet50: ResNet-50 trunk without fc 23,508,032 (colour) +
 *    23,501,760 (1-channel stem) + linear 4096*100 + 100    -> 47,419,492
 *  continuous_integration: stems 4,768 + 1,632; stages 1,181,568 per pathway;
 *    carries 18,560 + 73,984 + 295,424; weights 2 + 3 + 3 + 3; fc 257,000 -> 3,014,515
 *  custom_cnn: convs 388,896 with BN; fc 256*2 + 2       -> 389,410
 *  resnet50: torchvision                                  -> 25,557,032 */
static const struct count_case counts[] = {
    {"base_multi_channel", 587238, 150822, 2, 100},
    {"base_multi_channel_large", 9475940, 2397156, 2, 100},
    {"multi_channel_resnet50", 47419492, 11987044, 2, 100},
    {"continuous_integration", 3014515, 821171, 2, 1000},
    {"custom_cnn", 389410, 97938, 1, 2},
    {"resnet50", 25557032, 0, 1, 1000},
};

static md_model *load(const char *name, int reduce)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.reduce_architecture = reduce;
    md_model *m = NULL;
    md_status st = md_model_load(name, NULL, &o, &m);
    cr_assert_eq(st, MD_OK, "%s: %s", name, md_errmsg());
    return m;
}

Test(seeds, parameter_counts_pinned)
{
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        const struct count_case *c = &counts[i];
        md_model *m = load(c->name, 0);
        cr_expect_eq(md_model_nparams(m), c->params, "%s: %zu parameters, expected %zu", c->name,
                     md_model_nparams(m), c->params);
        cr_expect_eq(md_model_num_inputs(m), c->inputs, "%s: inputs", c->name);
        cr_expect_eq(md_model_num_classes(m), c->classes, "%s: classes", c->name);
        md_model_free(m);
        if (!c->params_reduced) continue;
        m = load(c->name, 1);
        cr_expect_eq(md_model_nparams(m), c->params_reduced, "%s --reduce-architecture: %zu parameters, expected %zu",
                     c->name, md_model_nparams(m), c->params_reduced);
        cr_expect_lt(md_model_nparams(m), c->params / 3, "%s: reducing should cut parameters ~4x", c->name);
        md_model_free(m);
    }
}

/* The two-input models take colour first and brightness second, with the
 * shapes the data stage derives (RGB and its luma at the same size). */
Test(seeds, two_input_models_take_rgb_and_brightness)
{
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        if (counts[i].inputs != 2) continue;
        md_model *m = load(counts[i].name, 0);
        int c0, h0, w0, c1, h1, w1;
        md_model_input_shape(m, 0, &c0, &h0, &w0);
        md_model_input_shape(m, 1, &c1, &h1, &w1);
        cr_expect_str_eq(md_model_input_name(m, 0), "rgb", "%s", counts[i].name);
        cr_expect_str_eq(md_model_input_name(m, 1), "brightness", "%s", counts[i].name);
        cr_expect(c0 == 3 && c1 == 1 && h0 == h1 && w0 == w1, "%s: (%d,%d,%d) and (%d,%d,%d)", counts[i].name, c0,
                  h0, w0, c1, h1, w1);
        md_model_free(m);
    }
}

/* The continuous integration model mixes the pathways after each of its four
 * stages with learnable weights: 2 for the first, 3 (colour, brightness,
 * carried integration) for the others. */
Test(seeds, continuous_integration_has_integration_weights)
{
    md_model *m = load("continuous_integration", 0);
    int found = 0;
    for (int i = 0; i < md_model_num_tensors(m); i++) {
        const struct md_param_info *p = md_model_tensor(m, i);
        if (strcmp(p->layer_type, "weighted_add") != 0) continue;
        char want[32];
        snprintf(want, sizeof want, "integration%d.weight", found + 1);
        cr_expect_str_eq(p->name, want);
        cr_expect_eq(p->numel, found == 0 ? 2u : 3u, "%s", p->name);
        cr_expect_eq(p->decay, 0, "integration weights are not weight-decayed");
        found++;
    }
    cr_expect_eq(found, 4);
    md_model_free(m);
}
