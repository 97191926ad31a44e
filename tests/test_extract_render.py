"""A document's pages as PNG images (``relay.extract.render``): as displayed, within bounds.

The documents are drawn by the tests (``tests.support.review_documents``: a PDF page with
``/Rotate 90``, a photo stored sideways with its EXIF orientation), so where a table's lines
must land on the image is known: the pixels there are checked.
"""

from __future__ import annotations

import io
import time

import pytest
from PIL import Image

from relay.devtools.drawn_tables import encode
from relay.devtools.sample_documents import blank_pages_pdf
from relay.extract.render import MIN_WIDTH, PageError, count_pages, render_page
from tests.support.review_documents import (
    PDF_LAYOUTS,
    PHOTO_LAYOUTS,
    Layout,
    pdf_document,
    photo_document,
)

BOUNDS = {"max_side": 2000, "max_pixels": 50_000_000, "max_pages": 500}


def _image(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG"
    return image.convert("L")


def _dark_along_rules(image: Image.Image, layout: Layout) -> None:
    """The table's outer rules are dark where the layout puts them, the page white between."""
    x0, y0, x1, y1 = layout.bbox()
    w, h = image.size

    def grey(x: int, y: int) -> int:
        value = image.getpixel((x, y))
        assert isinstance(value, int)  # mode "L"
        return value

    mid_y = round((y0 + (y1 - y0) / 2) * h)
    for x in (x0, x1):  # the left and right rules, half way down the table
        column = [grey(min(w - 1, round(x * w) + dx), mid_y) for dx in (-1, 0, 1)]
        assert min(column) < 128, (x, column)
    inside = grey(round((x0 + 0.004) * w), round((y0 + 0.004) * h))
    outside = grey(round(x0 * w / 2), mid_y)
    assert outside > 200 and inside > 150


def test_a_pdf_page_is_rendered_with_its_rotation_applied() -> None:
    content = pdf_document()
    upright = render_page(content, 1, **BOUNDS)
    assert upright.pages == 2 and upright.height == 2000 and upright.width < upright.height
    _dark_along_rules(_image(upright.png), PDF_LAYOUTS[0])
    turned = render_page(content, 2, width=900, **BOUNDS)
    assert turned.width == 900 and turned.height < turned.width  # /Rotate 90: landscape
    _dark_along_rules(_image(turned.png), PDF_LAYOUTS[1])
    assert count_pages(content, max_pixels=50_000_000, max_pages=500) == 2


def test_an_image_is_turned_as_its_exif_orientation_says() -> None:
    content = photo_document()
    stored = Image.open(io.BytesIO(content))
    assert stored.size == (900, 1200)  # sideways as stored
    page = render_page(content, 1, **BOUNDS)
    assert (page.width, page.height, page.pages) == (1200, 900, 1)  # never enlarged
    _dark_along_rules(_image(page.png), PHOTO_LAYOUTS[0])
    small = render_page(content, 1, width=300, **BOUNDS)
    assert (small.width, small.height) == (300, 225)


def test_the_size_stays_within_its_bounds() -> None:
    content = pdf_document()
    assert render_page(content, 1, width=1, **BOUNDS).width == MIN_WIDTH
    bounded = render_page(content, 1, **{**BOUNDS, "max_side": 400})
    assert max(bounded.width, bounded.height) <= 401
    few = render_page(content, 1, **{**BOUNDS, "max_pixels": 100_000})
    assert few.width * few.height <= 101_000


def test_the_frames_of_a_tiff_are_its_pages() -> None:
    frames = [Image.new("RGB", (60, 40), colour) for colour in ("red", "green", "blue")]
    out = io.BytesIO()
    frames[0].save(out, "TIFF", save_all=True, append_images=frames[1:])
    content = out.getvalue()
    second = Image.open(io.BytesIO(render_page(content, 2, **BOUNDS).png)).convert("RGB")
    assert second.getpixel((30, 20)) == (0, 128, 0)
    with pytest.raises(PageError) as raised:
        render_page(content, 4, **BOUNDS)
    assert raised.value.code == "page_not_found" and raised.value.pages == 3
    with pytest.raises(PageError) as raised:
        count_pages(content, max_pixels=50_000_000, max_pages=2)
    assert raised.value.code == "too_many_pages"


def test_transparency_is_flattened_onto_white() -> None:
    clear = Image.new("RGBA", (40, 30), (0, 0, 0, 0))
    page = Image.open(io.BytesIO(render_page(encode(clear, "PNG"), 1, **BOUNDS).png))
    assert page.convert("RGB").getpixel((5, 5)) == (255, 255, 255)


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    bomb = encode(Image.new("1", (30_000, 30_000), 1), "PNG")  # ~110 KB, 900 MP
    started = time.monotonic()
    with pytest.raises(PageError) as raised:
        render_page(bomb, 1, **BOUNDS)
    assert raised.value.code == "image_too_large"
    assert time.monotonic() - started < 1  # nothing was decoded


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"sku,qty\nA-1,2\n", "no_pages"),
        (b'[{"a": 1}]', "no_pages"),
        (b"%PDF-1.4\nnothing else", "invalid_pdf"),
        (encode(Image.new("RGB", (50, 50)), "PNG")[:60], "invalid_image"),
    ],
)
def test_what_has_no_page_to_show_says_why(content: bytes, code: str) -> None:
    with pytest.raises(PageError) as raised:
        render_page(content, 1, **BOUNDS)
    assert raised.value.code == code


def test_a_pdf_past_the_page_bound_is_refused_and_pages_count_from_one() -> None:
    content = blank_pages_pdf(6)
    with pytest.raises(PageError) as raised:
        render_page(content, 1, **{**BOUNDS, "max_pages": 5})
    assert raised.value.code == "too_many_pages"
    for number in (0, 7):
        with pytest.raises(PageError) as raised:
            render_page(content, number, **BOUNDS)
        assert raised.value.code == "page_not_found" and raised.value.pages == 6


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "TIFF"])
def test_every_image_format_is_served_as_png(fmt: str) -> None:
    content = encode(Image.new("RGB", (320, 200), (200, 30, 30)), fmt)
    page = render_page(content, 1, **BOUNDS)
    assert (page.width, page.height, page.pages) == (320, 200, 1)
    pixel = Image.open(io.BytesIO(page.png)).convert("RGB").getpixel((160, 100))
    assert isinstance(pixel, tuple) and abs(pixel[0] - 200) < 8 and pixel[1] < 40
