/* test_app_resolve.c - the application layer's translation of the options
 * into each layer's struct (app/resolve.c), and --dataset's choices taken
 * from the format registry. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/options.h"
#include "app/resolve.h"
#include "data/format.h"
#include "helpers.h"

static void parse(md_options *o, const char *args)
{
    char buf[4096];
    char *argv[64];
    int argc = th_argv(buf, sizeof buf, args, argv);
    md_options_defaults(o);
    cr_assert_eq(md_options_parse(o, argc, argv), MD_OK, "%s", md_errmsg());
}

Test(app_resolve, data_section_fills_what_no_flag_gave)
{
    char *dir = th_tmpdir();
    char *cfg = th_write(dir, "run.json",
                         "{\"data\": {\"dataset\": \"synthetic\", \"val_split\": 0.3, \"max_samples\": 70}}");
    char args[1200];
    snprintf(args, sizeof args, "--config %s --max-samples 9", cfg);
    md_options o;
    parse(&o, args);
    struct md_data_request req;
    memset(&req, 0, sizeof req);
    cr_assert_eq(md_resolve_data_config(&o, &req), MD_OK, "%s", md_errmsg());
    struct md_data_opts d;
    md_resolve_data(&o, &d);
    cr_expect_str_eq(d.dataset, "synthetic");
    cr_expect_float_eq(d.val_split, 0.3, 1e-12);
    cr_expect_eq(d.max_samples, 9, "the flag wins over the data section");
    th_rmtree(dir);
}

Test(app_resolve, every_layer_gets_the_options_values)
{
    md_options o;
    parse(&o, "--on-bad-sample skip --seed 7 --optimizer adamw --lr 0.002 --prefetch 3 --dropout 0.25 "
              "--epochs 3 --metrics m.jsonl --no-augment");
    struct md_data_opts d;
    md_resolve_data(&o, &d);
    cr_expect_eq(d.skip_bad, 1);
    cr_expect_eq(d.seed, 7);
    struct md_bench_opts b;
    md_resolve_bench(&o, &b);
    cr_expect_eq(b.optimizer, MD_OPT_ADAMW);
    cr_expect_float_eq(b.lr, 0.002, 1e-12);
    cr_expect_eq(b.prefetch, 3);
    cr_expect_eq(b.augment, 0);
    cr_expect_eq(b.data.seed, 7);
    struct md_train_opts t;
    md_resolve_train(&o, &t);
    cr_expect_eq(t.epochs, 3);
    cr_expect_str_eq(t.optimizer, "adamw");
    cr_expect_str_eq(t.metrics, "m.jsonl");
    cr_expect_eq(t.seed, 7);
    struct md_model_opts m;
    md_resolve_model(&o, &m);
    cr_expect_float_eq(m.dropout, 0.25, 1e-12);
    parse(&o, "");
    md_resolve_model(&o, &m);
    cr_expect_lt(m.dropout, 0.0, "no --dropout: the model config's");
}

Test(app_resolve, dataset_choices_come_from_the_registry)
{
    char all[256];
    md_format_dataset_list(all, sizeof all, "|");
    md_options o;
    md_options_defaults(&o);
    /* every registry name is accepted, anything else is refused naming the list */
    for (char *p = all, *bar; p; p = bar ? bar + 1 : NULL) {
        bar = strchr(p, '|');
        char name[64], args[128];
        snprintf(name, sizeof name, "%.*s", bar ? (int)(bar - p) : (int)strlen(p), p);
        snprintf(args, sizeof args, "--dataset %s", name);
        parse(&o, args);
        cr_expect_str_eq(o.dataset, name);
    }
    char buf[256];
    char *argv[8];
    int argc = th_argv(buf, sizeof buf, "--dataset nosuch", argv);
    md_options_defaults(&o);
    cr_assert_eq(md_options_parse(&o, argc, argv), MD_ERR_USAGE);
    cr_expect(strstr(md_errmsg(), all) != NULL, "message lists the registry: %s", md_errmsg());
    char *out = NULL, *err = NULL;
    cr_assert_eq(th_run("--help", &out, &err), 0);
    md_format_dataset_list(all, sizeof all, " | ");
    cr_expect(strstr(th_unwrap(out), all) != NULL, "--help lists the registry: %s", all);
    free(out);
    free(err);
}
