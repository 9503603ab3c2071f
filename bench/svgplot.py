"""Line charts as plain SVG for bench/scale: no plotting library is needed on the machine.

One chart: a title, a note line (what grows, what stays flat), an x axis (logarithmic when the
points span more than a decade), a linear y axis from zero, one line with markers per series and
a legend. Enough to read a curve's shape and its figures; the JSON beside it has the numbers."""

import html
import math

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
W, H = 760, 440
LEFT, RIGHT, TOP, BOTTOM = 80, 190, 70, 60


def nice_step(span):
    """A round step that cuts `span` into about five parts."""
    if span <= 0:
        return 1.0
    raw = span / 5
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def chart(title, note, xlabel, ylabel, series):
    """`series`: {name: [(x, y), ...]}; points with y None are left out. Returns the SVG text."""
    pts = [(x, y) for s in series.values() for x, y in s if y is not None]
    xs = sorted({x for x, _ in pts}) or [1]
    ymax = max([y for _, y in pts] or [1]) or 1
    logx = xs[0] > 0 and xs[-1] / xs[0] > 10
    step = nice_step(ymax)
    ytop = step * math.ceil(ymax / step)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        if len(xs) == 1:
            return LEFT + pw / 2
        if logx:
            return LEFT + pw * (math.log10(x) - math.log10(xs[0])) / (math.log10(xs[-1]) - math.log10(xs[0]))
        return LEFT + pw * (x - xs[0]) / (xs[-1] - xs[0])

    def py(y):
        return TOP + ph * (1 - y / ytop)

    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{e(title)}</text>',
           f'<text x="{LEFT}" y="44" fill="#444">{e(note)}</text>']
    y = 0.0
    while y <= ytop + step / 2:
        out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + pw}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{fmt(y)}</text>')
        y += step
    for x in xs:
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP + ph}" x2="{px(x):.1f}" y2="{TOP + ph + 5}" stroke="#333"/>')
        out.append(f'<text x="{px(x):.1f}" y="{TOP + ph + 18}" text-anchor="middle">{fmt(x)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="#333"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="#333"/>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 18}" text-anchor="middle">{e(xlabel)}{" (log scale)" if logx else ""}</text>')
    out.append(f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" transform="rotate(-90 18 {TOP + ph / 2})">{e(ylabel)}</text>')
    for i, (name, points) in enumerate(series.items()):
        c = COLOURS[i % len(COLOURS)]
        good = [(x, y) for x, y in points if y is not None]
        if len(good) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in good)
            out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in good:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{c}"><title>{e(name)}: {fmt(x)} -&gt; {fmt(y)}</title></circle>')
        ly = TOP + 10 + 18 * i
        out.append(f'<line x1="{LEFT + pw + 15}" y1="{ly}" x2="{LEFT + pw + 35}" y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 40}" y="{ly + 4}">{e(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
