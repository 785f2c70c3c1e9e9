/* test_nn_relu_stats.c - dead-ReLU shares against a direct count. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/model.h"

/* A model whose logits are a ReLU's output, so the expected shares can be
 * counted from the logits of an evaluation forward. */
static const char *const cfg =
    "{\"name\": \"relu_probe\", \"num_classes\": 16, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 1, 5]}],"
    " \"layers\": [{\"name\": \"flatten\", \"type\": \"flatten\"},"
    "            {\"name\": \"fc\", \"type\": \"linear\", \"out\": 16},"
    "            {\"name\": \"act\", \"type\": \"relu\"}]}";

Test(nn_relu_stats, matches_a_direct_count)
{
    const char *devs[] = {"ref", "cpu"};
    for (int di = 0; di < 2; di++) {
        md_device *dev = NULL;
        cr_assert_eq(md_device_open(md_backend_find(devs[di]), 0, NULL, &dev), MD_OK, "%s", md_errmsg());
        cJSON *j = cJSON_Parse(cfg);
        struct md_model_opts o;
        md_model_opts_default(&o);
        o.seed = 3;
        md_model *m = NULL;
        cr_assert_eq(md_model_load("relu_probe", j, &o, &m), MD_OK, "%s", md_errmsg());
        const int batch = 7;
        cr_assert_eq(md_model_bind(m, dev, batch), MD_OK, "%s", md_errmsg());
        float x[7 * 5];
        md_rng r;
        md_rng_init(&r, 11);
        for (int i = 0; i < batch * 5; i++) x[i] = (float)md_rng_normal(&r);
        cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 0), x, sizeof x), MD_OK);
        cr_assert_eq(md_model_forward(m, batch, 0), MD_OK, "%s", md_errmsg());
        float y[7 * 16];
        cr_assert_eq(md_dev_download(dev, y, md_model_logits(m), sizeof y), MD_OK);
        int alive[16] = {0}, zeros = 0;
        for (int n = 0; n < batch; n++)
            for (int c = 0; c < 16; c++) {
                if (y[n * 16 + c] > 0) alive[c] = 1;
                else zeros++;
            }
        int dead = 0;
        for (int c = 0; c < 16; c++) dead += !alive[c];
        struct md_relu_stat st[4];
        int count = 0;
        cr_assert_eq(md_model_relu_stats(m, st, 4, &count), MD_OK, "%s", md_errmsg());
        cr_assert_eq(count, 1);
        cr_assert_str_eq(st[0].layer, "act");
        cr_assert_float_eq(st[0].dead_share, dead / 16.0, 1e-12, "%s: dead %g vs %d/16", devs[di], st[0].dead_share, dead);
        cr_assert_float_eq(st[0].zero_share, zeros / (7.0 * 16.0), 1e-12);
        cr_assert(zeros > 0 && zeros < 7 * 16, "the probe must have both signs (zeros %d)", zeros);
        md_model_free(m);
        cJSON_Delete(j);
        md_device_close(dev);
    }
}
