"""A report as a list of blocks, rendered to Markdown and to self-contained HTML alike.

Blocks: ("h", level, text) ("p", text) ("table", header, rows) ("img", path, caption);
an image is linked from the Markdown and embedded in the HTML (it opens offline).
The report (report/render.py) and the plan (report/plan.py) both write through it.
"""

import base64
import html
import os


def number(value, digits=2):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def duration(hours):
    if hours is None:
        return "n/a"
    return f"{hours * 3600:,.0f} s" if hours < 1 else f"{hours:,.2f} h"


def money(value):
    return "n/a" if value is None else f"${value:,.2f}"


def markdown(doc):
    lines = []
    for block in doc:
        if block[0] == "h":
            lines += ["#" * block[1] + " " + block[2], ""]
        elif block[0] == "p":
            lines += [block[1], ""]
        elif block[0] == "table":
            _, header, rows = block
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
            lines.append("")
        elif block[0] == "img":
            lines += [f"![{block[2]}]({os.path.basename(block[1])})", ""]
    return "\n".join(lines)


def html_page(doc, title="TPU vs GPU"):
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;margin:1em 0;font-size:90%}"
             "td,th{border:1px solid #bbb;padding:3px 6px}img{max-width:100%}</style>"
             "</head><body>"]
    for block in doc:
        if block[0] == "h":
            parts.append(f"<h{block[1]}>{html.escape(block[2])}</h{block[1]}>")
        elif block[0] == "p":
            parts.append(f"<p>{html.escape(block[1])}</p>")
        elif block[0] == "table":
            _, header, rows = block
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
                         + "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>"
                                                                 for c in row) + "</tr>"
                                             for row in rows) + "</table>")
        elif block[0] == "img":
            with open(block[1], "rb") as f:
                data = base64.b64encode(f.read()).decode()
            parts.append(f"<figure><img alt='{html.escape(block[2])}' "
                         f"src='data:image/png;base64,{data}'>"
                         f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
    return "".join(parts) + "</body></html>\n"


def write_files(directory, files):
    """Writes {name: text} into `directory`, each file whole (renamed into place)."""
    paths = []
    for name, text in files.items():
        path = os.path.join(directory, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        paths.append(path)
    return paths
