/* test_fuzz_formats.c - the smoke mode of the safetensors and model-config
 * fuzz targets (test/fuzz/fuzz_formats.h): deterministic mutations of a
 * valid checkpoint-like file and of a model config using every expansion
 * feature. A crash, a sanitizer report (make asan) or a hang fails it; the
 * long runs are `make fuzz` (libFuzzer). */
#include <criterion/criterion.h>

#include "fuzz/fuzz_formats.h"
#include "fuzz/fuzz_one.h"
#include "helpers_fuzz.h"

Test(fuzz_smoke, safetensors)
{
    static uint8_t s[8192];
    size_t n = md_fuzz_seed_safetensors(s, sizeof s);
    md_st_file *f = NULL;
    cr_assert_eq(md_st_parse(s, n, "seed", &f), MD_OK, "the seed parses: %s", md_errmsg());
    struct md_ckpt_limits lim = {100, 32, NULL, 1};
    struct md_ckpt_meta m;
    cr_assert_eq(md_ckpt_meta_read(f, &lim, &m), MD_OK, "the seed's metadata passes: %s", md_errmsg());
    md_ckpt_meta_free(&m);
    md_st_close(f);
    th_fuzz_smoke(md_fuzz_safetensors, s, n, 0, 0x2468, 4000);
    th_fuzz_smoke(md_fuzz_safetensors, s, n, 8, 0x1359, 4000); /* the length kept */
}

Test(fuzz_smoke, model_config, .timeout = 120)
{
    static uint8_t s[8192];
    size_t n = md_fuzz_seed_model(s, sizeof s);
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse((const char *)s, "seed", &j), MD_OK, "%s", md_errmsg());
    md_model *m = NULL;
    cr_assert_eq(md_model_load("seed", j, NULL, &m), MD_OK, "the seed loads: %s", md_errmsg());
    md_model_free(m);
    cJSON_Delete(j);
    th_fuzz_smoke(md_fuzz_model, s, n, 0, 0x7531, 1500);
}
