/* rnn.c: LSTM and GRU layers, unrolled over the fixed sequence length into the static graph from
 * plain ops (matmul, sigmoid, tanh, mul, add, slice, concat), so the graph optimiser fuses their
 * element-wise chains and the planner reuses their memory. Gate layout, parameter shapes and
 * initialisation are PyTorch's nn.LSTM / nn.GRU (weight_ih (G h, d), weight_hh (G h, h),
 * bias_ih, bias_hh (G h); G = 4 gates i, f, g, o or 3 gates r, z, n; U(-1/sqrt h, 1/sqrt h)), so
 * weights copy over one to one. A stack of k layers is k layers of the network. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct rnn_attr {
    bool gru;       /* else LSTM */
    bool sequences; /* output every step (T, h), else the last (h) */
    bool bias;
    int64_t steps, units;
} rnn_attr;

sx_nn_rnn_params sx_nn_rnn_params_default(int64_t units)
{
    sx_nn_rnn_params p = {units, false, 1, true};
    return p;
}

/* Columns [k h, (k + 1) h) of a (n, G h) node. */
static sx_cg_node *gate(sx_cg_graph *g, sx_cg_node *x, int k, int64_t h)
{
    sx_slice s[2] = {SX_SLICE_ALL, {k * h, (k + 1) * h, 1}};
    return sx_cg_slice(g, x, s);
}

/* Step t of a (n, T, c) node as (n, c). */
static sx_cg_node *step_of(sx_cg_graph *g, sx_cg_node *x, int64_t t)
{
    const int64_t *s = sx_cg_node_shape(x);
    int64_t r[2] = {-1, s[2]}; /* -1: the batch axis (model files change it) */
    sx_slice sl[3] = {SX_SLICE_ALL, {t, t + 1, 1}, SX_SLICE_ALL};
    return sx_cg_reshape(g, sx_cg_slice(g, x, sl), 2, r);
}

/* One LSTM step from the input part xw = x W_ih^T + b_ih + b_hh (n, 4h):
 * gates = xw + h W_hh^T; i, f, o = sigmoid, g = tanh; c' = f c + i g; h' = o tanh(c').
 * h and c are NULL at the first step (zero states). */
static void lstm_step(sx_cg_graph *g, sx_cg_node *xw, sx_cg_node *whh, int64_t units,
                      sx_cg_node **h, sx_cg_node **c)
{
    sx_cg_node *z = *h == NULL ? xw : sx_cg_gemm(g, *h, whh, false, true, 1, xw, 1);
    sx_cg_node *i = sx_cg_sigmoid(g, gate(g, z, 0, units));
    sx_cg_node *f = sx_cg_sigmoid(g, gate(g, z, 1, units));
    sx_cg_node *gg = sx_cg_tanh(g, gate(g, z, 2, units));
    sx_cg_node *o = sx_cg_sigmoid(g, gate(g, z, 3, units));
    sx_cg_node *ig = sx_cg_mul(g, i, gg);
    *c = *c == NULL ? ig : sx_cg_add(g, sx_cg_mul(g, f, *c), ig);
    *h = sx_cg_mul(g, o, sx_cg_tanh(g, *c));
}

/* One GRU step from xw = x W_ih^T + b_ih (n, 3h) and the hidden part hw = h W_hh^T + b_hh:
 * r = sigmoid(xw_r + hw_r), z = sigmoid(xw_z + hw_z), n = tanh(xw_n + r hw_n),
 * h' = (1 - z) n + z h = n + z (h - n). At the first step h = 0, so hw = b_hh (NULL: none). */
static sx_cg_node *gru_step(sx_cg_graph *g, sx_cg_node *xw, sx_cg_node *whh, sx_cg_node *bhh,
                            int64_t units, sx_cg_node *h)
{
    sx_cg_node *hw = h == NULL     ? bhh
                     : bhh != NULL ? sx_cg_gemm(g, h, whh, false, true, 1, bhh, 1)
                                   : sx_cg_matmul(g, h, whh, false, true);
    sx_cg_node *r, *z, *nn;
    if (hw == NULL) { /* no bias, zero state */
        r = NULL;
        z = sx_cg_sigmoid(g, gate(g, xw, 1, units));
        nn = sx_cg_tanh(g, gate(g, xw, 2, units));
    } else {
        int rk = sx_cg_node_rank(hw);
        sx_cg_node *hr, *hz, *hn;
        if (rk == 1) { /* the bias alone: its three parts */
            sx_slice a = {0, units, 1}, b = {units, 2 * units, 1}, c = {2 * units, 3 * units, 1};
            hr = sx_cg_slice(g, hw, &a);
            hz = sx_cg_slice(g, hw, &b);
            hn = sx_cg_slice(g, hw, &c);
        } else {
            hr = gate(g, hw, 0, units);
            hz = gate(g, hw, 1, units);
            hn = gate(g, hw, 2, units);
        }
        r = sx_cg_sigmoid(g, sx_cg_add(g, gate(g, xw, 0, units), hr));
        z = sx_cg_sigmoid(g, sx_cg_add(g, gate(g, xw, 1, units), hz));
        nn = sx_cg_tanh(g, sx_cg_add(g, gate(g, xw, 2, units), sx_cg_mul(g, r, hn)));
    }
    if (h == NULL) /* h' = (1 - z) n */
        return sx_cg_sub(g, nn, sx_cg_mul(g, z, nn));
    return sx_cg_add(g, nn, sx_cg_mul(g, z, sx_cg_sub(g, h, nn)));
}

/* concat(xs[0..n-1], axis 1) for any n: groups of at most SX_CG_MAX_INPUTS, then their concat */
static sx_cg_node *concat_steps(sx_cg_graph *g, int64_t n, sx_cg_node **xs)
{
    if (n <= SX_CG_MAX_INPUTS)
        return sx_cg_concat(g, (int)n, xs, 1);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i += SX_CG_MAX_INPUTS, k++) {
        int64_t m = n - i < SX_CG_MAX_INPUTS ? n - i : SX_CG_MAX_INPUTS;
        xs[k] = sx_cg_concat(g, (int)m, xs + i, 1); /* k <= i: never overwrites unread inputs */
    }
    return concat_steps(g, k, xs);
}

/* x (n, T, d) -> (n, T, h) or (n, h) */
static sx_cg_node *rnn_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                               sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const rnn_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    sx_cg_node *x = in[0];
    const int64_t *xs = sx_cg_node_shape(x);
    if (x == NULL || xs == NULL)
        return NULL;
    const int64_t T = xs[1], d = xs[2], h = a->units, G = a->gru ? 3 : 4;
    sx_cg_node *wih = nn_param_node_of(b, l, 0), *whh = nn_param_node_of(b, l, 1);
    sx_cg_node *bih = a->bias ? nn_param_node_of(b, l, 2) : NULL;
    sx_cg_node *bhh = a->bias ? nn_param_node_of(b, l, 3) : NULL;
    /* the input part of every step in one product: (n T, d) W_ih^T + b (LSTM: both biases,
     * which only ever appear summed) */
    int64_t flat[2] = {-1, d}, seq[3] = {-1, T, G * h};
    sx_cg_node *xb = a->bias ? (a->gru ? bih : sx_cg_add(g, bih, bhh)) : NULL;
    sx_cg_node *xw = xb != NULL
                         ? sx_cg_gemm(g, sx_cg_reshape(g, x, 2, flat), wih, false, true, 1, xb, 1)
                         : sx_cg_matmul(g, sx_cg_reshape(g, x, 2, flat), wih, false, true);
    xw = sx_cg_reshape(g, xw, 3, seq);
    sx_cg_node **outs = NULL;
    if (a->sequences) {
        outs = sx_calloc((size_t)T, sizeof *outs);
        if (outs == NULL) {
            b->err = SX_E_NOMEM;
            return NULL;
        }
    }
    sx_cg_node *hs = NULL, *cs = NULL;
    int64_t row[3] = {-1, 1, h};
    for (int64_t t = 0; t < T; t++) {
        sx_cg_node *xt = step_of(g, xw, t);
        if (a->gru)
            hs = gru_step(g, xt, whh, bhh, h, hs);
        else
            lstm_step(g, xt, whh, h, &hs, &cs);
        if (hs == NULL)
            break;
        if (outs != NULL)
            outs[t] = sx_cg_reshape(g, hs, 3, row);
    }
    sx_cg_node *y = hs;
    if (outs != NULL) {
        y = hs != NULL ? concat_steps(g, T, outs) : NULL;
        sx_free(outs);
    }
    return y;
}

static void rnn_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const rnn_attr *a = l->attr;
    snprintf(buf, size, "%lld steps, %s%s", (long long)a->steps,
             a->sequences ? "sequence" : "last state", a->bias ? "" : ", no bias");
}

const nn_layer_ops nn_lstm_ops = {"lstm", sizeof(rnn_attr), rnn_forward, rnn_describe};
const nn_layer_ops nn_gru_ops = {"gru", sizeof(rnn_attr), rnn_forward, rnn_describe};

/* One recurrent layer over in (T, d). */
static sx_nn_layer *rnn_layer(sx_nn_net *net, const char *who, sx_nn_layer *in, bool gru,
                              const sx_nn_rnn_params *p, bool sequences)
{
    sx_nn_layer *l = nn_layer_begin(net, who, gru ? L_GRU : L_LSTM, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    const int64_t h = p->units, G = gru ? 3 : 4;
    if (in->rank != 2)
        s = sx_error(SX_E_RANK,
                     "%s: input of rank %d (want 2: (steps, features) per example, batch "
                     "first)",
                     l->name, in->rank);
    else if (h < 1)
        s = sx_error(SX_E_ARG, "%s: %lld units (want >= 1)", l->name, (long long)h);
    int64_t T = in->shape[0], d = in->shape[1];
    int64_t wi[2] = {G * h, d}, wh[2] = {G * h, h}, bs[1] = {G * h};
    if (s == SX_OK && (!nn_shape_fits(2, wi) || !nn_shape_fits(2, wh) || T > INT32_MAX))
        s = sx_error(SX_E_SHAPE, "%s: %lld units over %lld features are too many", l->name,
                     (long long)h, (long long)d);
    if (s == SX_OK) {
        rnn_attr *a = l->attr;
        a->gru = gru;
        a->sequences = sequences;
        a->bias = p->bias;
        a->steps = T;
        a->units = h;
        if (sequences) {
            l->rank = 2;
            l->shape[0] = T;
            l->shape[1] = h;
        } else {
            l->rank = 1;
            l->shape[0] = h;
        }
        /* PyTorch's U(-1/sqrt h, 1/sqrt h) for every tensor, unless the network has its own
         * initialiser (then weights from it, biases zero) */
        bool own = net->init.kind == SX_INIT_DEFAULT;
        double k = 1 / sqrt((double)h);
        const char *names[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
        const int64_t *shapes[4] = {wi, wh, bs, bs};
        for (int i = 0; i < (p->bias ? 4 : 2) && s == SX_OK; i++) {
            double fill = own ? 0 : i < 2 ? (double)NAN : 0;
            s = nn_layer_add_param(net, l, names[i], i < 2 ? 2 : 1, shapes[i], fill, i == 0 ? d : h,
                                   G * h, true, i < 2);
            if (s == SX_OK && own)
                s = sx_tensor_rand_uniform(l->params[l->n_params - 1].value, &net->init_rng, -k, k);
        }
    }
    return nn_layer_finish(net, who, l, s);
}

static sx_nn_layer *rnn(sx_nn_net *net, const char *who, sx_nn_layer *in, bool gru,
                        const sx_nn_rnn_params *p)
{
    sx_nn_rnn_params d = sx_nn_rnn_params_default(1);
    if (p == NULL) {
        nn_layer_fail(net, sx_error(SX_E_ARG, "%s: params is NULL", who));
        return NULL;
    }
    d = *p;
    if (d.layers < 1) {
        if (net != NULL)
            nn_layer_fail(net, sx_error(SX_E_ARG, "%s: %d layers (want >= 1)", who, d.layers));
        return NULL;
    }
    sx_nn_layer *l = in;
    for (int k = 0; k < d.layers && l != NULL; k++)
        l = rnn_layer(net, who, l, gru, &d, k < d.layers - 1 || d.return_sequences);
    return l;
}

sx_nn_layer *sx_nn_lstm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_rnn_params *p)
{
    return rnn(net, "sx_nn_lstm", in, false, p);
}

sx_nn_layer *sx_nn_gru(sx_nn_net *net, sx_nn_layer *in, const sx_nn_rnn_params *p)
{
    return rnn(net, "sx_nn_gru", in, true, p);
}
