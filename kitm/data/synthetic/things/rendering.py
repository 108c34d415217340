"""Rendering of the things world: a setting's backdrop, then each object's drawing, with noise.

Every setting has a backdrop a small CNN can tell apart (sky, sea and sand; grass under a blue sky; a grey road
under house fronts; tiles over a counter...), with jittered proportions and tints. Objects are drawn from their icons
(`kitm.data.synthetic.things.icons`) four times larger than the image and averaged down, so edges are smooth at 48 or
64 pixels; the body parts carry the object's colour and pattern (stripes, spots, checks), the fixed parts keep their
own colours. Objects lower in the picture are drawn later, as nearer things hide farther ones. The pixels carry what
the facts state (setting, category, colour, size, pattern, position) under nuisance (tints, brightness, mirroring,
noise), so no exact value gives them away.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

from kitm.data.synthetic.things.icons import FIXED, ICONS, TRAFFIC_LAMPS
from kitm.data.synthetic.things.scenes import ThingObject, ThingScene
from kitm.relevance.things_facts import CATEGORIES, COLOURS, PATTERNS, SETTINGS

COLOUR_RGB = {"red": (215, 40, 40), "orange": (240, 135, 30), "yellow": (240, 215, 45), "green": (50, 160, 60),
              "blue": (45, 90, 220), "purple": (140, 60, 190), "pink": (240, 140, 180), "brown": (125, 80, 45),
              "black": (30, 30, 32), "white": (238, 238, 238), "grey": (135, 135, 140)}
_SUPERSAMPLE = 4
assert set(COLOUR_RGB) == set(COLOURS)


def _noise_field(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Smooth noise in [-1, 1], [size, size]: a coarse random grid, bilinearly upsampled."""
    grid = rng.uniform(-1.0, 1.0, size=(cells + 1, cells + 1)).astype(np.float32)
    t = np.linspace(0, cells, size, dtype=np.float32)
    i = np.minimum(t.astype(int), cells - 1)
    f = t - i
    rows = grid[i] * (1 - f)[:, None] + grid[i + 1] * f[:, None]
    return rows[:, i] * (1 - f)[None, :] + rows[:, i + 1] * f[None, :]


def _bands(size: int, rng: np.random.Generator, stops: Sequence[tuple[float, tuple]]) -> np.ndarray:
    """Horizontal bands: rows above stop k's height get its colour (jittered by a few per cent)."""
    canvas = np.empty((size, size, 3), dtype=np.float32)
    rows = np.arange(size) / size
    start = 0
    for k, (until, colour) in enumerate(stops):
        end = size if k == len(stops) - 1 else int(round((until + rng.uniform(-0.05, 0.05)) * size))
        canvas[start:max(end, start)] = np.asarray(colour, dtype=np.float32) * rng.uniform(0.9, 1.1, 3)
        start = max(end, start)
    del rows
    return canvas


def _backdrop(setting: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [size, size, 3] backdrop of ``setting`` (module docstring)."""
    sky, grass = (120, 175, 235), (70, 150, 55)
    texture = _noise_field(rng, size, 6)[..., None]
    if setting == "park":
        canvas = _bands(size, rng, ((0.3, sky), (1.0, grass)))
        canvas[int(size * 0.3):] += 25 * texture[int(size * 0.3):]
    elif setting == "beach":
        canvas = _bands(size, rng, ((0.22, sky), (0.4, (30, 90, 170)), (1.0, (225, 200, 150))))
    elif setting == "street":
        canvas = _bands(size, rng, ((0.35, (150, 95, 80)), (0.48, (175, 175, 170)), (1.0, (85, 85, 90))))
        for x in range(size // 10, size, size // 4):  # house windows
            canvas[size // 12:size // 4, x:x + max(size // 14, 2)] = (230, 220, 150)
        lane = int(size * 0.74)
        for x in range(0, size, size // 5):  # a dashed lane line
            canvas[lane:lane + max(size // 40, 1), x:x + size // 10] = (235, 235, 235)
    elif setting == "snow":
        canvas = _bands(size, rng, ((0.25, (195, 205, 215)), (1.0, (242, 245, 250))))
        canvas += 12 * texture
    elif setting == "kitchen":
        canvas = _bands(size, rng, ((0.45, (225, 225, 215)), (0.58, (150, 110, 70)), (1.0, (190, 160, 120))))
        step = max(size // 8, 2)
        canvas[:int(size * 0.45):step] *= 0.8  # tile joints
        canvas[:int(size * 0.45), ::step] *= 0.8
    elif setting == "living room":
        canvas = _bands(size, rng, ((0.6, (215, 190, 150)), (1.0, (150, 100, 60))))
        canvas[int(size * 0.1):int(size * 0.35), int(size * 0.6):int(size * 0.85)] = (175, 210, 240)  # window
        canvas[int(size * 0.6):, ::max(size // 6, 2)] *= 0.75  # floor boards
    elif setting == "bedroom":
        canvas = _bands(size, rng, ((0.55, (150, 140, 185)), (1.0, (120, 90, 110))))
        canvas *= 0.85
    elif setting == "lake":
        canvas = _bands(size, rng, ((0.18, sky), (0.26, (60, 120, 60)), (1.0, (40, 105, 160))))
        waves = np.sin(np.arange(size)[:, None] * 1.3 + np.arange(size)[None, :] * 0.4) > 0.85
        canvas[int(size * 0.3):][waves[int(size * 0.3):]] += 35
    elif setting == "farm":
        canvas = _bands(size, rng, ((0.3, sky), (1.0, (105, 170, 70))))
        for y in (int(size * 0.4), int(size * 0.47)):  # a fence
            canvas[y:y + max(size // 40, 1)] = (140, 95, 55)
        canvas[int(size * 0.37):int(size * 0.52), ::max(size // 8, 2)] = (140, 95, 55)
    elif setting == "savanna":
        canvas = _bands(size, rng, ((0.35, (210, 215, 225)), (1.0, (200, 170, 90))))
        canvas[int(size * 0.35):] += 18 * texture[int(size * 0.35):]
        canvas[int(size * 0.22):int(size * 0.3), int(size * 0.1):int(size * 0.35)] = (70, 90, 40)  # an acacia
    elif setting == "forest":
        canvas = _bands(size, rng, ((1.0, (35, 85, 40)),))
        canvas += 25 * texture
        for x in range(size // 9, size, size // 4):
            canvas[:, x:x + max(size // 16, 2)] = (80, 55, 35)
    elif setting == "sky":
        canvas = _bands(size, rng, ((1.0, (100, 160, 235)),))
        canvas[:] += np.linspace(-20, 25, size, dtype=np.float32)[:, None, None]
        canvas += 40 * np.clip(_noise_field(rng, size, 4), 0.3, 1.0)[..., None] - 12
    else:
        raise AssertionError(f"no backdrop for setting {setting!r}")
    return canvas


def _body_texture(colour: np.ndarray, pattern: str, side: int, radius: float) -> np.ndarray:
    """uint8 [side, side, 3]: the object's colour with its pattern, at the supersampled scale."""
    v, u = np.mgrid[0:side, 0:side].astype(np.float32) / max(radius, 1.0)
    base = np.broadcast_to(colour, (side, side, 3)) * np.linspace(1.08, 0.9, side, dtype=np.float32)[:, None, None]
    contrast = colour * 0.2 if colour.sum() > 420 else colour * 0.25 + 190
    if pattern == "striped":
        mark = np.sin((u * 0.35 + v) * math.pi / 0.22) > 0.2
    elif pattern == "spotted":
        mark = ((np.sin(u * math.pi / 0.24) * np.sin(v * math.pi / 0.24)) > 0.55)
    elif pattern == "checked":
        mark = (np.floor(u / 0.36) + np.floor(v / 0.36)) % 2 == 1
        contrast = 0.5 * (colour + contrast)
    else:
        mark = np.zeros((side, side), dtype=bool)
    texture = np.where(mark[..., None], contrast, base)
    return np.clip(texture, 0, 255).astype(np.uint8)


def _parts_of(o: ThingObject) -> list:
    """The icon's parts as (kind, geometry, paint); a line's geometry is (points, width)."""
    parts = [(p[0], (p[1], p[2]), p[3]) if p[0] == "line" else p for p in ICONS[CATEGORIES[o.category]]]
    if CATEGORIES[o.category] == "traffic light":  # the lamp of the light's colour is lit
        top = TRAFFIC_LAMPS.get(COLOURS[o.colour], -0.9)
        parts = [(k, g, "body" if k == "ellipse" and g[1] == top else p) for k, g, p in parts]
    return parts


def _draw_part(draw: ImageDraw.ImageDraw, kind: str, geometry, to_px, radius: float) -> None:
    if kind == "ellipse" or kind == "rect":
        (x0, y0), (x1, y1) = to_px(geometry[0], geometry[1]), to_px(geometry[2], geometry[3])
        box = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
        (draw.ellipse if kind == "ellipse" else draw.rectangle)(box, fill=255)
    elif kind == "poly":
        draw.polygon([to_px(x, y) for x, y in geometry], fill=255)
    elif kind == "line":
        points, width = geometry
        draw.line([to_px(x, y) for x, y in points], fill=255, width=max(int(round(width * radius)), 1),
                  joint="curve")
    else:
        raise AssertionError(f"unknown icon part {kind!r}")


def object_layer(o: ThingObject, rng: np.random.Generator) -> tuple[np.ndarray, int, int]:
    """(float32 [B, B, 4] premultiplied RGBA at the image's scale, left, top) of one object's drawing."""
    box = int(math.ceil(o.extent * 1.05)) + 2
    side = box * _SUPERSAMPLE
    radius = o.extent / 2 * _SUPERSAMPLE
    mirror = -1.0 if rng.random() < 0.5 else 1.0
    centre = side / 2

    def to_px(x, y):
        return centre + mirror * x * radius, centre + y * radius

    colour = np.asarray(COLOUR_RGB[COLOURS[o.colour]], dtype=np.float32) * np.float32(rng.uniform(0.88, 1.06))
    body = _body_texture(colour, PATTERNS[o.pattern], side, radius)
    paints = {"body": body, "dark": (body * 0.55).astype(np.uint8),
              "light": (0.5 * body + 120).astype(np.uint8)}
    canvas = Image.new("RGBA", (side, side), (0, 0, 0, 0))
    for kind, geometry, paint in _parts_of(o):
        mask = Image.new("L", (side, side), 0)
        _draw_part(ImageDraw.Draw(mask), kind, geometry, to_px, radius)
        if paint == "hole":
            alpha = np.asarray(canvas, dtype=np.uint8).copy()
            alpha[..., 3] = (alpha[..., 3] * (1.0 - np.asarray(mask, dtype=np.float32) / 255.0)).astype(np.uint8)
            canvas = Image.fromarray(alpha, "RGBA")
            continue
        source = paints.get(paint)
        fill = (Image.fromarray(source, "RGB").convert("RGBA") if source is not None
                else Image.new("RGBA", (side, side), FIXED[paint] + (255,)))
        canvas.paste(fill, (0, 0), mask)
    rgba = np.asarray(canvas, dtype=np.float32) / 255.0
    rgba[..., :3] *= rgba[..., 3:]
    small = rgba.reshape(box, _SUPERSAMPLE, box, _SUPERSAMPLE, 4).mean(axis=(1, 3))
    return small, int(round(o.x - box / 2)), int(round(o.y - box / 2))


def render_scene(scene: ThingScene, image_size: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [image_size, image_size, 3]: the setting's backdrop, the objects nearest last, and noise."""
    canvas = _backdrop(SETTINGS[scene.setting], image_size, rng) / 255.0
    for o in sorted(scene.objects, key=lambda o: o.y):
        layer, left, top = object_layer(o, rng)
        h, w = layer.shape[:2]
        y0, x0 = max(top, 0), max(left, 0)
        y1, x1 = min(top + h, image_size), min(left + w, image_size)
        if y1 <= y0 or x1 <= x0:
            continue
        part = layer[y0 - top:y1 - top, x0 - left:x1 - left]
        canvas[y0:y1, x0:x1] = part[..., :3] + canvas[y0:y1, x0:x1] * (1.0 - part[..., 3:])
    canvas = canvas * 255.0 + np.float32(5.0) * rng.standard_normal(size=canvas.shape, dtype=np.float32)
    return np.clip(np.rint(canvas), 0, 255).astype(np.uint8)
