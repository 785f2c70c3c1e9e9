/* test_nn_model.c - model configs: shipped models' parameter counts, shape
 * inference, and one test per class of config mistake (the message must name
 * the JSON path). No device work here. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "nn/model.h"
#include "helpers.h"

static md_model *load_text(const char *text, md_status *st)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse(text, "test.json", &j), MD_OK, "%s", md_errmsg());
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *m = NULL;
    *st = md_model_load("test.json", j, &o, &m);
    cJSON_Delete(j);
    return m;
}

Test(nn_model, shipped_parameter_counts)
{
    static const struct { const char *name; size_t params; int classes, c, h, w; } cases[] = {
        {"small_cnn", 421738, 10, 1, 28, 28},
        {"resnet18_cifar", 11220132, 100, 3, 32, 32},
        {"resnet50", 25557032, 1000, 3, 224, 224}, /* torchvision's ResNet-50 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        md_model *m = NULL;
        cr_assert_eq(md_model_load(cases[i].name, NULL, NULL, &m), MD_OK, "%s: %s", cases[i].name, md_errmsg());
        cr_expect_eq(md_model_nparams(m), cases[i].params, "%s: %zu parameters", cases[i].name, md_model_nparams(m));
        cr_expect_eq(md_model_num_classes(m), cases[i].classes);
        int c, h, w;
        md_model_input_shape(m, 0, &c, &h, &w);
        cr_expect(c == cases[i].c && h == cases[i].h && w == cases[i].w);
        /* decayed tensors first, and the table tiles the flat buffer */
        size_t off = 0;
        int seen_nodecay = 0;
        for (int t = 0; t < md_model_num_tensors(m); t++) {
            const struct md_param_info *p = md_model_tensor(m, t);
            cr_assert_eq(p->offset, off, "%s", p->name);
            off += p->numel;
            if (!p->decay) seen_nodecay = 1;
            cr_assert(!(p->decay && seen_nodecay), "%s: decayed tensor after a non-decayed one", p->name);
            if (p->decay) cr_assert(p->offset + p->numel <= md_model_ndecay(m));
        }
        cr_expect_eq(off, md_model_nparams(m));
        md_model_free(m);
    }
}

Test(nn_model, resnet50_names_flops_and_summary)
{
    md_model *m = NULL;
    cr_assert_eq(md_model_load("resnet50", NULL, NULL, &m), MD_OK, "%s", md_errmsg());
    /* torchvision state-dict names */
    static const char *names[] = {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight",
                                  "layer1.0.downsample.0.weight", "layer1.0.downsample.1.bias",
                                  "layer4.2.bn3.weight", "fc.weight", "fc.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        cr_expect(md_model_find_tensor(m, names[i]) >= 0, "missing %s", names[i]);
    cr_expect_eq(md_model_find_tensor(m, "layer1.1.downsample.0.weight"), -1);
    const struct md_param_info *fc = md_model_tensor(m, md_model_find_tensor(m, "fc.weight"));
    cr_expect(fc->ndim == 2 && fc->shape[0] == 1000 && fc->shape[1] == 2048);
    /* about 4.1 GMACs forward */
    double f = md_model_flops_fwd(m);
    cr_expect(f > 8.0e9 && f < 8.4e9, "%g", f);
    cr_expect_eq(md_model_flops_train(m), 3 * f);
    cJSON *j = md_model_summary_json(m);
    cr_assert(j);
    cr_expect_eq(cJSON_GetObjectItem(j, "parameters")->valuedouble, 25557032.0);
    cJSON_Delete(j);
    md_model_free(m);
}

Test(nn_model, grad_ckpt_plans_less_activation_memory)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *a = NULL, *b = NULL;
    cr_assert_eq(md_model_load("resnet18_cifar", NULL, &o, &a), MD_OK, "%s", md_errmsg());
    o.grad_ckpt = 1;
    cr_assert_eq(md_model_load("resnet18_cifar", NULL, &o, &b), MD_OK, "%s", md_errmsg());
    size_t plain = md_model_activation_bytes(a, 8, 1), ck = md_model_activation_bytes(b, 8, 1);
    size_t eval = md_model_activation_bytes(a, 8, 0);
    fprintf(stderr, "resnet18_cifar batch 8: %zu bytes, %zu with checkpointing, %zu forward only\n", plain, ck, eval);
    cr_expect(ck < plain * 3 / 4, "checkpointing: %zu vs %zu", ck, plain);
    cr_expect(eval < plain / 2);
    /* compile off: no sharing, more memory */
    o.grad_ckpt = 0;
    o.compile = 0;
    md_model *c = NULL;
    cr_assert_eq(md_model_load("resnet18_cifar", NULL, &o, &c), MD_OK, "%s", md_errmsg());
    cr_expect(md_model_activation_bytes(c, 8, 1) > plain);
    md_model_free(a);
    md_model_free(b);
    md_model_free(c);
}

Test(nn_model, overrides_num_classes_dropout_and_reduce)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.num_classes = 7;
    o.reduce_architecture = 1;
    md_model *m = NULL;
    cr_assert_eq(md_model_load("small_cnn", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_expect_eq(md_model_num_classes(m), 7);
    /* conv 16 and 32 channels, fc1 64: 144 + 32 + 4608 + 64 + (1568*64+64) + (64*7+7) */
    cr_expect_eq(md_model_nparams(m), 144u + 32 + 4608 + 64 + 1568 * 64 + 64 + 64 * 7 + 7, "%zu", md_model_nparams(m));
    md_model_free(m);
}

/* docs/models.md's table of bundled configs: every row's config loads and
 * has the parameter count the table states. */
Test(nn_model, bundled_configs_have_the_documented_parameter_counts, .timeout = 60)
{
    char *doc = th_slurp("docs/models.md", NULL);
    cr_assert_not_null(doc, "docs/models.md not found (run from the repository root)");
    int rows = 0;
    for (char *line = strtok(doc, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64];
        if (sscanf(line, "| `%63[^`]`", name) != 1) continue;
        /* columns: config | input | classes | parameters | FLOPs */
        const char *p = line;
        for (int bar = 0; bar < 3 && p; bar++) p = strchr(p + 1, '|');
        if (!p) continue;
        size_t want = 0;
        int digits = 0;
        for (p++; *p && *p != '|'; p++)
            if (*p >= '0' && *p <= '9') want = want * 10 + (size_t)(*p - '0'), digits++;
        if (!digits) continue;
        md_model *m = NULL;
        cr_assert_eq(md_model_load(name, NULL, NULL, &m), MD_OK, "%s: %s", name, md_errmsg());
        cr_expect_eq(md_model_nparams(m), want, "%s: %zu parameters, docs/models.md says %zu", name,
                     md_model_nparams(m), want);
        md_model_free(m);
        rows++;
    }
    free(doc);
    cr_assert_geq(rows, 4, "only %d config rows read from docs/models.md", rows);
}

Test(nn_model, missing_model_names_the_search)
{
    md_model *m = NULL;
    cr_assert_eq(md_model_load("no_such_model", NULL, NULL, &m), MD_ERR_CONFIG);
    cr_expect(strstr(md_errmsg(), "configs/models/no_such_model.json"), "%s", md_errmsg());
    cr_assert_null(m);
}

#define HEAD "{\"name\":\"t\",\"num_classes\":3,\"inputs\":[{\"name\":\"x\",\"shape\":[2,6,6]}],"

Test(nn_model, config_errors_name_the_json_path)
{
    static const struct { const char *what, *text, *expect; } cases[] = {
        {"unknown type", HEAD "\"layers\":[{\"type\":\"conv3d\"}]}", "layers[0].type: unknown layer type 'conv3d'"},
        {"unknown field", HEAD "\"layers\":[{\"type\":\"conv2d\",\"out\":3,\"kernel\":3,\"strdie\":2}]}",
         "layers[0]: unknown key 'strdie'"},
        {"impossible shape", HEAD "\"layers\":[{\"type\":\"relu\"},{\"type\":\"conv2d\",\"out\":3,\"kernel\":9}]}",
         "layers[1].kernel: 9x9 (dilated 9x9) is larger than the padded input 6x6"},
        {"missing input", HEAD "\"layers\":[{\"type\":\"add\",\"inputs\":[\"x\",\"y\"]}]}",
         "layers[0].inputs: unknown input 'y'"},
        {"cycle", HEAD "\"layers\":[{\"name\":\"a\",\"type\":\"add\",\"inputs\":[\"x\",\"b\"]},"
                       "{\"name\":\"b\",\"type\":\"relu\"}]}",
         "layers[0].inputs: unknown input 'b' (not a model input or an earlier layer; a later one would make a cycle)"},
        {"self cycle", HEAD "\"layers\":[{\"name\":\"a\",\"type\":\"relu\",\"inputs\":[\"a\"]}]}",
         "layers[0].inputs: unknown input 'a'"},
        {"wrong type", HEAD "\"layers\":[{\"type\":\"conv2d\",\"out\":\"many\",\"kernel\":3}]}", "layers[0].out: must be an integer"},
        {"missing field", HEAD "\"layers\":[{\"type\":\"conv2d\",\"kernel\":3}]}", "layers[0].out: missing"},
        {"shape mismatch", HEAD "\"layers\":[{\"name\":\"c\",\"type\":\"conv2d\",\"out\":4,\"kernel\":1},"
                                "{\"type\":\"add\",\"inputs\":[\"c\",\"x\"]}]}",
         "layers[1].inputs[1]: shape (2, 6, 6) of 'x' does not match (4, 6, 6) of 'c'"},
        {"classes", HEAD "\"layers\":[{\"type\":\"global_avgpool\"}]}", "must give (3, 1, 1)"},
        {"linear needs flat", HEAD "\"layers\":[{\"type\":\"linear\",\"out\":3}]}", "layers[0].inputs: linear needs a flat input"},
        {"groups", HEAD "\"layers\":[{\"type\":\"conv2d\",\"out\":3,\"kernel\":1,\"groups\":2}]}", "layers[0].groups: 2 does not divide"},
        {"duplicate name", HEAD "\"layers\":[{\"name\":\"a\",\"type\":\"relu\"},{\"name\":\"a\",\"type\":\"relu\"}]}",
         "layers[1].name: duplicate layer name 'a'"},
        {"block parameter missing",
         HEAD "\"blocks\":{\"b\":{\"params\":{\"out\":null},\"layers\":[{\"type\":\"conv2d\",\"out\":\"$out\",\"kernel\":1}]}},"
              "\"layers\":[{\"name\":\"b1\",\"type\":\"b\"}]}",
         "layers[0].out: missing (parameter of block 'b')"},
        {"block unknown parameter",
         HEAD "\"blocks\":{\"b\":{\"params\":{\"out\":3},\"layers\":[{\"type\":\"conv2d\",\"out\":\"$width\",\"kernel\":1}]}},"
              "\"layers\":[{\"name\":\"b1\",\"type\":\"b\"}]}",
         "blocks.b.layers[0] (in b1).out: unknown parameter 'width'"},
        {"block inner error",
         HEAD "\"blocks\":{\"b\":{\"params\":{\"k\":3},\"layers\":[{\"type\":\"conv2d\",\"out\":3,\"kernel\":\"$k\"}]}},"
              "\"layers\":[{\"name\":\"b1\",\"type\":\"b\",\"k\":11}]}",
         "blocks.b.layers[0] (in b1).kernel: 11x11"},
        {"top-level key", "{\"name\":\"t\",\"inputs\":[{\"name\":\"x\",\"shape\":[1,2,2]}],\"layers\":[{\"type\":\"relu\"}],\"extra\":1}",
         "unknown key 'extra'"},
        {"input shape", "{\"name\":\"t\",\"inputs\":[{\"name\":\"x\",\"shape\":[1,2,2,2]}],\"layers\":[{\"type\":\"relu\"}]}",
         "inputs[0].shape: must be [channels, height, width]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        md_status st;
        md_model *m = load_text(cases[i].text, &st);
        cr_expect_eq(st, MD_ERR_CONFIG, "%s: status %d", cases[i].what, st);
        cr_expect_null(m, "%s", cases[i].what);
        cr_expect(strstr(md_errmsg(), cases[i].expect), "%s: message '%s' lacks '%s'", cases[i].what, md_errmsg(),
                  cases[i].expect);
        cr_expect(strncmp(md_errmsg(), "test.json: ", 11) == 0, "%s: message '%s' does not name the file",
                  cases[i].what, md_errmsg());
        md_model_free(m);
    }
}

Test(nn_model, blocks_repeat_and_skipped_layers)
{
    const char *text = HEAD
        "\"blocks\":{\"res\":{\"params\":{\"out\":null,\"down\":false},\"layers\":["
        "{\"name\":\"c\",\"type\":\"conv2d\",\"out\":\"$out\",\"kernel\":3,\"padding\":1,\"bias\":false},"
        "{\"name\":\"bn\",\"type\":\"batchnorm\"},"
        "{\"name\":\"proj\",\"type\":\"conv2d\",\"inputs\":[\"in\"],\"if\":\"$down\",\"out\":\"$out\",\"kernel\":1},"
        "{\"name\":\"projbn\",\"type\":\"batchnorm\",\"if\":\"$down\"},"
        "{\"name\":\"add\",\"type\":\"add\",\"inputs\":[\"bn\",\"projbn\"],\"act\":\"relu\"}]}},"
        "\"layers\":[{\"name\":\"s\",\"type\":\"res\",\"out\":4,\"down\":true,\"repeat\":3,\"rest\":{\"down\":false}},"
        "{\"name\":\"gap\",\"type\":\"global_avgpool\",\"inputs\":[\"s.1\"]},{\"name\":\"fc\",\"type\":\"linear\",\"out\":3}]}";
    md_status st;
    md_model *m = load_text(text, &st);
    cr_assert_eq(st, MD_OK, "%s", md_errmsg());
    cr_expect(md_model_find_tensor(m, "s.0.proj.weight") >= 0);
    cr_expect(md_model_find_tensor(m, "s.1.proj.weight") < 0);
    cr_expect(md_model_find_tensor(m, "s.2.c.weight") >= 0);
    /* s.0: conv 2->4 (72) + bn 8 + proj (8 + 4) + projbn 8; s.1, s.2: conv 144 + bn 8; fc 15 */
    cr_expect_eq(md_model_nparams(m), 72u + 8 + 12 + 8 + 2 * (144 + 8) + 15, "%zu", md_model_nparams(m));
    cJSON *j = md_model_summary_json(m);
    cJSON *layers = cJSON_GetObjectItem(j, "layers");
    int found = 0;
    cJSON *l;
    cJSON_ArrayForEach(l, layers) {
        if (strcmp(cJSON_GetObjectItem(l, "name")->valuestring, "s.1.add") == 0) {
            /* the skipped projection and its BN (input "prev") resolve to the block's input */
            cJSON *in = cJSON_GetObjectItem(l, "inputs");
            cr_expect_str_eq(cJSON_GetArrayItem(in, 1)->valuestring, "s.0.add");
            found = 1;
        }
        if (strcmp(cJSON_GetObjectItem(l, "name")->valuestring, "gap") == 0)
            cr_expect_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(l, "inputs"), 0)->valuestring, "s.1.add");
    }
    cr_expect(found);
    cJSON_Delete(j);
    md_model_free(m);
}

/* The shortcuts of the shipped ResNets: identity where torchvision has no
 * downsample, the projection's BN where it has one. */
Test(nn_model, resnet_shortcuts_follow_torchvision)
{
    static const struct { const char *model, *layer, *in0, *in1; } cases[] = {
        {"resnet18_cifar", "layer1.0.add", "layer1.0.bn2", "relu"},
        {"resnet18_cifar", "layer1.1.add", "layer1.1.bn2", "layer1.0.relu2"},
        {"resnet18_cifar", "layer2.0.add", "layer2.0.bn2", "layer2.0.downsample.1"},
        {"resnet18_cifar", "layer2.1.add", "layer2.1.bn2", "layer2.0.relu2"},
        {"resnet50", "layer1.0.add", "layer1.0.bn3", "layer1.0.downsample.1"},
        {"resnet50", "layer3.5.add", "layer3.5.bn3", "layer3.4.relu3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        md_model *m = NULL;
        cr_assert_eq(md_model_load(cases[i].model, NULL, NULL, &m), MD_OK, "%s", md_errmsg());
        cJSON *j = md_model_summary_json(m);
        cJSON *l;
        int found = 0;
        cJSON_ArrayForEach(l, cJSON_GetObjectItem(j, "layers")) {
            if (strcmp(cJSON_GetObjectItem(l, "name")->valuestring, cases[i].layer)) continue;
            cJSON *in = cJSON_GetObjectItem(l, "inputs");
            cr_expect_str_eq(cJSON_GetArrayItem(in, 0)->valuestring, cases[i].in0, "%s", cases[i].layer);
            cr_expect_str_eq(cJSON_GetArrayItem(in, 1)->valuestring, cases[i].in1, "%s", cases[i].layer);
            found = 1;
        }
        cr_expect(found, "%s: no layer %s", cases[i].model, cases[i].layer);
        cJSON_Delete(j);
        md_model_free(m);
    }
}
