/* test_options.c - flag parsing, config merging, validation. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/options.h"
#include "helpers.h"

static md_status parse(md_options *o, const char *line)
{
    char buf[2048];
    char *argv[64];
    int argc = th_argv(buf, sizeof buf, line, argv);
    md_options_defaults(o);
    md_status st = md_options_parse(o, argc, argv);
    if (st == MD_OK) st = md_options_validate(o);
    return st;
}

Test(options, defaults)
{
    md_options o;
    cr_assert_eq(parse(&o, ""), MD_OK);
    cr_assert_str_eq(o.device, "auto");
    cr_assert_eq(o.compile, 1);
    cr_assert_eq(o.seed, 42);
    cr_assert_eq(o.pin_memory, -1);
    cr_assert_eq(o.num_workers, -1);
    cr_assert_eq(o.val_batch_multiplier, 4);
}

Test(options, every_value_kind)
{
    md_options o;
    cr_assert_eq(parse(&o, "--device cuda:1 --batch-size 16 --epochs 3 --lr 0.05 --seed 7 --precision bf16 "
                           "--no-compile --compile-mode max-autotune --channels-last --grad-ckpt --num-workers 0 "
                           "--no-pin-memory --cache-images --threads 2 --fallback --memory-fraction 0.8 "
                           "--report r.json --metrics m.jsonl --verbose --dataset cifar100 --data-dir d"),
                 MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(o.device, "cuda:1");
    cr_assert_eq(o.batch_size, 16);
    cr_assert_eq(o.epochs, 3);
    cr_assert_float_eq(o.lr, 0.05, 1e-12);
    cr_assert_eq(o.seed, 7);
    cr_assert_eq(o.precision, MD_PREC_BF16);
    cr_assert_eq(o.compile, 0);
    cr_assert_str_eq(o.compile_mode, "max-autotune");
    cr_assert_eq(o.channels_last, 1);
    cr_assert_eq(o.grad_ckpt, 1);
    cr_assert_eq(o.num_workers, 0);
    cr_assert_eq(o.pin_memory, 0);
    cr_assert_eq(o.cache_images, 1);
    cr_assert_eq(o.threads, 2);
    cr_assert_eq(o.fallback, 1);
    cr_assert_float_eq(o.memory_fraction, 0.8, 1e-12);
    cr_assert_str_eq(o.report, "r.json");
    cr_assert_eq(o.verbosity, 2);
    cr_assert_str_eq(o.dataset, "cifar100");
}

Test(options, underscore_aliases_and_equals)
{
    md_options o;
    cr_assert_eq(parse(&o, "--batch_size=256 --train_epochs 5 --grad_clip 1.0 --lradj cosine --device-type mps"), MD_OK,
                 "%s", md_errmsg());
    cr_assert_eq(o.batch_size, 256);
    cr_assert_eq(o.epochs, 5);
    cr_assert_float_eq(o.grad_clip, 1.0, 1e-12);
    cr_assert_str_eq(o.device, "mps");
}

struct bad_case { const char *args; const char *needle; md_status st; };

/* Criterion runs tests in separate processes where pointers inside
 * parameter arrays are not valid, so each table is walked in one test. */
Test(options, errors_name_the_flag)
{
    static struct bad_case cases[] = {
        {"--bogus", "unknown flag '--bogus'", MD_ERR_USAGE},
        {"--batch-size 0", "--batch-size: 0 is out of range", MD_ERR_USAGE},
        {"--batch-size x", "--batch-size: 'x' is not an integer", MD_ERR_USAGE},
        {"--batch-size", "--batch-size: missing value", MD_ERR_USAGE},
        {"--lr -1", "--lr", MD_ERR_USAGE},
        {"--lr nan", "--lr: 'nan' is not a number", MD_ERR_USAGE},
        {"--device gpu", "--device: 'gpu' is not one of", MD_ERR_USAGE},
        {"--device cuda:x", "--device", MD_ERR_USAGE},
        {"--device auto:1", "--device", MD_ERR_USAGE},
        {"--precision fp8", "--precision: 'fp8'", MD_ERR_USAGE},
        {"--compile-mode fast", "--compile-mode: 'fast' is not one of", MD_ERR_USAGE},
        {"--memory-fraction 1.5", "--memory-fraction: 1.5 is out of range", MD_ERR_USAGE},
        {"--no-compile=1", "--no-compile takes no value", MD_ERR_USAGE},
        {"--seed -3", "--seed", MD_ERR_USAGE},
        {"--quiet --verbose", "--quiet and --verbose", MD_ERR_USAGE},
        {"--amp --precision fp32", "--amp contradicts --precision fp32", MD_ERR_USAGE},
        {"--benchmark-only --epochs 2", "--benchmark-only", MD_ERR_USAGE},
        {"--resume a --init-from b", "--resume and --init-from", MD_ERR_USAGE},
        {"--expect-max-loss 1", "need --ci", MD_ERR_USAGE},
        {"stray", "unexpected argument 'stray'", MD_ERR_USAGE},
        {"--config /nonexistent/cfg.json", "/nonexistent/cfg.json: cannot open", MD_ERR_CONFIG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct bad_case *c = &cases[i];
        md_options o;
        md_status st = parse(&o, c->args);
        cr_assert_eq(st, c->st, "'%s' gave status %d: %s", c->args, st, md_errmsg());
        cr_assert(strstr(md_errmsg(), c->needle), "'%s': message '%s' lacks '%s'", c->args, md_errmsg(), c->needle);
        cr_assert(!strchr(md_errmsg(), '\n'), "one line");
    }
}

Test(options, benchmark_only_with_zero_epochs_is_fine)
{
    md_options o;
    cr_assert_eq(parse(&o, "--benchmark-only --epochs 0"), MD_OK, "%s", md_errmsg());
}

Test(options, config_then_flags_override)
{
    char *dir = th_tmpdir();
    char *cfg = th_write(dir, "run.json",
                         "{\"batch_size\": 32, \"epochs\": 7, \"device\": \"cpu\", \"compile\": false, "
                         "\"lr\": 0.2, \"model\": \"small_cnn\"}");
    md_options o;
    char line[4300];
    snprintf(line, sizeof line, "--config %s --batch-size 8", cfg);
    cr_assert_eq(parse(&o, line), MD_OK, "%s", md_errmsg());
    cr_assert_eq(o.batch_size, 8, "flag wins");
    cr_assert_eq(o.epochs, 7, "config applies");
    cr_assert_eq(o.compile, 0);
    cr_assert_str_eq(o.model, "small_cnn");
    cr_assert(md_options_given(&o, "epochs"));
    cr_assert_not(md_options_given(&o, "seed"));
    th_rmtree(dir);
    free(cfg);
    free(dir);
}

struct cfg_case { const char *json; const char *needle; };

/* Criterion runs tests in separate processes where pointers inside
 * parameter arrays are not valid, so each table is walked in one test. */
Test(options, config_errors)
{
    static struct cfg_case cases[] = {
        {"{\"batch_size\": 0}", "batch_size: 0 is out of range"},
        {"{\"batch_size\": 2.5}", "batch_size: must be an integer"},
        {"{\"batch_sise\": 4}", "unknown key 'batch_sise'"},
        {"{\"compile\": 1}", "compile: must be true or false"},
        {"{\"device\": 3}", "device: wrong type"},
        {"[1, 2]", "top level must be an object"},
        {"{\"epochs\": 3,}", "malformed JSON at line 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cfg_case *c = &cases[i];
        char *dir = th_tmpdir();
        char *cfg = th_write(dir, "bad.json", c->json);
        md_options o;
        md_options_defaults(&o);
        md_status st = md_options_load_config(&o, cfg);
        cr_assert_eq(st, MD_ERR_CONFIG);
        cr_assert(strstr(md_errmsg(), c->needle) && strstr(md_errmsg(), "bad.json"), "'%s' -> '%s'", c->json, md_errmsg());
        th_rmtree(dir);
        free(cfg);
        free(dir);
    }
}
