"""The OCR engine (``relay.extract.ocr``): text from 7 px to 40 px high, confidence per
cell, blank pages without OCR, and the bounds of big images under the sandbox's limits.

Tables are drawn by the tests (``relay/devtools/drawn_tables.py``) and read by the real models
from their wheels: in this process they load once for the whole session (the engine caches
them), in a sandbox child once per child.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont

from relay.config import load_settings
from relay.devtools.drawn_tables import draw_table, encode, font_path
from relay.extract import ExtractionError, extract_document
from relay.extract.ocr import read_tables
from relay.runtime.context import sandbox_config
from relay.runtime.sandbox import ExtractorHost, SandboxConfig

GRID = [
    ["region", "units", "price"],
    ["north", "12", "4.50"],
    ["south", "7", "19.25"],
    ["east", "305", "0.75"],
]


def _cap_height(size: int) -> int:
    top, bottom = ImageFont.truetype(font_path(), size).getbbox("H")[1::2]
    return int(bottom - top)


@pytest.mark.parametrize("bordered", [True, False], ids=["ruled", "unruled"])
@pytest.mark.parametrize(
    ("size", "cell", "margin", "text_px"),
    [(10, (60, 14), 8, 7), (55, (330, 110), 40, 40)],
    ids=["7px", "40px"],
)
def test_small_and_large_text_is_read_right(
    size: int, cell: tuple[int, int], margin: int, text_px: int, bordered: bool
) -> None:
    """Text 7 px high (PubTabNet's size: a tight ruled cell of 14 px) and 40 px high, in a
    ruled and an unruled table: every cell exact."""
    assert _cap_height(size) == text_px  # the drawing is what the test says it is
    image = draw_table(GRID, size=size, cell=cell, margin=margin, bordered=bordered)
    tables = read_tables(image, 3)
    assert [t.rows for t in tables] == [GRID]
    assert tables[0].page == 3


def test_a_provider_not_installed_falls_back_to_the_cpu() -> None:
    """RELAY_OCR_PROVIDER=cuda where onnxruntime has no CUDA (this machine): the models load
    on the CPU, the fallback is told (``provider``), and the table is read all the same."""
    from relay.extract.ocr import provider, use_provider

    try:
        use_provider("cuda")
        image = draw_table(GRID, size=30, cell=(220, 70), margin=40, bordered=True)
        assert [t.rows for t in read_tables(image)] == [GRID]
        choice = provider()
        assert (choice.asked, choice.used) == ("cuda", "cpu")
        assert choice.reason is not None and "CUDAExecutionProvider" in choice.reason
        with pytest.raises(ValueError, match="unknown OCR provider"):
            use_provider("tpu")
    finally:
        use_provider("cpu")
    assert provider().as_json() == {"asked": "cpu", "used": "cpu", "fallback": None}


def test_confidence_has_the_shape_of_the_rows() -> None:
    grid = [["item", "qty", "note"], ["apple", "2", ""], ["pear", "5", "ripe"]]
    content = encode(draw_table(grid), "PNG")
    found = extract_document(content, filename="t.png", content_type="image/png", fields=[])
    [table] = found.tables
    assert table.rows == [["item", "qty", "note"], ["apple", "2", None], ["pear", "5", "ripe"]]
    assert table.confidence is not None
    assert [len(row) for row in table.confidence] == [len(row) for row in table.rows]
    for cells, scores in zip(table.rows, table.confidence, strict=True):
        for cell, score in zip(cells, scores, strict=True):
            if cell is None:
                assert score is None
            else:
                assert score is not None and 0.5 < score <= 1.0, (cell, score)
    assert table.to_json()["confidence"] == table.confidence


def _code(content: bytes, filename: str = "x.png") -> str:
    with pytest.raises(ExtractionError) as caught:
        extract_document(content, filename=filename, content_type="", fields=[])
    return caught.value.code


def test_a_ruled_grid_with_nothing_in_its_cells_is_no_table_found() -> None:
    """Every cell blank (only the rules are ink): no table, not an error."""
    empty = [["", "", ""], ["", "", ""], ["", "", ""]]
    assert _code(encode(draw_table(empty), "PNG")) == "no_table_found"
    assert _code(encode(draw_table(empty), "PDF", resolution=150.0), "x.pdf") == "no_table_found"


def test_blank_pages_run_no_model() -> None:
    """A blank page costs no OCR: white pages, a scanner's grey noise, a 40-page blank TIFF
    and a blank PDF page are ``no_table_found`` without the models ever being imported
    (checked in a fresh process)."""
    code = """
import io, sys
import numpy as np
from PIL import Image
from relay.extract import ExtractionError, extract_document

def png(image):
    b = io.BytesIO(); image.save(b, "PNG"); return b.getvalue()

rng = np.random.default_rng(1)
noise = np.clip(rng.normal(235, 8, (2339, 1654)), 0, 255).astype(np.uint8)
white = Image.new("L", (1654, 2339), 255)
small = Image.new("L", (827, 1169), 255)  # A4 at 100 dpi: 40 pages within the pixel bound
tiff = io.BytesIO()
small.save(tiff, "TIFF", save_all=True, append_images=[small] * 39)
pdf = io.BytesIO()
white.save(pdf, "PDF", resolution=200.0)
docs = [("white.png", png(white)), ("grey.png", png(Image.fromarray(noise))),
        ("blank.tif", tiff.getvalue()), ("blank.pdf", pdf.getvalue())]
for name, content in docs:
    try:
        extract_document(content, filename=name, content_type="", fields=[])
    except ExtractionError as exc:
        print(name, exc.code)
mods = ("onnxruntime", "rapidocr_onnxruntime", "rapid_table")
print("loaded:", sorted(m for m in mods if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split("\n") == [
        "white.png no_table_found",
        "grey.png no_table_found",
        "blank.tif no_table_found",
        "blank.pdf no_table_found",
        "loaded: []",
        "",
    ], done.stdout + done.stderr


def _big_png() -> bytes:
    """5000 x 5000 px: the drawn table in the top left corner of a white page."""
    page = Image.new("RGB", (5000, 5000), "white")
    page.paste(draw_table(size=60, cell=(440, 140)), (100, 100))
    ImageDraw.Draw(page).line((100, 4800, 4900, 4800), fill="black", width=3)
    return encode(page, "PNG")


def _sandbox(**overrides: Any) -> ExtractorHost:
    config = sandbox_config(load_settings(environ={}, dotenv=None))
    values = {**config.__dict__, "timeout": 600.0, **overrides}  # a busy machine is slow
    return ExtractorHost(SandboxConfig(**values))


def test_a_5000_square_png_is_read_under_the_default_memory_limit() -> None:
    """The default ``RELAY_EXTRACT_MEMORY`` holds the models and a 25-megapixel page."""
    host = _sandbox()
    try:
        data, error = host.run(_big_png(), filename="big.png", content_type="", fields=[])
    finally:
        host.close()
    assert error is None, error
    assert data is not None
    tables = json.loads(data)["tables"]
    assert [t["rows"] for t in tables] == [
        [["item", "qty", "price"], ["apple", "2", "9.50"], ["pear", "5", "12.00"]]
    ]


def test_an_allocation_failure_in_the_models_is_extraction_memory() -> None:
    """Under a limit that holds the models but not the page's inference, onnxruntime's
    failed allocation is ``extraction_memory``, never ``extraction_error``; the next
    document is read by a fresh child."""
    host = _sandbox(memory=900 << 20)
    try:
        data, error = host.run(_big_png(), filename="big.png", content_type="", fields=[])
        assert data is None and error is not None
        assert error[0] == "extraction_memory", error
        csv, failed = host.run(b"a,b\n1,2\n", filename="x.csv", content_type="", fields=[])
        assert failed is None and csv is not None
    finally:
        host.close()


def test_a_scan_of_several_pages_has_time_for_each_page() -> None:
    """A 3-page scan takes longer than RELAY_EXTRACT_TIMEOUT alone (here 0.5 s: the models
    load in the child, then three pages of OCR) and is read whole: the deadline grows by
    RELAY_EXTRACT_PAGE_SECONDS for each page the extractor counted."""
    pages = [draw_table(), draw_table(GRID), draw_table()]
    scan = encode(pages[0], "TIFF", save_all=True, append_images=pages[1:])
    host = _sandbox(timeout=0.5, page_seconds=120.0)
    try:
        started = time.monotonic()
        data, error = host.run(scan, filename="scan.tif", content_type="", fields=[])
        elapsed = time.monotonic() - started
    finally:
        host.close()
    assert error is None, error
    assert data is not None
    assert [t["page"] for t in json.loads(data)["tables"]] == [1, 2, 3]
    assert elapsed > 0.5


def test_detection_enlarges_a_small_image_at_most_twice_a_strip_within_bounds() -> None:
    """A small image is enlarged towards 736 px on its short side (as rapidocr reads it) but
    at most twice; a thin strip no longer than 2,000 px (rapidocr took a 251 x 65 one to
    2,842 x 736)."""
    from relay.extract.ocr_models import detection_scale

    assert detection_scale(400, 503) == 736 / 400  # a PubTabNet table image
    assert detection_scale(249, 503) == 2.0  # not 736 / 249 = 3x
    assert detection_scale(65, 251) == 2.0  # not 736 / 65 = 11x
    assert detection_scale(65, 1200) == 2000 / 1200
    assert detection_scale(1000, 800) == 1.0
    assert detection_scale(2000, 1408) == 1.0  # a 200 dpi page once reduced


def test_only_lines_near_a_row_that_may_be_tabular_are_read() -> None:
    """Rows of one line each (prose) are not read, unless within reach of a row of pieces
    set apart (a table may take them in as a heading or a note)."""
    from relay.extract.ocr import _READ_REACH, _worth_reading

    def row(y: float, *spans: tuple[float, float]) -> list[tuple[float, float, float, float]]:
        return [(x1, y, x2, y + 20) for x1, x2 in spans]

    prose = [box for r in range(12) for box in row(r * 30, (0, 900))]
    assert _worth_reading(prose) == [False] * 12
    table = row(12 * 30, (0, 100), (300, 400))  # two pieces 200 px apart: may be tabular
    after = [box for r in range(13, 20) for box in row(r * 30, (0, 900))]
    wanted = _worth_reading(prose + table + after)
    rows = [12 - _READ_REACH + i for i in range(2 * _READ_REACH + 1)]
    expected = [r in rows for r in range(12)] + [True, True] + [r in rows for r in range(13, 20)]
    assert wanted == expected
    assert _worth_reading([]) == []
    # One line across a vertical ruling is cut there into cells: its row may be tabular.
    ruled = row(12 * 30, (0, 400))
    assert _worth_reading(prose + ruled + after) == [False] * 20
    crossed = _worth_reading(prose + ruled + after, rulings=[(200.0, 350.0, 390.0)])
    assert crossed == [r in rows for r in range(12)] + [True] + [r in rows for r in range(13, 20)]


WORDS = [
    ["Target group", "AYP Based on 2003-04", "Net change"],
    ["All students", "12 of 40 met", "up by 3"],
    ["Low income pupils", "7 of 31 met", "down by 1"],
]


def _scanned(image: Image.Image, seed: int = 5) -> Image.Image:
    """``image`` as the bench's office scans are made: grey, turned 0.5 degrees, noise of
    6 grey levels, JPEG at quality 85."""
    import io

    import numpy as np

    grey = image.convert("L").rotate(
        0.5, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255
    )
    pixels = np.asarray(grey, dtype=np.float64)
    pixels += np.random.default_rng(seed).normal(0.0, 6.0, pixels.shape)
    noisy = Image.fromarray(np.clip(pixels, 0, 255).round().astype(np.uint8))
    return Image.open(io.BytesIO(encode(noisy, "JPEG", quality=85))).convert("L")


@pytest.mark.parametrize("size", [20, 28], ids=["10pt-at-200dpi", "14pt-at-200dpi"])
def test_words_on_a_scan_keep_their_spaces(size: int) -> None:
    """The recogniser reads "AYP Based on 2003-04" as "AYPBasedon2003-04"; the gaps in the
    ink put the spaces back, and nowhere else: a scanned PDF (no text layer) of cells of
    several words comes back word for word."""
    image = _scanned(draw_table(WORDS, size=size, cell=(15 * size, 5 * size // 2)))
    content = encode(image, "PDF", resolution=200.0)
    result = extract_document(content, filename="scan.pdf", content_type="", fields=[])
    assert [t.rows for t in result.tables] == [WORDS]


def test_a_heading_block_set_apart_from_its_body_stays_with_it() -> None:
    """Headings over pairs of columns and a line of sub-headings, then white (four lines'
    worth) before the figures: the page's text makes two runs, the headings' and the
    body's; one table comes back, the headings over the body's columns."""
    image = Image.new("RGB", (1100, 400), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(font_path(), 24)
    xs = [40, 330, 470, 640, 800]
    heading = ["Country", "2010", "2020", "2010", "2020"]
    body = [
        ["Austria", "8.4", "8.9", "83,879", "83,871"],
        ["Belgium", "10.9", "11.6", "30,528", "30,530"],
        ["Cyprus", "0.8", "0.9", "9,251", "9,250"],
        ["Denmark", "5.5", "5.9", "43,094", "43,100"],
    ]
    draw.text((350, 40), "Population (millions)", fill="black", font=font)
    draw.text((660, 40), "Area (km2)", fill="black", font=font)
    for x, text in zip(xs, heading, strict=True):
        draw.text((x, 80), text, fill="black", font=font)
    for i, row in enumerate(body):
        for x, text in zip(xs, row, strict=True):
            draw.text((x, 200 + 40 * i), text, fill="black", font=font)
    (table,) = read_tables(image)
    assert table.rows[1:] == [heading, *body]
    assert [cell for cell in table.rows[0] if cell] == ["Population (millions)", "Area (km2)"]
    assert table.rows[0][3] == "Area (km2)"
    assert table.confidence is not None and len(table.confidence) == len(table.rows)


ZEROS = [
    ["Country", "Domestic", "Imported", "Total"],
    *[[c, "0", "100", str(n)] for c, n in (("Austria", 1), ("Belgium", 3), ("Finland", 2))],
    *[[c, "0", "100", str(n)] for c, n in (("France", 14), ("Italy", 76), ("Poland", 1))],
    ["Sweden", "0", "0", "8"],
]


@pytest.mark.parametrize("seed", [5, 6])
def test_a_lone_digit_on_a_scan_is_read_as_a_digit(seed: int) -> None:
    """A cell of one "0", read padded to a few characters' width, came back "o" or not at
    all, with a low confidence; read again at the recogniser's training width, "0"."""
    image = _scanned(draw_table(ZEROS, size=20, cell=(200, 50)), seed=seed)
    content = encode(image, "PDF", resolution=200.0)
    result = extract_document(content, filename="scan.pdf", content_type="", fields=[])
    assert [t.rows for t in result.tables] == [ZEROS]


@pytest.mark.parametrize("angle", [0.0, 1.5, -4.0])
def test_character_boxes_are_rapidocrs_on_level_and_tilted_lines(angle: float) -> None:
    """Where each character was read (``Read.placed``) is what rapidocr's ``CalRecBoxes``
    gives for the same line, box and CTC columns, corner for corner: relay maps every
    character box of a line back to the page at once."""
    import numpy as np
    from rapidocr_onnxruntime.cal_rec_boxes import CalRecBoxes

    from relay.extract.ocr import _models
    from relay.extract.ocr_models import _crop

    image = draw_table(GRID, size=26).rotate(angle, expand=True, fillcolor="white")
    bgr = np.asarray(image.convert("RGB"))[:, :, ::-1].copy()
    recognizer = _models().recognizer
    boxes = _models().detector(bgr, 1.0)
    compared = 0
    for box in boxes:
        line = _crop(bgr, box)
        text, _, columns = recognizer._read(line, 96)
        if not text:
            continue
        ours = recognizer._placed(line, box, text, columns)
        _, _, theirs, chars, scores = CalRecBoxes()([line], [box.copy()], [(text, 0.0, columns)])[0]
        assert ours == [theirs, chars, scores], text
        compared += 1
    assert compared >= 10
