"""Tables drawn by the tests themselves (Pillow and a system TrueType font): no binary
fixtures, and the expected text is known exactly."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

TABLE = [["item", "qty", "price"], ["apple", "2", "9.50"], ["pear", "5", "12.00"]]
EXPECTED: list[dict[str, object]] = [
    {"item": "apple", "qty": "2", "price": "9.50"},
    {"item": "pear", "qty": "5", "price": "12.00"},
]

FONT_CANDIDATES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
)


def font_path() -> str:
    for candidate in FONT_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    for root in ("/usr/share/fonts", "/usr/local/share/fonts"):
        found = sorted(Path(root).rglob("*Sans*.ttf")) if Path(root).is_dir() else []
        if found:
            return str(found[0])
    raise LookupError("no TrueType font on this machine to draw test images with")


def draw_table(
    rows: Sequence[Sequence[str]] = TABLE,
    *,
    bordered: bool = True,
    size: int = 30,
    cell: tuple[int, int] = (220, 70),
    margin: int = 40,
) -> Image.Image:
    """``rows`` as a table in black on white; ruled when ``bordered``."""
    font = ImageFont.truetype(font_path(), size)
    width = 2 * margin + cell[0] * len(rows[0])
    height = 2 * margin + cell[1] * len(rows)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            x, y = margin + c * cell[0], margin + r * cell[1]
            if bordered:
                draw.rectangle((x, y, x + cell[0], y + cell[1]), outline="black", width=2)
            draw.text((x + 15, y + cell[1] // 2), text, fill="black", font=font, anchor="lm")
    return image


def photo_like(image: Image.Image, *, degrees: float = 3.0, seed: int = 7) -> Image.Image:
    """``image`` as a phone might take it: rotated, slightly blurred, on grey-ish paper with
    Gaussian noise and salt-and-pepper specks (fixed seed: the same pixels every run)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    turned = image.rotate(
        degrees, resample=Image.Resampling.BICUBIC, expand=True, fillcolor="white"
    )
    turned = turned.filter(ImageFilter.GaussianBlur(0.6))
    pixels = np.asarray(turned.convert("L"), dtype=np.float64) * 0.92 + 10
    pixels += rng.normal(0.0, 12.0, pixels.shape)
    specks = rng.random(pixels.shape)
    pixels[specks < 0.002] = 0
    pixels[specks > 0.998] = 255
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).convert("RGB")


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def page_rows(number: int) -> list[list[str]]:
    """The table drawn on page ``number`` of :func:`long_scan`: the same header on every
    page (a table continued page after page), rows that name their page."""
    return [
        ["item", "qty", "price"],
        ["apple", str(number), "9.50"],
        ["pear", str(number + 50), "12.00"],
    ]


def long_scan(pages: int, fmt: str = "TIFF", size: tuple[int, int] = (600, 400)) -> bytes:
    """A scan of ``pages`` small pages (``size`` pixels), each a drawn table
    (:func:`page_rows`): a multi-page TIFF, or with ``fmt="PDF"`` a PDF of images and no
    text layer."""
    frames = []
    for number in range(1, pages + 1):
        page = Image.new("RGB", size, "white")
        table = draw_table(page_rows(number), size=24, cell=(170, 60), margin=30)
        page.paste(table, (15, 40))
        frames.append(page)
    options: dict[str, object] = {"save_all": True, "append_images": frames[1:]}
    if fmt == "TIFF":
        options["compression"] = "tiff_deflate"
    else:
        options["resolution"] = 100.0
    return encode(frames[0], fmt, **options)
