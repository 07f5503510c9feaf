"""What check_chart_render.py reads charts with, in the standard library alone: a PNG decoder
(zlib and struct: the 8-bit RGB/RGBA, non-interlaced PNGs rsvg-convert writes), the advance
widths of the font the charts ask for (read from its TrueType file), and the geometry of SVG
text and shapes (boxes, rotation, overlap of convex polygons)."""
import math
import re
import shutil
import struct
import subprocess
import zlib


# ---- PNG ---------------------------------------------------------------------------------------

class Image:
    """width, height and rows: one bytes object of width * 3 (RGB) per row."""

    def __init__(self, width, height, rows):
        self.width, self.height, self.rows = width, height, rows

    def pixel(self, x, y):
        r = self.rows[y]
        return r[3 * x], r[3 * x + 1], r[3 * x + 2]

    def histogram(self, x0, y0, x1, y1):
        """{(r, g, b): count} of the pixels in [x0, x1) x [y0, y1), clipped to the image."""
        x0, y0 = max(0, int(x0)), max(0, int(y0))
        x1, y1 = min(self.width, int(math.ceil(x1))), min(self.height, int(math.ceil(y1)))
        counts = {}
        for y in range(y0, y1):
            row = self.rows[y]
            for i in range(3 * x0, 3 * x1, 3):
                key = row[i:i + 3]
                counts[key] = counts.get(key, 0) + 1
        return {tuple(k): v for k, v in counts.items()}


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(path):
    """The Image of an 8-bit RGB or RGBA PNG, alpha composed over white."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError(f"{path}: depth {depth} color type {color} interlace {interlace}: not 8-bit RGB(A)")
    bpp = 4 if color == 6 else 3
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                up_left = prev[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + _paeth(left, prev[i], up_left)) & 0xFF
        elif kind != 0:
            raise ValueError(f"{path}: row {y} has filter {kind}")
        prev = line
        if bpp == 4:  # over white: c * a + 255 * (1 - a)
            rgb = bytearray(width * 3)
            if line[3::4] == b"\xff" * width:  # opaque (the charts paint a white background)
                rgb[0::3], rgb[1::3], rgb[2::3] = line[0::4], line[1::4], line[2::4]
                rows.append(bytes(rgb))
                continue
            for x in range(width):
                r, g, b, a = line[4 * x:4 * x + 4]
                rgb[3 * x:3 * x + 3] = bytes(((c * a + 255 * (255 - a)) + 127) // 255 for c in (r, g, b))
            rows.append(bytes(rgb))
        else:
            rows.append(bytes(line))
    return Image(width, height, rows)


# ---- Font metrics --------------------------------------------------------------------------------

def _advances(path):
    """{code point: advance in em} of the printable ASCII of a TrueType font (cmap format 4)."""
    d = open(path, "rb").read()
    tables = {}
    for i in range(struct.unpack(">H", d[4:6])[0]):
        tag, _, off, length = struct.unpack(">4sIII", d[12 + 16 * i:28 + 16 * i])
        tables[tag.decode("latin-1")] = off
    units = struct.unpack(">H", d[tables["head"] + 18:tables["head"] + 20])[0]
    metrics = struct.unpack(">H", d[tables["hhea"] + 34:tables["hhea"] + 36])[0]
    hmtx = tables["hmtx"]
    advance = [struct.unpack(">H", d[hmtx + 4 * i:hmtx + 4 * i + 2])[0] for i in range(metrics)]
    cmap, sub = tables["cmap"], None
    for i in range(struct.unpack(">H", d[cmap + 2:cmap + 4])[0]):
        platform, encoding, off = struct.unpack(">HHI", d[cmap + 4 + 8 * i:cmap + 12 + 8 * i])
        if (platform, encoding) == (3, 1):
            sub = cmap + off
    if sub is None or struct.unpack(">H", d[sub:sub + 2])[0] != 4:
        raise ValueError(f"{path}: no Unicode BMP cmap of format 4")
    segments = struct.unpack(">H", d[sub + 6:sub + 8])[0] // 2
    field = lambda k, fmt: struct.unpack(f">{segments}{fmt}", d[sub + 14 + k * 2 * segments + (2 if k else 0):
                                                                 sub + 14 + (k + 1) * 2 * segments + (2 if k else 0)])
    ends, starts, deltas, offsets = field(0, "H"), field(1, "H"), field(2, "h"), field(3, "H")
    offsets_at = sub + 16 + 6 * segments
    out = {}
    for c in range(32, 127):
        glyph = 0
        for k in range(segments):
            if starts[k] <= c <= ends[k]:
                if offsets[k] == 0:
                    glyph = (c + deltas[k]) & 0xFFFF
                else:
                    at = offsets_at + 2 * k + offsets[k] + 2 * (c - starts[k])
                    g = struct.unpack(">H", d[at:at + 2])[0]
                    glyph = (g + deltas[k]) & 0xFFFF if g else 0
                break
        out[c] = advance[min(glyph, metrics - 1)] / units
    return out


class Fonts:
    """Text widths in the font rsvg-convert draws the charts' font-family with (fontconfig's
    match for DejaVu Sans), regular and bold; 0.62 em a character where there is no fc-match."""

    def __init__(self):
        self.tables = {}
        for bold in (False, True):
            path = None
            if shutil.which("fc-match"):
                pattern = "DejaVu Sans:bold" if bold else "DejaVu Sans"
                r = subprocess.run(["fc-match", "-f", "%{file}", pattern], capture_output=True, text=True)
                path = r.stdout.strip() if r.returncode == 0 else None
            try:
                self.tables[bold] = _advances(path) if path and path.endswith(".ttf") else None
            except (OSError, ValueError, struct.error):
                self.tables[bold] = None

    def width(self, text, size, bold=False):
        table = self.tables[bold]
        em = 0.0
        for ch in text:
            em += table.get(ord(ch), 0.9) if table else 0.62
        return em * size


# ---- Geometry --------------------------------------------------------------------------------

def rotation(transform):
    """(degrees, cx, cy) of a transform "rotate(a cx cy)" or "rotate(a)"; (0, 0, 0) for none.
    Anything else is a ValueError: the checks know no other transform."""
    if not transform:
        return 0.0, 0.0, 0.0
    m = re.fullmatch(r"\s*rotate\(\s*([-\d.]+)(?:[\s,]+([-\d.]+)[\s,]+([-\d.]+))?\s*\)\s*", transform)
    if not m:
        raise ValueError(f"transform {transform!r}")
    return float(m.group(1)), float(m.group(2) or 0), float(m.group(3) or 0)


def rotate_points(points, transform):
    a, cx, cy = rotation(transform)
    if a == 0:
        return points
    c, s = math.cos(math.radians(a)), math.sin(math.radians(a))
    return [(cx + (x - cx) * c - (y - cy) * s, cy + (x - cx) * s + (y - cy) * c) for x, y in points]


def text_quad(x, y, width, size, anchor, transform, ascent=0.76, descent=0.24):
    """The four corners of a text's box (baseline y, ascent and descent in em) after its rotation."""
    x0 = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
    box = [(x0, y - ascent * size), (x0 + width, y - ascent * size), (x0 + width, y + descent * size),
           (x0, y + descent * size)]
    return rotate_points(box, transform)


def rect_quad(x, y, w, h):
    return [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]


def segment_quad(p, q, half_width):
    """A stroke of half_width about the segment p-q, as a quad."""
    dx, dy = q[0] - p[0], q[1] - p[1]
    n = math.hypot(dx, dy) or 1.0
    ox, oy = -dy / n * half_width, dx / n * half_width
    return [(p[0] + ox, p[1] + oy), (q[0] + ox, q[1] + oy), (q[0] - ox, q[1] - oy), (p[0] - ox, p[1] - oy)]


def overlap(a, b, margin=0.5):
    """Whether convex polygons a and b overlap by more than `margin` pixels (separating axes)."""
    for poly in (a, b):
        for i in range(len(poly)):
            (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % len(poly)]
            nx, ny = y1 - y2, x2 - x1
            n = math.hypot(nx, ny)
            if n == 0:
                continue
            nx, ny = nx / n, ny / n
            pa = [px * nx + py * ny for px, py in a]
            pb = [px * nx + py * ny for px, py in b]
            if min(max(pa), max(pb)) - max(min(pa), min(pb)) <= margin:
                return False
    return True


def hex_rgb(color):
    """(r, g, b) of "#rrggbb", None for anything else."""
    if not color or not re.fullmatch(r"#[0-9a-fA-F]{6}", color):
        return None
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def count_near(histogram, rgb, tolerance):
    """Pixels of the histogram within `tolerance` of rgb in every channel."""
    return sum(n for c, n in histogram.items() if max(abs(c[i] - rgb[i]) for i in range(3)) <= tolerance)
