/* model_exec.c - binding a model to a device, the activation plan, forward
 * and backward. First cut: planning and freeing; execution lands next. */
#include "nn/model_impl.h"

#include <string.h>

#include "core/mem.h"

void md_model_free_host(struct md_model *m);

static md_status not_yet(const char *what)
{
    return md_errf(MD_ERR_UNSUPPORTED, "model: %s is not built yet (issue 3)", what);
}

md_status md_model_plan_make(const struct md_model *m, int batch, int training, struct md_model_plan *plan)
{
    (void)training;
    memset(plan, 0, sizeof *plan);
    size_t es = md_dtype_size(m->opts.compute_dtype);
    for (int i = m->ninputs; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        if (L->alias < 0) plan->bytes += 2 * (size_t)batch * L->c * L->h * L->w * es;
    }
    return MD_OK;
}

void md_model_plan_free(struct md_model_plan *plan)
{
    md_free(plan->off_fwd);
    md_free(plan->off_bwd);
    md_free(plan->goff);
    memset(plan, 0, sizeof *plan);
}

void md_model_free(md_model *m) { md_model_free_host(m); }
md_status md_model_bind(md_model *m, md_device *dev, int max_batch) { (void)m; (void)dev; (void)max_batch; return not_yet("binding"); }
md_device *md_model_device(const md_model *m) { return m->dev; }
int md_model_max_batch(const md_model *m) { return m->max_batch; }
float *md_model_params(md_model *m) { return m->params; }
float *md_model_grads(md_model *m) { return m->grads; }
void *md_model_params_half(md_model *m) { return m->params_half; }
float *md_model_bn_stats(md_model *m) { return m->bn_stats; }
md_status md_model_params_changed(md_model *m) { (void)m; return not_yet("binding"); }
void *md_model_input_buffer(md_model *m, int i) { return m->inputs ? m->inputs[i] : NULL; }
md_status md_model_forward(md_model *m, int batch, int training) { (void)m; (void)batch; (void)training; return not_yet("forward"); }
const void *md_model_logits(md_model *m) { (void)m; return NULL; }
md_status md_model_loss(md_model *m, const int32_t *labels_dev, float smoothing, float grad_scale,
                        float *loss_sum_dev, int32_t *correct_dev)
{ (void)m; (void)labels_dev; (void)smoothing; (void)grad_scale; (void)loss_sum_dev; (void)correct_dev; return not_yet("loss"); }
md_status md_model_backward(md_model *m) { (void)m; return not_yet("backward"); }
void md_model_set_step(md_model *m, uint64_t step) { m->step = step; }
md_status md_model_first_nonfinite(md_model *m, char *layer, size_t n, int *found) { (void)m; (void)layer; (void)n; *found = 0; return not_yet("the non-finite check"); }
md_status md_model_load_weights(md_model *m, const char *path) { (void)m; (void)path; return not_yet("--init-from"); }
md_status md_model_dump_grads(md_model *m, const int32_t *labels_host, int batch, const char *path) { (void)m; (void)labels_host; (void)batch; (void)path; return not_yet("--dump-grads"); }
