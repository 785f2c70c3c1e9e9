/* test_train_ckpt.c - checkpoint round trip of device tensors (weights and
 * optimizer state identical), strict shape checks, failed writes. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "train/checkpoint.h"
#include "helpers.h"

static md_device *open_cpu(void)
{
    md_device *dev;
    struct md_device_opts o = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}

Test(checkpoint, round_trip_identical)
{
    md_device *dev = open_cpu();
    char *dir = th_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/last.safetensors", dir);
    float *w, *m, *w2, *m2;
    cr_assert_eq(md_dev_alloc(dev, 6 * 4, (void **)&w, "w"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 6 * 4, (void **)&m, "m"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 6 * 4, (void **)&w2, "w2"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 6 * 4, (void **)&m2, "m2"), MD_OK);
    const float hw[6] = {1.5f, -2.25f, 3e-9f, 1e20f, -0.0f, 0.1f}, hm[6] = {0.5f, 1, 2, 3, 4, 5};
    md_dev_upload(dev, w, hw, sizeof hw);
    md_dev_upload(dev, m, hm, sizeof hm);
    struct md_ckpt_tensor t[2] = {{"fc.weight", MD_F32, 2, {2, 3}, w, NULL, 0, 0}, {"__optim__.m", MD_F32, 1, {6}, m, NULL, 0, 0}};
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "epoch", "3");
    cr_assert_eq(md_checkpoint_save(dev, path, t, 2, meta), MD_OK, "%s", md_errmsg());

    struct md_ckpt_tensor u[2] = {{"fc.weight", MD_F32, 2, {2, 3}, w2, NULL, 0, 0}, {"__optim__.m", MD_F32, 1, {6}, m2, NULL, 0, 0}};
    md_st_file *f;
    cr_assert_eq(md_checkpoint_load(dev, path, u, 2, &f), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(md_st_meta(f, "epoch"), "3");
    md_st_close(f);
    float got[6];
    md_dev_download(dev, got, w2, sizeof got);
    cr_assert_eq(memcmp(got, hw, sizeof hw), 0, "weights bitwise identical");
    md_dev_download(dev, got, m2, sizeof got);
    cr_assert_eq(memcmp(got, hm, sizeof hm), 0, "optimizer state bitwise identical");

    /* a shape mismatch names file and tensor, and uploads nothing */
    memset(got, 0, sizeof got);
    md_dev_upload(dev, w2, got, sizeof got);
    struct md_ckpt_tensor bad[2] = {{"fc.weight", MD_F32, 2, {2, 3}, w2, NULL, 0, 0}, {"__optim__.m", MD_F32, 1, {5}, m2, NULL, 0, 0}};
    cr_assert_eq(md_checkpoint_load(dev, path, bad, 2, NULL), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), path) && strstr(md_errmsg(), "__optim__.m"), "%s", md_errmsg());
    md_dev_download(dev, got, w2, sizeof got);
    cr_assert_eq(got[0], 0.0f, "nothing uploaded on a mismatch");

    /* a write into a missing directory fails and names it */
    char bad_path[4300];
    snprintf(bad_path, sizeof bad_path, "%s/missing/last.safetensors", dir);
    cr_assert_eq(md_checkpoint_save(dev, bad_path, t, 2, meta), MD_ERR_IO);
    cr_assert(strstr(md_errmsg(), bad_path), "%s", md_errmsg());

    cJSON_Delete(meta);
    md_dev_free(dev, w);
    md_dev_free(dev, m);
    md_dev_free(dev, w2);
    md_dev_free(dev, m2);
    md_device_close(dev);
    th_tmpdir_free(dir);
}
