/* resolve.h - the run's options (md_options) translated into the typed
 * options each layer takes: md_model_opts (nn), md_data_opts (data),
 * md_train_opts (train), md_bench_opts (diag).
 *
 * This is the one place that knows both sides. The layers below never see
 * md_options and never ask whether a flag was given: where that matters the
 * value is decided here (or handed down as an explicit field). The stages
 * call these after the device opened and the policy ran (and again where a
 * stage has itself decided an option, as the data stage does for the loader).
 *
 * Adding an option a layer needs: a field in the layer's struct and the line
 * that fills it in resolve.c.
 */
#ifndef MD_RESOLVE_H
#define MD_RESOLVE_H

#include "app/options.h"
#include "data/data.h"
#include "diag/bench.h"
#include "nn/model.h"
#include "train/trainer.h"

void md_resolve_model(const md_options *o, struct md_model_opts *out);
void md_resolve_data(const md_options *o, struct md_data_opts *out);
void md_resolve_train(const md_options *o, struct md_train_opts *out);
void md_resolve_bench(const md_options *o, struct md_bench_opts *out);

/* The run config's data section (md_data_config) into `req`, and into `o`'s
 * data options where neither a flag nor the config's run settings gave them. */
md_status md_resolve_data_config(md_options *o, struct md_data_request *req);

#endif
