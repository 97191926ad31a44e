"""Exact rewrites of the OCR models' graphs, made when a process loads them.

PP-OCRv4's detector and recogniser (PP-LCNetV3 backbones) reach onnxruntime as Paddle
exported them: every hard-swish spelled out as four element-wise operators (``Add 3``,
``Clip 0..6``, ``Mul``, ``Div 6``), and every convolution followed by a learnable affine
block (``Mul`` by a scalar, ``Add`` of a scalar) that onnxruntime does not fold. Each of
those operators reads and writes a whole feature map, and on one CPU thread they took more
time than the convolutions (a 200 dpi scan page, profiled: convolutions 31 %, ``Add``,
``Mul``, ``Clip`` and ``Div`` 46 %). :func:`simplify` rewrites them to what they compute:

* **A** a ``Conv`` whose only reader is ``Mul`` by a scalar ``s`` (then, optionally, ``Add``
  of a scalar ``c``): the convolution with weights ``W*s`` and bias ``bias*s + c``;
* **B** ``Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(6)``: ``HardSwish(x)``, which
  onnxruntime fuses into the convolution before it;
* **C** ``Mul`` by a scalar ``s`` then ``Add`` of a scalar ``c`` read only by convolutions:
  ``s`` goes into their weights; an unpadded convolution takes ``c`` into its bias
  (``c * sum(W)`` per output channel), a padded one reads ``x + c/s`` (its zero padding
  stays zero, as before);
* **D** a ``ConvTranspose`` followed by ``Add`` of a per-channel constant (its bias, as Paddle
  exports it) and, optionally, ``BatchNormalization``: the transposed convolution with that
  bias and the batch norm in its weights (the detector's head, at the page's full size);
* **E** ``Add(x, Mul(x, s))``, a squeeze-and-excitation block added back to its input:
  ``Mul(x, Add(s, 1))``, where ``s`` is one value per channel: one pass over ``x``, not two.

Nothing is approximated: the rewritten detector's probability map differs from the
original's by under 1e-4, the recogniser's best character is the same at every position of
every line measured (``tests/test_extract_ocr_graphs.py``). What it saves is measured by
``python -m bench pages``. A graph with none of the patterns comes back unchanged
(SLANet-plus already uses ``HardSwish`` and batch norms, which onnxruntime fuses itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # onnx and numpy are imported when the models are loaded
    import numpy as np
    import onnx

__all__ = ["simplified", "simplify"]

# HardSwish is an operator from this opset of the default ONNX domain on.
_HARDSWISH_OPSET = 14


def simplified(path: Path) -> bytes:
    """The model at ``path``, rewritten by :func:`simplify`, serialised for onnxruntime."""
    import onnx
    from onnx import version_converter

    model = onnx.load(str(path))
    if _opset(model) < _HARDSWISH_OPSET:
        model = version_converter.convert_version(model, _HARDSWISH_OPSET)
    return bytes(simplify(model).SerializeToString())


def _opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def simplify(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the rewrites A to E applied (in place), its constants as
    initializers. B needs opset 14 (``HardSwish``); below it, B is left out."""
    graph = _Graph(model)
    graph.fold_affine_into_conv()
    if _opset(model) >= _HARDSWISH_OPSET:
        graph.join_hardswish()
    graph.fold_affine_before_conv()
    graph.fold_into_conv_transpose()
    graph.join_excitation()
    graph.write()
    return model


class _Graph:
    """A graph's nodes (in order) and constant values, edited, then written back."""

    def __init__(self, model: onnx.ModelProto) -> None:
        from onnx import numpy_helper

        self.graph = model.graph
        self.values: dict[str, np.ndarray[Any, Any]] = {
            t.name: numpy_helper.to_array(t) for t in self.graph.initializer
        }
        self.nodes: list[onnx.NodeProto] = []
        for node in self.graph.node:
            if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
                self.values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
            else:
                self.nodes.append(node)
        self.outputs = {o.name for o in self.graph.output}

    # -- looking

    def readers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.nodes if name in n.input]

    def only_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The one node reading ``name``, if it is an ``op_type`` and ``name`` is not an
        output of the graph."""
        readers = self.readers(name)
        if len(readers) == 1 and readers[0].op_type == op_type and name not in self.outputs:
            return readers[0]
        return None

    def scalar(self, node: onnx.NodeProto) -> tuple[float, str] | None:
        """A binary node's constant scalar operand and its other (computed) input."""
        if len(node.input) != 2:
            return None
        first, second = node.input
        for const, other in ((first, second), (second, first)):
            value = self.values.get(const)
            if value is not None and value.size == 1 and other not in self.values:
                return float(value.ravel()[0]), other
        return None

    def constant(self, name: str) -> float | None:
        value = self.values.get(name)
        return float(value.ravel()[0]) if value is not None and value.size == 1 else None

    def weights(self, conv: onnx.NodeProto) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        import numpy as np

        weight = self.values[conv.input[1]].astype(np.float32)
        if len(conv.input) > 2 and conv.input[2]:
            bias = self.values[conv.input[2]].astype(np.float32)
        else:
            bias = np.zeros(weight.shape[0], dtype=np.float32)
        return weight, bias

    @staticmethod
    def padded(conv: onnx.NodeProto) -> bool:
        for attribute in conv.attribute:
            if attribute.name == "pads" and any(attribute.ints):
                return True
            if attribute.name == "auto_pad" and attribute.s not in (b"NOTSET", b"VALID"):
                return True
        return False

    # -- editing

    def set_weights(
        self, conv: onnx.NodeProto, weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any]
    ) -> None:
        """``conv`` (a ``Conv`` or ``ConvTranspose``) reads ``weight`` and ``bias`` now."""
        import numpy as np

        weight_name, bias_name = f"{conv.output[0]}__w", f"{conv.output[0]}__b"
        self.values[weight_name] = weight.astype(np.float32)
        self.values[bias_name] = bias.astype(np.float32)
        source = conv.input[0]
        del conv.input[:]
        conv.input.extend([source, weight_name, bias_name])

    def drop(self, *gone: onnx.NodeProto) -> None:
        ids = {id(n) for n in gone}
        self.nodes = [n for n in self.nodes if id(n) not in ids]

    # -- the rewrites

    def fold_affine_into_conv(self) -> None:
        """A: ``Conv -> Mul(s) [-> Add(c)]`` as one ``Conv``."""
        for conv in [n for n in self.nodes if n.op_type == "Conv"]:
            mul = self.only_reader(conv.output[0], "Mul")
            scale = self.scalar(mul) if mul is not None else None
            if mul is None or scale is None:
                continue
            weight, bias = self.weights(conv)
            weight, bias, last = weight * scale[0], bias * scale[0], mul
            add = self.only_reader(mul.output[0], "Add")
            shift = self.scalar(add) if add is not None else None
            if add is not None and shift is not None:
                bias, last = bias + shift[0], add
            output = last.output[0]
            self.set_weights(conv, weight, bias)
            conv.output[0] = output
            self.drop(*{id(n): n for n in (mul, last)}.values())

    def join_hardswish(self) -> None:
        """B: ``Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(6)`` as ``HardSwish(x)``."""
        from onnx import helper

        for add in [n for n in self.nodes if n.op_type == "Add"]:
            three = self.scalar(add)
            if three is None or three[0] != 3.0:
                continue
            source = three[1]
            clip = self.only_reader(add.output[0], "Clip")
            if clip is None or [self.constant(i) for i in clip.input[1:]] != [0.0, 6.0]:
                continue
            mul = self.only_reader(clip.output[0], "Mul")
            if mul is None or sorted(mul.input) != sorted([source, clip.output[0]]):
                continue
            div = self.only_reader(mul.output[0], "Div")
            if div is None or list(div.input[:1]) != [mul.output[0]]:
                continue
            if self.constant(div.input[1]) != 6.0:
                continue
            node = helper.make_node("HardSwish", [source], [div.output[0]], name=div.output[0])
            self.nodes.insert(self.nodes.index(add), node)
            self.drop(add, clip, mul, div)

    def fold_affine_before_conv(self) -> None:
        """C: ``Mul(s) -> Add(c)`` read only by convolutions, folded into them."""
        import numpy as np
        from onnx import helper

        for mul in [n for n in self.nodes if n.op_type == "Mul"]:
            scale = self.scalar(mul)
            if scale is None or scale[0] == 0.0:
                continue
            add = self.only_reader(mul.output[0], "Add")
            shift = self.scalar(add) if add is not None else None
            if add is None or shift is None:
                continue
            convs = self.readers(add.output[0])
            if add.output[0] in self.outputs or not all(
                n.op_type == "Conv" and list(n.input[:1]) == [add.output[0]] for n in convs
            ):
                continue
            (s, source), c = scale, shift[0]
            shifted = f"{add.output[0]}__shifted"
            for conv in convs:
                weight, bias = self.weights(conv)
                if self.padded(conv):
                    self.set_weights(conv, weight * s, bias)
                    conv.input[0] = shifted
                else:
                    per_output = weight.reshape(weight.shape[0], -1).sum(axis=1)
                    self.set_weights(conv, weight * s, bias + c * per_output)
                    conv.input[0] = source
            if any(n.input[0] == shifted for n in convs):
                offset = f"{shifted}__offset"
                self.values[offset] = np.array(c / s, dtype=np.float32)
                node = helper.make_node("Add", [source, offset], [shifted], name=shifted)
                self.nodes.insert(self.nodes.index(mul), node)
            self.drop(mul, add)

    def fold_into_conv_transpose(self) -> None:
        """D: ``ConvTranspose -> Add(bias) [-> BatchNormalization]`` as one ``ConvTranspose``."""
        import numpy as np

        for deconv in [n for n in self.nodes if n.op_type == "ConvTranspose"]:
            group = next((a.i for a in deconv.attribute if a.name == "group"), 1)
            add = self.only_reader(deconv.output[0], "Add")
            if add is None or group != 1 or (len(deconv.input) > 2 and deconv.input[2]):
                continue
            weight_name = deconv.input[1]
            bias_name = next((i for i in add.input if i != deconv.output[0]), "")
            weight, bias = self.values.get(weight_name), self.values.get(bias_name)
            if weight is None or bias is None or bias.size != weight.shape[1]:
                continue
            weight, bias, last = weight.astype(np.float32), bias.ravel().astype(np.float32), add
            norm = self.only_reader(add.output[0], "BatchNormalization")
            if norm is not None and all(i in self.values for i in norm.input[1:5]):
                gamma, beta, mean, var = (
                    self.values[i].astype(np.float32) for i in norm.input[1:5]
                )
                epsilon = next((a.f for a in norm.attribute if a.name == "epsilon"), 1e-5)
                factor = gamma / np.sqrt(var + np.float32(epsilon))
                weight = weight * factor.reshape(1, -1, 1, 1)
                bias, last = (bias - mean) * factor + beta, norm
            self.set_weights(deconv, weight, bias)
            deconv.output[0] = last.output[0]
            self.drop(*{id(n): n for n in (add, last)}.values())

    def join_excitation(self) -> None:
        """E: ``Add(x, Mul(x, s))`` as ``Mul(x, Add(s, 1))``."""
        import numpy as np
        from onnx import helper

        one = "__one"
        for add in [n for n in self.nodes if n.op_type == "Add"]:
            if len(add.input) != 2:
                continue
            for source, product in (tuple(add.input), tuple(reversed(add.input))):
                producer = next((n for n in self.nodes if product in n.output), None)
                if producer is None or producer.op_type != "Mul" or product in self.outputs:
                    continue
                if self.readers(product) != [add] or list(producer.input).count(source) != 1:
                    continue
                gate = next(i for i in producer.input if i != source)
                if source in self.values or gate in self.values:
                    continue
                self.values[one] = np.array(1.0, dtype=np.float32)
                opened = f"{gate}__plus_one"
                node = helper.make_node("Add", [gate, one], [opened], name=opened)
                self.nodes.insert(self.nodes.index(producer), node)
                del producer.input[:]
                producer.input.extend([source, opened])
                producer.output[0] = add.output[0]
                self.drop(add)
                break

    def write(self) -> None:
        """The edited nodes and the constants they read back into the graph."""
        from onnx import numpy_helper

        used = {name for node in self.nodes for name in node.input}
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)
        del self.graph.initializer[:]
        self.graph.initializer.extend(
            numpy_helper.from_array(value, name)
            for name, value in self.values.items()
            if name in used
        )
        # Shapes are inferred again by onnxruntime; stale ones for dropped tensors would mislead.
        del self.graph.value_info[:]
