"""Rendering of synthetic scenes: flat-coloured shapes on a dim, noisy, slightly tinted background.

The pixels carry what the facts state (shape, colour, size, position) under mild nuisance (background tint,
brightness jitter, Gaussian noise), so a small CNN can learn them and no exact RGB value gives them away.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from kitm.data.synthetic.scenes import SceneObject
from kitm.relevance.scene_facts import COLOURS, SHAPES

# RGB of each colour, chosen far apart so that a small CNN (and the nearest-colour check in the tests) separates
# them under the brightness jitter and noise added at rendering.
COLOUR_RGB = np.array(
    [(225, 40, 40), (40, 200, 60), (50, 90, 245), (240, 220, 40), (165, 60, 205), (240, 240, 240)],
    dtype=np.float32,
)

assert len(COLOUR_RGB) == len(COLOURS)


def _shape_mask(shape: int, dx: np.ndarray, dy: np.ndarray, half: float) -> np.ndarray:
    """Pixels of a shape centred at (0, 0) with bounding half-side ``half``; every shape covers its centre."""
    name = SHAPES[shape]
    if name == "circle":
        return dx * dx + dy * dy <= half * half
    if name == "square":
        return (np.abs(dx) <= 0.85 * half) & (np.abs(dy) <= 0.85 * half)
    if name == "triangle":  # apex up; half-width (dy + half) / 2, so it is half/2 wide at the centre row
        return (dy >= -half) & (dy <= half) & (np.abs(dx) <= (dy + half) / 2)
    if name == "diamond":
        return np.abs(dx) + np.abs(dy) <= half
    if name == "cross":  # an upright plus sign
        arm = 0.3 * half
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= half)) | ((np.abs(dy) <= arm) & (np.abs(dx) <= half))
    raise AssertionError(f"no mask for shape {name!r}")


def render_scene(objects: Sequence[SceneObject], image_size: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [image_size, image_size, 3]: the objects painted in order over a tinted background, plus noise."""
    tint = rng.uniform(10.0, 45.0, size=3).astype(np.float32)
    canvas = np.broadcast_to(tint, (image_size, image_size, 3)).copy()
    for o in objects:
        half = o.extent / 2
        reach = math.ceil(half)
        y0, y1 = max(o.y - reach, 0), min(o.y + reach + 1, image_size)
        x0, x1 = max(o.x - reach, 0), min(o.x + reach + 1, image_size)
        dy = np.arange(y0, y1, dtype=np.float32)[:, None] - o.y
        dx = np.arange(x0, x1, dtype=np.float32)[None, :] - o.x
        mask = _shape_mask(o.shape, dx, dy, half)
        # Brightness jitter keeps colour recognisable yet not a single exact RGB value.
        canvas[y0:y1, x0:x1][mask] = COLOUR_RGB[o.colour] * np.float32(rng.uniform(0.85, 1.0))
    canvas += np.float32(7.0) * rng.standard_normal(size=canvas.shape, dtype=np.float32)
    return np.clip(np.rint(canvas), 0, 255).astype(np.uint8)
