"""The scan corpus: the competition PDFs as an office scanner would hand them over.

Every page of every PDF is rendered with pypdfium2 at ``DPI`` in grey, turned by
``ROTATION`` degrees (white fill, canvas expanded), given Gaussian noise of standard
deviation ``NOISE`` grey levels, and JPEG-compressed at quality ``JPEG_QUALITY`` (encoded
and decoded: the artefacts stay); a document's pages make one multi-page TIFF (deflate,
lossless over the JPEG-degraded pixels, which every reader opens).

Deterministic: the noise of a document comes from a generator seeded with ``SEED`` and
the CRC-32 of its name, so a subset (``--limit``) gets the same pages as the full run. The
TIFFs are cached in ``bench/results/scans-<VERSION>/`` (git-ignored) with a manifest of
their SHA-256; a re-run reuses them (the manifest is checked against the parameters).
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from pathlib import Path

from bench._common import RESULTS
from bench.tables.corpora import Doc

__all__ = ["DPI", "JPEG_QUALITY", "NOISE", "ROTATION", "SEED", "build_scans", "scan_tiff"]

DPI = 200
ROTATION = 0.5
NOISE = 6.0
JPEG_QUALITY = 85
SEED = 20130825  # ICDAR 2013's opening day
VERSION = "v1"
PARAMS = {
    "dpi": DPI,
    "rotation_deg": ROTATION,
    "noise_sigma": NOISE,
    "jpeg_quality": JPEG_QUALITY,
    "seed": SEED,
    "version": VERSION,
}


def cache_dir() -> Path:
    return RESULTS / f"scans-{VERSION}"


def scan_tiff(pdf: Path, seed: int) -> tuple[bytes, int]:
    """The multi-page TIFF of ``pdf`` as a scan, and its page count."""
    import numpy as np
    import pypdfium2 as pdfium
    from PIL import Image

    rng = np.random.default_rng([SEED, seed])
    frames: list[Image.Image] = []
    document = pdfium.PdfDocument(str(pdf))
    try:
        for index in range(len(document)):
            page = document[index]
            bitmap = page.render(scale=DPI / 72, grayscale=True)
            image = bitmap.to_pil().convert("L")
            bitmap.close()
            page.close()
            image = image.rotate(
                ROTATION, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255
            )
            pixels = np.asarray(image, dtype=np.float32)
            noisy = pixels + rng.normal(0.0, NOISE, pixels.shape).astype(np.float32)
            image = Image.fromarray(np.clip(noisy, 0, 255).round().astype(np.uint8), "L")
            buffer = io.BytesIO()
            image.save(buffer, "JPEG", quality=JPEG_QUALITY)
            frames.append(Image.open(io.BytesIO(buffer.getvalue())).convert("L"))
    finally:
        document.close()
    out = io.BytesIO()
    frames[0].save(
        out,
        "TIFF",
        save_all=True,
        append_images=frames[1:],
        compression="tiff_adobe_deflate",
        dpi=(DPI, DPI),
    )
    return out.getvalue(), len(frames)


def build_scans(pdfs: list[Doc], log: bool = True) -> list[Doc]:
    """The scan documents of ``pdfs`` (made once, then read from the cache)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / "manifest.json"
    manifest: dict[str, object] = {}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
    if manifest.get("params") != PARAMS:
        manifest = {"params": PARAMS, "documents": {}}
    entries = manifest["documents"]
    assert isinstance(entries, dict)
    docs: list[Doc] = []
    for pdf in pdfs:
        path = folder / f"{pdf.name}.tif"
        entry = entries.get(pdf.name)
        if not (
            isinstance(entry, dict)
            and path.exists()
            and hashlib.sha256(path.read_bytes()).hexdigest() == entry.get("sha256")
        ):
            if log:
                print(f"[tables] scanning {pdf.name} ({pdf.pages} pages)", flush=True)
            data, pages = scan_tiff(pdf.path, zlib.crc32(pdf.name.encode()))
            path.write_bytes(data)
            entry = {"pages": pages, "sha256": hashlib.sha256(data).hexdigest()}
            entries[pdf.name] = entry
            manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
        docs.append(Doc(pdf.name, path, "image", int(entry["pages"]), pdf.truth))
    return docs
