"""The OCR models' graphs rewritten (``relay.extract.ocr_graphs``): each rewrite computes what
the original computes, on a small graph built here with every case (a padded and an unpadded
convolution behind one affine block, a hard-swish, a Conv with no bias) and on the real
PP-OCRv4 models from the rapidocr wheel, run by onnxruntime on both sides."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from relay.extract.ocr_graphs import simplified, simplify


def _run(model: onnx.ModelProto | bytes, feeds: dict[str, Any]) -> list[Any]:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in model.graph.node if n.op_type != "Constant")


def _scalar(name: str, value: float) -> onnx.NodeProto:
    tensor = numpy_helper.from_array(np.array([value], dtype=np.float32), name)
    return helper.make_node("Constant", [], [name], value=tensor)


def _model(
    nodes: list[onnx.NodeProto], init: list[onnx.TensorProto], x: list[int], y: list[int]
) -> onnx.ModelProto:
    """A model of ``nodes`` (opset 17) from input ``x`` to output ``y``, of those shapes."""
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _small_graph() -> onnx.ModelProto:
    """x -> Conv(no bias) -> Mul 0.7 -> Add 0.3 -> hard-swish (4 ops) -> Mul 1.9 -> Add -0.4
    -> {Conv 3x3 padded, Conv 1x1}; their sum -> Mul by a tensor (left alone) -> y."""
    rng = np.random.default_rng(7)
    init = [
        numpy_helper.from_array(rng.normal(size=(6, 3, 3, 3)).astype(np.float32), "w0"),
        numpy_helper.from_array(rng.normal(size=(6, 6, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(size=(6,)).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.normal(size=(6, 6, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.normal(size=(6,)).astype(np.float32), "b2"),
        numpy_helper.from_array(rng.normal(size=(1, 6, 1, 1)).astype(np.float32), "gain"),
    ]
    nodes = [
        _scalar("s0", 0.7),
        _scalar("c0", 0.3),
        _scalar("three", 3.0),
        _scalar("zero", 0.0),
        _scalar("six", 6.0),
        _scalar("s1", 1.9),
        _scalar("c1", -0.4),
        helper.make_node("Conv", ["x", "w0"], ["conv0"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["s0", "conv0"], ["m0"]),
        helper.make_node("Add", ["m0", "c0"], ["a0"]),
        helper.make_node("Add", ["a0", "three"], ["h1"]),
        helper.make_node("Clip", ["h1", "zero", "six"], ["h2"]),
        helper.make_node("Mul", ["a0", "h2"], ["h3"]),
        helper.make_node("Div", ["h3", "six"], ["hs"]),
        helper.make_node("Mul", ["s1", "hs"], ["m1"]),
        helper.make_node("Add", ["m1", "c1"], ["a1"]),
        helper.make_node("Conv", ["a1", "w1", "b1"], ["padded"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["pointwise"]),
        helper.make_node("Add", ["padded", "pointwise"], ["both"]),
        helper.make_node("Mul", ["both", "gain"], ["y"]),
    ]
    return _model(nodes, init, [1, 3, 12, 10], [1, 6, 12, 10])


def test_each_rewrite_computes_what_the_original_does() -> None:
    original = _small_graph()
    x = np.random.default_rng(3).normal(scale=2.0, size=(1, 3, 12, 10)).astype(np.float32)
    (expected,) = _run(original, {"x": x})
    rewritten = simplify(_small_graph())
    onnx.checker.check_model(rewritten)
    (got,) = _run(rewritten, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    ops = _ops(rewritten)
    # A folded the first affine block, B joined the hard-swish, C folded the second block:
    # one Add is left before the padded convolution, none before the pointwise one.
    assert ops == Counter({"Conv": 3, "HardSwish": 1, "Add": 2, "Mul": 1}), ops
    shift = next(n for n in rewritten.graph.node if n.op_type == "Add" and n.input[0] == "hs")
    assert [n.input[0] for n in rewritten.graph.node if n.op_type == "Conv"][1:] == [
        shift.output[0],
        "hs",
    ]


def test_the_head_and_excitation_rewrites_compute_what_the_original_does() -> None:
    """D: ConvTranspose -> Add(bias) -> BatchNormalization; E: z + z * gate(z)."""
    rng = np.random.default_rng(11)
    init = [
        numpy_helper.from_array(rng.normal(size=(4, 5, 2, 2)).astype(np.float32), "wt"),
        numpy_helper.from_array(rng.normal(size=(1, 5, 1, 1)).astype(np.float32), "bt"),
        numpy_helper.from_array(rng.uniform(0.5, 2, size=5).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.normal(size=5).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.normal(size=5).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2, size=5).astype(np.float32), "var"),
    ]
    nodes = [
        helper.make_node("ConvTranspose", ["x", "wt"], ["up"], strides=[2, 2]),
        helper.make_node("Add", ["up", "bt"], ["biased"]),
        helper.make_node("BatchNormalization", ["biased", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["z"]),
        helper.make_node("GlobalAveragePool", ["z"], ["pooled"]),
        helper.make_node("HardSigmoid", ["pooled"], ["gate"]),
        helper.make_node("Mul", ["z", "gate"], ["excited"]),
        helper.make_node("Add", ["z", "excited"], ["y"]),
    ]
    model = _model(nodes, init, [1, 4, 6, 7], [1, 5, 12, 14])
    x = rng.normal(size=(1, 4, 6, 7)).astype(np.float32)
    (expected,) = _run(model, {"x": x})
    rewritten = simplify(model)
    onnx.checker.check_model(rewritten)
    (got,) = _run(rewritten, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert _ops(rewritten)["BatchNormalization"] == 0
    (added,) = [n for n in rewritten.graph.node if n.op_type == "Add"]
    assert added.input[0] == "gate"  # 1 + gate, one value a channel, then one Mul


def test_a_graph_without_the_patterns_is_left_as_it_is() -> None:
    nodes = [
        _scalar("two", 2.0),
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Mul", ["c", "c"], ["squared"]),  # no constant operand
        helper.make_node("Add", ["squared", "two"], ["y"]),  # its reader is no Conv
    ]
    init = [numpy_helper.from_array(np.ones((2, 2, 1, 1), dtype=np.float32), "w")]
    model = _model(nodes, init, [1, 2, 4, 4], [1, 2, 4, 4])
    before = [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node][1:]
    after = [(n.op_type, list(n.input), list(n.output)) for n in simplify(model).graph.node]
    assert after == before


def _wheel_model(name: str) -> Path:
    import rapidocr_onnxruntime

    return Path(rapidocr_onnxruntime.__file__).parent / "models" / name


@pytest.fixture(scope="module")
def page() -> Any:
    from relay.devtools.drawn_tables import draw_table

    grid = [["region", "units", "price"], ["north", "12", "4.50"], ["south", "7", "19.25"]]
    return np.asarray(draw_table(grid, size=22).convert("RGB"))[:, :, ::-1]


def test_the_detector_rewritten_gives_the_same_map(page: Any) -> None:
    path = _wheel_model("ch_PP-OCRv4_det_infer.onnx")
    height, width = (s - s % 32 for s in page.shape[:2])
    tensor = (page[:height, :width].astype(np.float32) * (2 / 255) - 1).transpose(2, 0, 1)[None]
    (expected,) = _run(onnx.load(str(path)), {"x": tensor})[:1]
    (got,) = _run(simplified(path), {"x": tensor})[:1]
    assert float(expected.max()) > 0.9  # the drawn text is found at all
    assert float(np.abs(got - expected).max()) < 1e-3
    ops = _ops(onnx.load_from_string(simplified(path)))
    assert ops["Clip"] == 0 and ops["Div"] == 0 and ops["HardSwish"] == 24, ops
    assert ops["Mul"] < 86 // 4 and ops["Add"] < 89 // 3, ops
    rewritten = onnx.load_from_string(simplified(path))
    made_by = {out: n.op_type for n in rewritten.graph.node for out in n.output}
    after_deconv = [
        n.op_type
        for n in rewritten.graph.node
        if any(made_by.get(i) == "ConvTranspose" for i in n.input)
    ]
    assert after_deconv == ["Relu", "Sigmoid"]  # their bias adds and one batch norm folded in
    assert sum("__one" in n.input for n in rewritten.graph.node) == 8  # excitation blocks


def test_the_recogniser_rewritten_reads_the_same_characters(page: Any) -> None:
    import cv2

    path = _wheel_model("ch_PP-OCRv4_rec_infer.onnx")
    lines = [cv2.resize(page[y : y + 40, 10:330], (384, 48)) for y in (5, 45, 85)]
    tensor = np.stack(
        [(line.astype(np.float32) * (2 / 255) - 1).transpose(2, 0, 1) for line in lines]
    )
    original = onnx.load(str(path))
    (expected,) = _run(original, {original.graph.input[0].name: tensor})[:1]
    (got,) = _run(simplified(path), {original.graph.input[0].name: tensor})[:1]
    assert expected.shape == got.shape
    assert (got.argmax(-1) == expected.argmax(-1)).all()
    assert float(np.abs(got - expected).max()) < 1e-3
