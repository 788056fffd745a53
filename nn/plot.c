/* plot.c: a fit's history drawn as an SVG file: the loss and the metric against the epoch, each
 * panel with its training (solid) and validation (dashed) curves, axes with ticks at round values
 * (1, 2 or 5 times a power of ten) and their labels, and a legend. Plain SVG 1.1 (lines, text,
 * polylines): any browser opens it. Written to PATH.tmp, then renamed. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define W 960 /* the image */
#define H 420
#define PANEL_W 480 /* one panel, of which the plot area is inset by the margins */
#define M_LEFT 70
#define M_RIGHT 20
#define M_TOP 56
#define M_BOTTOM 76
#define TRAIN_COLOUR "#1f77b4"
#define VAL_COLOUR "#ff7f0e"

/* One panel: its place, its value ranges and what it shows. */
typedef struct panel {
    double x0;               /* left edge of the panel */
    double lo, hi, step;     /* the y axis: from lo to hi, a tick every step */
    double e_lo, e_hi, e_st; /* the x axis (epochs) */
    const char *title;
} panel;

/* A round step (1, 2 or 5 times a power of ten) giving about `ticks` intervals over range. */
static double nice_step(double range, int ticks)
{
    double raw = range / ticks, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* lo..hi widened to whole steps around [a, b] (a constant curve gets some room). */
static void axis_range(double a, double b, int ticks, double *lo, double *hi, double *step)
{
    if (!(b > a)) {
        double pad = a != 0 ? fabs(a) * 0.1 : 1;
        a -= pad;
        b += pad;
    }
    *step = nice_step(b - a, ticks);
    *lo = floor(a / *step) * *step;
    *hi = ceil(b / *step) * *step;
}

static double px(const panel *p, double epoch)
{
    double w = PANEL_W - M_LEFT - M_RIGHT;
    return p->x0 + M_LEFT + (epoch - p->e_lo) / (p->e_hi - p->e_lo) * w;
}

static double py(const panel *p, double v)
{
    double h = H - M_TOP - M_BOTTOM;
    return M_TOP + h - (v - p->lo) / (p->hi - p->lo) * h;
}

/* A tick label with as many decimals as the step needs. */
static void tick_label(char *buf, size_t size, double v, double step)
{
    if (fabs(v) < step * 1e-9)
        v = 0;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) >= 1e6 || dec > 6)
        snprintf(buf, size, "%g", v);
    else
        snprintf(buf, size, "%.*f", dec, v);
}

static void xml_text(FILE *fp, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", fp);
            break;
        case '<':
            fputs("&lt;", fp);
            break;
        case '>':
            fputs("&gt;", fp);
            break;
        case '"':
            fputs("&quot;", fp);
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                fputc(*s, fp);
        }
    }
}

/* The field of a row: 0 train loss, 1 val loss, 2 train metric, 3 val metric. */
static double field(const sx_nn_epoch *r, int which)
{
    return which == 0   ? r->train_loss
           : which == 1 ? r->val_loss
           : which == 2 ? r->train_metric
                        : r->val_metric;
}

/* The axes, ticks, labels and grid of a panel. */
static void draw_axes(FILE *fp, const panel *p, const char *ylabel)
{
    double left = px(p, p->e_lo), right = px(p, p->e_hi), top = py(p, p->hi), bottom = py(p, p->lo);
    fprintf(fp,
            "<g class=\"panel\">\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" "
            "font-size=\"15\">",
            (left + right) / 2, M_TOP - 12);
    xml_text(fp, p->title);
    fputs("</text>\n", fp);
    for (double v = p->lo; v <= p->hi + p->step * 1e-6; v += p->step) {
        char lab[48];
        tick_label(lab, sizeof lab, v, p->step);
        fprintf(fp,
                "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#e0e0e0\"/>\n<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                "y2=\"%.1f\" stroke=\"black\"/>\n<text class=\"ytick\" x=\"%.1f\" y=\"%.1f\" "
                "text-anchor=\"end\" font-size=\"11\">%s</text>\n",
                left, py(p, v), right, py(p, v), left - 5, py(p, v), left, py(p, v), left - 8,
                py(p, v) + 4, lab);
    }
    for (double e = p->e_lo; e <= p->e_hi + p->e_st * 1e-6; e += p->e_st) {
        char lab[48];
        tick_label(lab, sizeof lab, e, p->e_st);
        fprintf(fp,
                "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"black\"/>\n<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" "
                "text-anchor=\"middle\" font-size=\"11\">%s</text>\n",
                px(p, e), bottom, px(p, e), bottom + 5, px(p, e), bottom + 18, lab);
    }
    fprintf(fp,
            "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
            "stroke=\"black\"/>\n<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
            "y2=\"%.1f\" stroke=\"black\"/>\n",
            left, bottom, right, bottom, left, bottom, left, top);
    fprintf(fp,
            "<text class=\"xlabel\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "font-size=\"13\">epoch</text>\n<text class=\"ylabel\" x=\"%.1f\" y=\"%.1f\" "
            "text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 %.1f %.1f)\">",
            (left + right) / 2, bottom + 38, p->x0 + 18, (top + bottom) / 2, p->x0 + 18,
            (top + bottom) / 2);
    xml_text(fp, ylabel);
    fputs("</text>\n", fp);
}

/* One curve: polylines over runs of finite values (NAN leaves a gap) and a dot per point. */
static void draw_curve(FILE *fp, const panel *p, const sx_nn_history *h, int which,
                       const char *colour, bool dashed, const char *cls)
{
    bool open = false;
    for (int64_t i = 0; i <= h->n; i++) {
        double v = i < h->n ? field(&h->rows[i], which) : (double)NAN;
        if (!isfinite(v)) {
            if (open)
                fputs("\"/>\n", fp);
            open = false;
            continue;
        }
        if (!open)
            fprintf(fp,
                    "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s "
                    "points=\"",
                    cls, colour, dashed ? " stroke-dasharray=\"6 4\"" : "");
        fprintf(fp, "%s%.2f,%.2f", open ? " " : "", px(p, (double)h->rows[i].epoch), py(p, v));
        open = true;
    }
    for (int64_t i = 0; i < h->n; i++) {
        double v = field(&h->rows[i], which);
        if (isfinite(v))
            fprintf(fp, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n",
                    px(p, (double)h->rows[i].epoch), py(p, v), colour);
    }
}

static bool any_finite(const sx_nn_history *h, int which)
{
    for (int64_t i = 0; i < h->n; i++)
        if (isfinite(field(&h->rows[i], which)))
            return true;
    return false;
}

/* The legend in one row under the panel's x axis label, where no curve can be. */
static void draw_legend(FILE *fp, const panel *p, bool val)
{
    double x = (px(p, p->e_lo) + px(p, p->e_hi)) / 2 - (val ? 90 : 30), y = H - 14;
    fprintf(fp,
            "<g class=\"legend\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
            "stroke=\"%s\" stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" "
            "font-size=\"12\">train</text>",
            x, y, x + 24, y, TRAIN_COLOUR, x + 30, y + 4);
    if (val)
        fprintf(fp,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\" stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%.1f\" "
                "font-size=\"12\">validation</text>",
                x + 80, y, x + 104, y, VAL_COLOUR, x + 110, y + 4);
    fputs("</g>\n", fp);
}

/* A panel over fields a (train) and b (validation). */
static void draw_panel(FILE *fp, const sx_nn_history *h, int index, int a, int b, const char *title,
                       const char *ylabel)
{
    panel p = {.x0 = index * PANEL_W, .title = title};
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < h->n; i++)
        for (int w = a; w <= b; w++) {
            double v = field(&h->rows[i], w);
            if (isfinite(v)) {
                lo = fmin(lo, v);
                hi = fmax(hi, v);
            }
        }
    if (!isfinite(lo))
        lo = hi = 0;
    axis_range(lo, hi, 5, &p.lo, &p.hi, &p.step);
    double e0 = (double)h->rows[0].epoch, e1 = (double)h->rows[h->n - 1].epoch;
    if (e1 <= e0)
        e1 = e0 + 1;
    p.e_st = fmax(1, nice_step(e1 - e0, 8));
    p.e_lo = floor(e0 / p.e_st) * p.e_st;
    p.e_hi = ceil(e1 / p.e_st) * p.e_st;
    draw_axes(fp, &p, ylabel);
    draw_curve(fp, &p, h, a, TRAIN_COLOUR, false, "train");
    draw_curve(fp, &p, h, b, VAL_COLOUR, true, "validation");
    draw_legend(fp, &p, any_finite(h, b));
    fputs("</g>\n", fp);
}

sx_status sx_nn_history_write_svg(const sx_nn_history *h, const char *path, const char *title)
{
    const char *who = "sx_nn_history_write_svg";
    if (h == NULL || path == NULL || h->n < 1 || h->rows == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument or an empty history", who);
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return sx_error(SX_E_ARG, "%s: path too long: %s", who, path);
    FILE *fp = fopen(tmp, "w");
    if (fp == NULL)
        return sx_error(SX_E_IO, "%s: cannot open for writing", tmp);
    fprintf(fp,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
            "version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    if (title != NULL) {
        fprintf(fp,
                "<text class=\"title\" x=\"%d\" y=\"22\" text-anchor=\"middle\" "
                "font-size=\"17\">",
                W / 2);
        xml_text(fp, title);
        fputs("</text>\n", fp);
    }
    const char *m = sx_nn_metric_name(h->metric);
    char mt[64];
    snprintf(mt, sizeof mt, "metric: %s", m);
    draw_panel(fp, h, 0, 0, 1, "loss", "loss");
    draw_panel(fp, h, 1, 2, 3, mt, m);
    fputs("</svg>\n", fp);
    bool bad = ferror(fp) != 0;
    if (fclose(fp) != 0 || bad) {
        remove(tmp);
        return sx_error(SX_E_IO, "%s: write failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return sx_error(SX_E_IO, "%s: cannot rename to %s", tmp, path);
    }
    return SX_OK;
}
