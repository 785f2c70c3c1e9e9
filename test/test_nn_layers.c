/* test_nn_layers.c - the layer registry (nn/layer.h): every config type name
 * belongs to exactly one kind, every kind fills the entries the graph calls
 * without a check, and a name the registry does not hold is refused. No
 * device work here; the kinds' numbers are tested through whole models
 * (test_nn_model, test_nn_grad). */
#include <criterion/criterion.h>
#include <string.h>

#include "nn/layer.h"

Test(nn_layers, registry_names_unique_and_found)
{
    int n = 0;
    const struct md_layer_ops *const *reg = md_layer_registry(&n);
    cr_assert_gt(n, 0);
    for (int k = 0; k < n; k++) {
        cr_assert_not_null(reg[k]->names, "kind %d has no config name", k);
        for (const char *const *nm = reg[k]->names; *nm; nm++) {
            cr_expect_eq(md_layer_find(*nm), reg[k], "'%s' is found as another kind", *nm);
            for (int j = 0; j < n; j++)
                for (const char *const *o = reg[j]->names; j != k && *o; o++)
                    cr_expect_neq(strcmp(*nm, *o), 0, "'%s' names two kinds", *nm);
        }
    }
    /* the config types docs/models.md documents (a new kind adds to them) */
    static const char *const documented[] = {"conv2d", "batchnorm", "relu", "leaky_relu", "gelu", "silu",
                                             "sigmoid", "tanh", "maxpool", "avgpool", "global_avgpool",
                                             "flatten", "linear", "dropout", "add", "concat", "weighted_add"};
    for (size_t i = 0; i < sizeof documented / sizeof documented[0]; i++)
        cr_expect_not_null(md_layer_find(documented[i]), "'%s' has no kind", documented[i]);
}

Test(nn_layers, unknown_and_input_not_found)
{
    cr_expect_null(md_layer_find("input"));
    cr_expect_null(md_layer_find("Conv2d"));
    cr_expect_null(md_layer_find(""));
    cr_expect_null(md_input_layer.names);
    cr_expect_not_null(md_input_layer.forward);
}

Test(nn_layers, required_entries)
{
    int n = 0;
    const struct md_layer_ops *const *reg = md_layer_registry(&n);
    for (int k = 0; k < n; k++) {
        const struct md_layer_ops *o = reg[k];
        const char *nm = o->names[0];
        cr_expect(o->parse && o->shape && o->forward && o->backward, "%s: parse, shape, forward, backward", nm);
        cr_expect_geq(o->min_inputs, 1, "%s", nm);
        cr_expect(o->max_inputs == 0 || o->max_inputs >= o->min_inputs, "%s: inputs %d..%d", nm, o->min_inputs,
                  o->max_inputs);
        /* fusion goes both ways or not at all */
        cr_expect(!o->fuse_act || o->out_act, "%s: takes an activation but does not report it", nm);
    }
}
