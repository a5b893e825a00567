"""Progress lines, table cells, CSV values and the gnuplot bar charts.
"""

import shutil
import subprocess
import sys
from pathlib import Path


def log(msg=""):
    print(msg, file=sys.stderr, flush=True)


def fmt(x, spec, missing="—"):
    return missing if x is None else format(x, spec)


def mib(kb):
    return None if kb is None else kb / 1024.0


def csv_value(v):
    return "" if v is None else round(v, 6) if isinstance(v, float) else v


def gp_quote(s):
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + s + '"'


def write_plot(outdir, png_name, panels, names, colors, title, size=(1800, 1150)):
    """Grouped bar charts (gnuplot), one panel above the other. Each panel:
    dict(file=data file name, ylabel=..., groups=[(label, {name: value})]).
    A dashed line marks 1.0. Returns the PNG path or None."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        log("gnuplot not found: no PNG (apt-get install gnuplot-nox)")
        return None
    outdir = Path(outdir)
    all_ys = []
    for p in panels:
        ys = []
        with open(outdir / p["file"], "w") as f:
            f.write("# group " + " ".join(gp_quote(n) for n in names) + "\n")
            for label, vals in p["groups"]:
                cells = []
                for n in names:
                    v = vals.get(n)
                    cells.append("?" if v is None else f"{v:.4f}")
                    if v is not None:
                        ys.append(v)
                f.write(gp_quote(label) + " " + " ".join(cells) + "\n")
        p["ys"] = ys
        all_ys += ys
    if not all_ys:
        return None

    def yscale(ys):
        pos = [y for y in ys if y > 0]
        if pos and max(pos) / min(pos) > 10:
            return "set logscale y\nset yrange [*:*]\n"
        return "unset logscale y\nset yrange [0:*]\n"

    def plot_cmd(fname):
        parts = []
        for i, n in enumerate(names):
            src = gp_quote(fname) if i == 0 else "''"
            xt = ":xtic(1)" if i == 0 else ""
            parts.append(f"{src} using {i + 2}{xt} title {gp_quote(n)} "
                         f"lc rgb {gp_quote(colors.get(n, '#333333'))}")
        parts.append("1 with lines dt 2 lw 2 lc rgb 'black' notitle")
        return "plot " + ", \\\n  ".join(parts) + "\n"

    png = outdir / png_name
    w, h = size
    script = f"""
set terminal pngcairo size {w},{h} font "DejaVu Sans,13" noenhanced
set output {gp_quote(str(png))}
set multiplot layout {len(panels)},1 title {gp_quote(title)} font ",15"
set style data histograms
set style histogram clustered gap 1.5
set style fill solid 0.9 border rgb "#333333"
set boxwidth 0.95
set datafile missing "?"
set grid ytics
set lmargin 12
set rmargin 30
set key outside right top vertical Left reverse samplen 2 spacing 1.1 font ",12"
set xtics nomirror scale 0 font ",13" offset 0,-0.3
set bmargin 4
"""
    for i, p in enumerate(panels):
        if i == 1:
            script += "unset key\n"
        script += (f"set ylabel {gp_quote(p['ylabel'])}\n{yscale(p['ys'])}"
                   f"set xrange [-0.6:{len(p['groups']) - 0.4}]\n{plot_cmd(p['file'])}\n")
    script += "unset multiplot\n"
    gp = outdir / "plot.gp"
    gp.write_text(script)
    r = subprocess.run([gnuplot, str(gp)], cwd=outdir, capture_output=True, text=True)
    if r.returncode != 0:
        # the cairo terminal may be missing: fall back to libgd's png
        gp.write_text(script.replace(f'set terminal pngcairo size {w},{h} font "DejaVu Sans,13"',
                                     f"set terminal png size {w},{h}"))
        r = subprocess.run([gnuplot, str(gp)], cwd=outdir, capture_output=True, text=True)
    if r.returncode != 0:
        log("gnuplot failed: " + r.stderr.strip()[:500])
        return None
    return png
