#!/usr/bin/env python3
"""check_svg.py FILE.svg [MIN_CURVES]: a history plot written by sx_nn_history_write_svg is
well-formed XML (python3's xml module parses it), an <svg> root with two panels, at least
MIN_CURVES polylines (default 2), every point inside the image, ticks labelled with numbers and
both x axes labelled "epoch". Exit 0 when it is, 1 with the reason otherwise."""
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def fail(why):
    print("check_svg: %s: %s" % (sys.argv[1], why))
    sys.exit(1)


def main():
    root = ET.parse(sys.argv[1]).getroot()
    want = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if root.tag != NS + "svg":
        fail("root is %s, not svg" % root.tag)
    w, h = float(root.get("width")), float(root.get("height"))
    panels = [g for g in root.iter(NS + "g") if g.get("class") == "panel"]
    if len(panels) != 2:
        fail("%d panels, want 2" % len(panels))
    lines = list(root.iter(NS + "polyline"))
    if len(lines) < want:
        fail("%d curves, want at least %d" % (len(lines), want))
    for pl in lines:
        for pt in pl.get("points").split():
            x, y = (float(v) for v in pt.split(","))
            if not (0 <= x <= w and 0 <= y <= h):
                fail("point %s outside %gx%g" % (pt, w, h))
    ticks = [t for t in root.iter(NS + "text") if t.get("class") in ("xtick", "ytick")]
    if len(ticks) < 8:
        fail("%d tick labels" % len(ticks))
    for t in ticks:
        float(t.text)
    if sum(1 for t in root.iter(NS + "text") if t.text == "epoch") != 2:
        fail("x axes not labelled 'epoch'")
    print("check_svg: %s: %d panels, %d curves, %d tick labels" %
          (sys.argv[1], len(panels), len(lines), len(ticks)))


main()
